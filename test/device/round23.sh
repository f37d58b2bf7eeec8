#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4: grid and round size for the 2-rank two-shot at 16-256 MiB (graphs), by knobs only:
# SYMMCOLL_AR_MAX_BLOCKS 96/112/120/128 and SYMMCOLL_AR_ROUND_BYTES 16 MiB, against NCCL.
# usage: test/device/round23.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 16M -e 256M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  for b in 96 112 120 128; do run b${b}_$rep 60 env SYMMCOLL_AR_MAX_BLOCKS=$b $P "${S[@]}"; done
  run r16_$rep 60 env SYMMCOLL_AR_ROUND_BYTES=16777216 $P "${S[@]}"
done
run nccl_1 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(b\d+|r16|nccl)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 9 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append((float(x[5]), x[8]))
cfgs = [c for c in ("b96", "b112", "b120", "b128", "r16", "nccl") if c in t]
print("graph oop time (min of runs), ratio to NCCL; bytes " + " ".join(f"{c:>14}" for c in cfgs))
for s in sorted(t["nccl"]):
    n = min(t["nccl"][s])[0]
    print(f"{s:<10} " + " ".join(f"{min(t[c][s])[0]:8.2f} {min(t[c][s])[0]/n:5.3f}" for c in cfgs if s in t[c]) + "  wrong=" + str(max(int(v[1]) for c in cfgs for v in t[c].get(s, []))))
PY
tar -C "$out" -czf "$out/../round23_logs.tgz" . && rm -rf "$out"
