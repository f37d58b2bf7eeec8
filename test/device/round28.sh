#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: round 27's phase timeline showed the 64 MiB two-shot runs 3 rounds (staging half
# 28 MiB) whose 4 KiB-rounded block parts leave 4 of 128 blocks idle (parts of 22 pages where
# 21.3 would do): the busy blocks carry 3% more. Try finer part alignment (knob
# SYMMCOLL_AR_ALIGN_BYTES of an experimental build: 1024, 512, 128 against 4096) and a 72 MiB
# staging buffer (SYMMCOLL_BUFFER_BYTES: half 32 MiB, so 64 MiB runs 2 balanced rounds).
# The alignment knob existed only in that build (never committed): nothing beyond noise.
# usage: test/device/round28.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run ok_al128_direct_2 120 env SYMMCOLL_AR_ALIGN_BYTES=128 $T --mode direct --ranks 2 --quick --algos twoshot --replays 20 --soak 0 --max-mb 64
run ok_al512_boot_4 90 env SYMMCOLL_AR_ALIGN_BYTES=512 SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 4 --quick --no-nccl-compare --algos twoshot --soak 0 --replays 20 --max-mb 32
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
cfg() { case $1 in
  b0) echo ;; al1k) echo SYMMCOLL_AR_ALIGN_BYTES=1024 ;; al512) echo SYMMCOLL_AR_ALIGN_BYTES=512 ;;
  al128) echo SYMMCOLL_AR_ALIGN_BYTES=128 ;; buf72) echo SYMMCOLL_BUFFER_BYTES=75497472 ;;
  buf72al1k) echo SYMMCOLL_BUFFER_BYTES=75497472 SYMMCOLL_AR_ALIGN_BYTES=1024 ;;
esac; }
C="b0 al1k al512 al128 buf72 buf72al1k"
for rep in 1 2; do
  for v in $C; do run ${v}_$rep 60 env $(cfg $v) $P "${S[@]}"; done
  run nccl_$rep 60 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
done
print_rows
python3 test/device/compare_runs.py "$out" --ref nccl $C nccl
tar -C "$out" -czf "$out/../round28_logs.tgz" . && rm -rf "$out"
