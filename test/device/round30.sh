#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: every kernel draws its block ticket right after reading the epoch (beginCall)
# instead of in an atomicAdd at its end (endCall), so the atomic's round trip no longer delays
# each block's exit. First the whole GPU suite on the new library (final5.sh PART=check), then
# graphs 8 B-1 GiB, new against the previous library (LD_PRELOAD of $B/old/libsymmcoll.so.0,
# built from 8e93a19) and NCCL, 3 runs each, alternating. First run: the ticket drawn by thread
# 0 (2-6% faster from 1 KiB to 1 MiB, 2% slower up to 512 B); second run: by the block's last
# thread (the new library), with the first as $B/v1, then final5.sh PART=perf on it.
# usage: test/device/round30.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
PART=check test/device/final5.sh "$out/check" "$B" 2>&1 | tail -28
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2 3; do
  run new_$rep 60 $P "${S[@]}"
  run old_$rep 60 env LD_PRELOAD=$PWD/$B/old/libsymmcoll.so.0 $P "${S[@]}"
  [ -e $B/v1/libsymmcoll.so.0 ] && run v1_$rep 60 env LD_PRELOAD=$PWD/$B/v1/libsymmcoll.so.0 $P "${S[@]}"
  run nccl_$rep 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
done
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl new old $([ -e $B/v1/libsymmcoll.so.0 ] && echo v1) nccl
PART=perf test/device/final5.sh "$out/perf" "$B" 2>&1 | tail -80
tar -C "$out" -czf "$out/../round30_logs.tgz" . && rm -rf "$out"
