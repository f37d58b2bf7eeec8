#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Second batched GPU round on a prebuilt tree: transport suite (every rank mode, bootstrap 2..8,
# security, cycles, multicast guard), all-reduce in thread/bootstrap modes, >= 1000 graph replays
# in -g 2 and 2-process modes, the 10^6-call soak, then block-size experiments for the tuner.
# usage: test/device/round2.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_procs 40 env SYMMCOLL_NCCL_LIB="$REAL" $TP peers procs
run tr_initall 40 env SYMMCOLL_NCCL_LIB="$REAL" $TP peers initall
run tr_threads 40 env SYMMCOLL_NCCL_LIB="$REAL" $TP peers threads
run tr_nonmember 40 env SYMMCOLL_NCCL_LIB="$REAL" $TP security nonmember
run tr_squat 40 env SYMMCOLL_NCCL_LIB="$REAL" $TP security squat
run tr_mcguard 40 env SYMMCOLL_NCCL_LIB="$BOOT" $TP mcguard
run tr_cycles_1000 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP cycles bootstrap 1000
for n in 2 3 4 5 6 7 8; do run tr_boot_$n 40 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap $n; done
T=$B/test/algos/test_allreduce
run ar_threads 60 env SYMMCOLL_NCCL_LIB="$REAL" $T --mode nccl --threads --ranks 2 --quick --soak 2000 --replays 100 --max-mb 16
for n in 3 4 6 8; do run ar_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
run ar_g2_replays1000 120 env SYMMCOLL_NCCL_LIB="$REAL" $T --mode nccl --ranks 2 --quick --soak 0 --replays 1000 --max-mb 16
run ar_procs_replays1000 120 env SYMMCOLL_NCCL_LIB="$REAL" $T --mode nccl --procs 2 --quick --soak 0 --replays 1000 --max-mb 16
run ar_soak_1e6 150 env SYMMCOLL_NCCL_LIB="$REAL" $T --mode nccl --ranks 2 --quick --soak 1000000 --replays 0 --max-mb 4 --no-abort
P=$B/perf/all_reduce_perf
for a in lamport oneshot; do for bpb in 2048 4096; do
  run perf_${a}_bpb$bpb 40 "$REAL" env SYMMCOLL_ALLREDUCE_ALGO=$a SYMMCOLL_AR_BYTES_PER_BLOCK=$bpb $P -N 2 -d bfloat16 -b 1K -e 1M -f 4 -w 5 -n 30 -c 0 -G 20
done; done
for mb in 32 64; do
  run perf_twoshot_mb$mb 60 env SYMMCOLL_NCCL_LIB="$REAL" env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_AR_MAX_BLOCKS=$mb SYMMCOLL_AR_BYTES_PER_BLOCK=65536 $P -N 2 -d bfloat16 -b 256K -e 256M -f 4 -w 3 -n 20 -c 0 -G 20
done
print_rows
for f in "$out"/perf_*.log; do echo "== $(basename "$f")"; awk '$3=="bfloat16"{print $1, $6}' "$f" | tr '\n' ' '; echo; done
