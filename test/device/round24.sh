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
python3 test/device/compare_runs.py "$out" --ref nccl u0 u1 u2 u3 nccl
tar -C "$out" -czf "$out/../round24_logs.tgz" . && rm -rf "$out"
