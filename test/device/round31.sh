#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: eager launches (8 B-256 KiB, -n 20) of the round-30 library against the previous one
# ($B/old, 8e93a19) and NCCL in one run, 4 runs each, alternating: final5.sh's eager numbers in
# round 30 (a different machine than the first final5 run) came out 1.3 us slower per call on
# both libraries' small sizes; this separates the library from the machine.
# usage: test/device/round31.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8 -e 256K -f 2 -w 5 -n 20 -c 1)
for rep in 1 2 3 4; do
  run new_$rep 60 $P "${S[@]}"
  run old_$rep 60 env LD_PRELOAD=$PWD/$B/old/libsymmcoll.so.0 $P "${S[@]}"
  run nccl_$rep 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
done
print_rows
python3 test/device/compare_runs.py "$out" --title "eager oop time (min of runs)" --ref nccl new old nccl
tar -C "$out" -czf "$out/../round31_logs.tgz" . && rm -rf "$out"
