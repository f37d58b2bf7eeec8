#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, fourth GPU round: two-shot knobs at 8-256 MiB (graph, ours only): 128 against 132
# blocks (one per SM), and copy unroll 8 against 4 (a second library built with kUnroll = 8 in
# buildv, preloaded); host cost of the runtime and driver launch calls.
# usage: test/device/round12.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run direct_2_b132 90 env SYMMCOLL_AR_MAX_BLOCKS=132 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run procs_b132 120 env SYMMCOLL_AR_MAX_BLOCKS=132 $T --mode nccl --procs 2 --quick --soak 2000 --replays 100 --max-mb 256
run launch_costs 60 $B/perf/launch_costs
P=$B/perf/all_reduce_perf
V=$PWD/buildv/src/libsymmcoll.so.0
S=(-N 2 -d bfloat16 -b 8M -e 256M -f 2 -w 5 -n 20 -c 0 -G 20)
for rep in 1 2; do
  run u4_b128_$rep 60 $P "${S[@]}"
  run u4_b132_$rep 60 env SYMMCOLL_AR_MAX_BLOCKS=132 $P "${S[@]}"
  run u8_b128_$rep 60 env LD_PRELOAD=$V $P "${S[@]}"
  run u8_b132_$rep 60 env LD_PRELOAD=$V SYMMCOLL_AR_MAX_BLOCKS=132 $P "${S[@]}"
done
print_rows
cat "$out/launch_costs.log"
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(u\d_b\d+)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 6 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append(float(x[5]))
cfgs = sorted(t); sizes = sorted(t[cfgs[0]])
print("bytes " + " ".join(f"{c:>10}" for c in cfgs))
for s in sizes: print(s, " ".join(f"{min(t[c].get(s,[0])):10.2f}" for c in cfgs))
PY
tar -C "$out" -czf "$out/../round12_logs.tgz" . && rm -rf "$out"
