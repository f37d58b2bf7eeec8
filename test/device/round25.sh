#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: the 64 MiB two-shot. (1) A short tail round, SYMMCOLL_AR_TAIL_PARTS=N (the last
# round is 1/N of a round, so the last gather copy, which runs with NVLink idle, is shorter).
# (2) Gather copy unroll 8 / 16 instead of 4 (knob SYMMCOLL_AR_GATHER_UNROLL of an experimental
# build, bf16 sum 2 ranks only). Correctness of both first, then graphs at 8-256 MiB against NCCL.
# Both knobs existed only in that build (never committed): every tail size was slower (64 MiB
# 202.9-205.2 against 199.8 us), gather unroll 8/16 within noise (perf/NOTES.md).
# usage: test/device/round25.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run ok_t4g8_direct_2 120 env SYMMCOLL_AR_TAIL_PARTS=4 SYMMCOLL_AR_GATHER_UNROLL=8 $T --mode direct --ranks 2 --quick --algos twoshot --replays 50 --soak 0 --max-mb 64
run ok_t3g16_direct_2 120 env SYMMCOLL_AR_TAIL_PARTS=3 SYMMCOLL_AR_GATHER_UNROLL=16 $T --mode direct --ranks 2 --quick --algos twoshot --replays 20 --soak 0 --max-mb 64
run ok_t4_boot_4 90 env SYMMCOLL_AR_TAIL_PARTS=4 SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 4 --quick --no-nccl-compare --algos twoshot --soak 0 --replays 20 --max-mb 32
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 256M -f 2 -w 5 -n 20 -c 1 -G 20)
cfg() { case $1 in
  b0) echo ;; t2) echo SYMMCOLL_AR_TAIL_PARTS=2 ;; t4) echo SYMMCOLL_AR_TAIL_PARTS=4 ;;
  t8) echo SYMMCOLL_AR_TAIL_PARTS=8 ;; g8) echo SYMMCOLL_AR_GATHER_UNROLL=8 ;;
  g16) echo SYMMCOLL_AR_GATHER_UNROLL=16 ;; t4g8) echo SYMMCOLL_AR_TAIL_PARTS=4 SYMMCOLL_AR_GATHER_UNROLL=8 ;;
esac; }
C="b0 t2 t4 t8 g8 g16 t4g8"
for rep in 1 2; do
  for v in $C; do run ${v}_$rep 60 env $(cfg $v) $P "${S[@]}"; done
  run nccl_$rep 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
done
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl $C nccl
tar -C "$out" -czf "$out/../round25_logs.tgz" . && rm -rf "$out"
