#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4: unrolls of the 2-rank two-shot (copies in flight CU, reduce vectors in flight RU),
# knob SYMMCOLL_AR_UNROLL_VARIANT of an uncommitted build: 0 = (4,2) current, 1 = (2,2),
# 2 = (4,4), 3 = (8,2); graphs at 16-256 MiB against NCCL, plus a correctness pass of each.
# The knob was never committed: (4,4) was 1-2.6% faster at 16-32 MiB only, not at 64 MiB+.
# usage: test/device/round24.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
for v in 1 2 3; do
  run v${v}_direct_2 90 env SYMMCOLL_AR_UNROLL_VARIANT=$v $T --mode direct --ranks 2 --quick --algos twoshot --replays 50 --soak 0 --max-mb 64
done
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 16M -e 256M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  for v in 0 1 2 3; do run u${v}_$rep 60 env SYMMCOLL_AR_UNROLL_VARIANT=$v $P "${S[@]}"; done
done
run nccl_1 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(u\d|nccl)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 9 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append((float(x[5]), x[8]))
cfgs = [c for c in ("u0", "u1", "u2", "u3", "nccl") if c in t]
print("graph oop time (min of runs), ratio to NCCL; bytes " + " ".join(f"{c:>14}" for c in cfgs))
for s in sorted(t["nccl"]):
    n = min(t["nccl"][s])[0]
    print(f"{s:<10} " + " ".join(f"{min(t[c][s])[0]:8.2f} {min(t[c][s])[0]/n:5.3f}" for c in cfgs if s in t[c]) + "  wrong=" + str(max(int(v[1]) for c in cfgs for v in t[c].get(s, []))))
PY
tar -C "$out" -czf "$out/../round24_logs.tgz" . && rm -rf "$out"
