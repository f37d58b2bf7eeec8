#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, ninth GPU round: Lamport kernel that loads its first input line while the epoch is
# fetched: correctness (Lamport in every mode), then 8 B-512 KiB in graphs
# against the previous Lamport kernel (buildv = commit before, preloaded) and NCCL.
# usage: test/device/round17.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run direct_2   60 $T --mode direct --ranks 2 --quick --algos lamport --replays 200 --soak 5000 --max-mb 1
run direct_8   60 $T --mode direct --ranks 8 --quick --algos lamport --replays 50 --soak 2000 --max-mb 1
run nccl_g2    90 $T --mode nccl --ranks 2 --quick --soak 5000 --replays 300 --max-mb 16
run nccl_procs 90 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 16
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for n in 3 5 8; do run boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks $n "${A[@]}"; done
P=$B/perf/all_reduce_perf
V=$PWD/buildv/src/libsymmcoll.so.0
S=(-N 2 -d bfloat16 -b 8 -e 512K -f 4 -w 10 -n 50 -c 1 -G 20)
for rep in 1 2 3; do
  run new_$rep 60 $P "${S[@]}"
  run old_$rep 60 env LD_PRELOAD=$V $P "${S[@]}"
done
run nccl_1 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 - "$out" <<'PY'
import sys, os, re, collections, statistics
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(new|old|nccl)_(\d)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 9 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append((float(x[5]), x[8]))
cfgs = sorted(t); sizes = sorted(t[cfgs[0]])
print("bytes      " + " ".join(f"{c:>14}" for c in cfgs) + "  new/nccl")
for s in sizes:
    med = {c: statistics.median(v[0] for v in t[c][s]) for c in cfgs}
    print(f"{s:<10}", " ".join(f"{med[c]:9.2f} w={max(v[1] for v in t[c][s]):>3}" for c in cfgs), f"{med['new']/med['nccl']:.3f}")
PY
tar -C "$out" -czf "$out/../round17_logs.tgz" . && rm -rf "$out"
