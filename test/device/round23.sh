#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4: grid and round size for the 2-rank two-shot at 16-256 MiB (graphs), by knobs only:
# SYMMCOLL_AR_MAX_BLOCKS 96/112/120/128 and SYMMCOLL_AR_ROUND_BYTES 16 MiB, against NCCL.
# usage: test/device/round23.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 16M -e 256M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  for b in 96 112 120 128; do run b${b}_$rep 60 env SYMMCOLL_AR_MAX_BLOCKS=$b $P "${S[@]}"; done
  run r16_$rep 60 env SYMMCOLL_AR_ROUND_BYTES=16777216 $P "${S[@]}"
done
run nccl_1 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl b96 b112 b120 b128 r16 nccl
tar -C "$out" -czf "$out/../round23_logs.tgz" . && rm -rf "$out"
