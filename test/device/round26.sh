#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: two-shot push A(k) fused with the gather copy C(k-1) in one loop, after waiting
# mid(k-1) (knob SYMMCOLL_AR_FUSE_GATHER of an experimental build). Round 25 showed a short
# tail round and a deeper gather unroll do not help; this hides C(k-1) under A(k)'s NVLink
# pushes instead. Correctness first (many rounds, 2 ranks and 4/8 through the bootstrap), then
# graphs at 8 MiB-1 GiB against NCCL. usage: test/device/round26.sh <out-dir> [build-dir]
# The knob existed only in that build (never committed): correct, but 8-15% slower from 32 MiB.
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
F=SYMMCOLL_AR_FUSE_GATHER=1
run ok_direct_2 120 env $F $T --mode direct --ranks 2 --quick --algos twoshot --replays 50 --soak 0 --max-mb 64
run ok_rounds_1M 90 env $F SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run ok_boot_4 90 env $F SYMMCOLL_AR_ROUND_BYTES=1048576 SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 4 --quick --no-nccl-compare --algos twoshot --soak 0 --replays 20 --max-mb 16
run ok_boot_8 90 env $F SYMMCOLL_AR_ROUND_BYTES=1048576 SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 8 --quick --no-nccl-compare --algos twoshot --soak 0 --replays 20 --max-mb 16
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run b0_$rep 60 $P "${S[@]}"
  run fuse_$rep 60 env $F $P "${S[@]}"
  run nccl_$rep 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
done
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl b0 fuse nccl
tar -C "$out" -czf "$out/../round26_logs.tgz" . && rm -rf "$out"
