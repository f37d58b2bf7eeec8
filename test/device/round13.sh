#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, fifth GPU round: with the split-barrier two-shot, does the round size still matter?
# Staging 64 MiB (default: 3 rounds at 64 MiB), 128 and 256 MiB (2 and 1 rounds), and round caps
# of 4, 8 and 16 MiB with 64 MiB staging. Graph, ours only, 8-256 MiB, best of two runs.
# usage: test/device/round13.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 256M -f 2 -w 5 -n 20 -c 0 -G 20)
for rep in 1 2; do
  run stg64_$rep 60 $P "${S[@]}"
  run stg128_$rep 60 env SYMMCOLL_BUFFER_BYTES=$((128 << 20)) $P "${S[@]}"
  run stg256_$rep 60 env SYMMCOLL_BUFFER_BYTES=$((256 << 20)) $P "${S[@]}"
  for r in 4 8 16; do run round${r}M_$rep 60 env SYMMCOLL_AR_ROUND_BYTES=$((r << 20)) $P "${S[@]}"; done
done
print_rows
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(.+)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 6 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append(float(x[5]))
cfgs = sorted(t); sizes = sorted(t[cfgs[0]])
print("bytes     " + " ".join(f"{c:>9}" for c in cfgs))
for s in sizes: print(f"{s:<10}", " ".join(f"{min(t[c].get(s,[0])):9.2f}" for c in cfgs))
PY
tar -C "$out" -czf "$out/../round13_logs.tgz" . && rm -rf "$out"
