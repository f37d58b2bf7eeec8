#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Third batched GPU round on a prebuilt tree (2 GPUs): correctness of the push two-shot (rounds
# inside one launch) and of the Lamport kernel up to 256 KiB in every rank mode, the transport
# suite after the clean-ups, then per-algorithm sweeps (2 processes, bf16, graph and eager) that
# set the tuner's 2-rank row.
# usage: test/device/round3.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
q=(--quick --replays 100 --soak 2000)
run direct_2        120 $T --mode direct --ranks 2 "${q[@]}" --max-mb 256
run direct_chunked  60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
for n in 3 8; do run direct_ranks_$n 90 $T --mode direct --ranks $n --quick --soak 1000 --replays 50 --max-mb 4; done
run nccl_g2_r1000   150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run nccl_procs_r1000 150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run nccl_threads    60  $T --mode nccl --threads --ranks 2 "${q[@]}" --max-mb 16
for n in 5 8; do run ar_boot_$n 90 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
run ar_soak_1e6 150 $T --mode nccl --ranks 2 --quick --soak 1000000 --replays 0 --max-mb 4 --no-abort
TP=$B/test/transport/test_peer_mem
run tr_procs 40 $TP peers procs
run tr_threads 40 $TP peers threads
run tr_cycles_procs 150 $TP cycles procs 1000
run tr_mcguard 40 env SYMMCOLL_NCCL_LIB="$BOOT" $TP mcguard
P=$B/perf/all_reduce_perf
sweep() { # name bmin bmax extra-env...
  local name=$1 lo=$2 hi=$3; shift 3
  run perf_$name 90 env "$@" $P -N 2 -d bfloat16 -b "$lo" -e "$hi" -f 2 -w 5 -n 30 -c 0 ${G:+-G $G}
}
G=20
sweep G_nccl 1K 1G SYMMCOLL_DISABLE=1
sweep G_lamport 1K 256K SYMMCOLL_ALLREDUCE_ALGO=lamport
sweep G_oneshot 16K 4M SYMMCOLL_ALLREDUCE_ALGO=oneshot
sweep G_twoshot 64K 1G SYMMCOLL_ALLREDUCE_ALGO=twoshot
sweep G_twoshot128 1M 1G SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_AR_MAX_BLOCKS=128
G=
sweep E_nccl 1K 4M SYMMCOLL_DISABLE=1
sweep E_lamport 1K 256K SYMMCOLL_ALLREDUCE_ALGO=lamport
sweep E_oneshot 16K 4M SYMMCOLL_ALLREDUCE_ALGO=oneshot
sweep E_twoshot 64K 4M SYMMCOLL_ALLREDUCE_ALGO=twoshot
sweep E_nccl2 1K 4M SYMMCOLL_DISABLE=1
print_rows
python3 - "$out" <<'PY'
import sys, re, os
out = sys.argv[1]
tab, cols = {}, []
for f in sorted(os.listdir(out)):
    m = re.match(r"perf_([GE])_(\w+)\.log", f)
    if not m: continue
    cols.append((m.group(1), m.group(2)))
    for line in open(os.path.join(out, f)):
        p = line.split()
        if len(p) > 6 and p[0].isdigit() and p[2] == "bfloat16":
            tab.setdefault((m.group(1), int(p[0])), {})[m.group(2)] = float(p[5])
for g in "GE":
    names = [c for gg, c in cols if gg == g]
    print(f"\n== {g}: out-of-place us (2 procs, bf16)\n{'bytes':>10} " + " ".join(f"{n:>11}" for n in names))
    for (gg, b), d in sorted(tab.items()):
        if gg == g:
            print(f"{b:>10} " + " ".join(f"{d.get(a, float('nan')):11.2f}" for a in names))
PY
