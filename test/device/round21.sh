#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4: the push one-shot for 2 ranks (SYMMCOLL_AR_PUSH_MIN_BYTES): correctness with every
# two-shot call run as the push one-shot (direct, many rounds, small staging, 2 processes with
# graph replays, mixed algorithms in the soak), then 4 MiB-1 GiB in graphs at several round sizes
# against the two-shot and NCCL in the same run.
# usage: test/device/round21.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
PM=(env SYMMCOLL_AR_PUSH_MIN_BYTES=0)
run push_direct_2    90 "${PM[@]}" $T --mode direct --ranks 2 --quick --replays 200 --soak 5000 --max-mb 256
run push_rounds_64K  60 "${PM[@]}" SYMMCOLL_AR_PUSH_ROUND_BYTES=65536 $T --mode direct --ranks 2 --quick --algos twoshot --soak 2000 --replays 50 --max-mb 64
run push_chunked     60 "${PM[@]}" $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 2000 --replays 50 --max-mb 16
run push_procs       120 "${PM[@]}" $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
run push_g2          90 "${PM[@]}" $T --mode nccl --ranks 2 --quick --soak 5000 --replays 300 --max-mb 64
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run two_$rep  120 $P "${S[@]}"
  run p4_$rep   120 "${PM[@]}" $P "${S[@]}"
done
run p2_1  120 "${PM[@]}" SYMMCOLL_AR_PUSH_ROUND_BYTES=2097152 $P "${S[@]}"
run p8_1  120 "${PM[@]}" SYMMCOLL_AR_PUSH_ROUND_BYTES=8388608 $P "${S[@]}"
run p16_1 120 "${PM[@]}" SYMMCOLL_AR_PUSH_ROUND_BYTES=16777216 $P "${S[@]}"
run nccl_1 120 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl two p2 p4 p8 p16 nccl
tar -C "$out" -czf "$out/../round21_logs.tgz" . && rm -rf "$out"
