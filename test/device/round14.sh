#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, sixth GPU round: two-shot with warp roles (6 push warps run A and B, 2 gather warps
# run C one round behind): correctness in every mode (many rounds included), then ours at
# 8 MiB-1 GiB in graphs against the same kernel with 7 push warps (buildv, preloaded), and
# against NCCL in the same run.
# usage: test/device/round14.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run direct_2        90 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_chunked  60 $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run direct_8        90 $T --mode direct --ranks 8 --quick --replays 50 --soak 2000 --max-mb 16
run rounds_1M       60 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run nccl_g2         90 $T --mode nccl --ranks 2 --quick --soak 5000 --replays 300 --max-mb 64
run nccl_procs      120 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for n in 3 8; do run boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks $n "${A[@]}"; done
P=$B/perf/all_reduce_perf
V=$PWD/buildv/src/libsymmcoll.so.0
S=(-N 2 -d bfloat16 -b 8M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run w6_$rep 90 $P "${S[@]}"
  run w7_$rep 90 env LD_PRELOAD=$V $P "${S[@]}"
done
run nccl_1 90 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(w\d|nccl)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 9 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append((float(x[5]), x[8]))
cfgs = sorted(t); sizes = sorted(t[cfgs[0]])
print("bytes      " + " ".join(f"{c:>14}" for c in cfgs))
for s in sizes: print(f"{s:<10}", " ".join(f"{min(t[c][s])[0]:9.2f} w={max(v[1] for v in t[c][s]):>3}" for c in cfgs))
PY
tar -C "$out" -czf "$out/../round14_logs.tgz" . && rm -rf "$out"
