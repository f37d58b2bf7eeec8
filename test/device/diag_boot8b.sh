#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Narrowing the 8-ranks bootstrap soak failure: without the Lamport kernel, and at 6 ranks.
# usage: test/device/diag_boot8b.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for i in 1 2; do run boot8_nolamport_$i 40 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks 8 --algos oneshot,twoshot,multimem "${A[@]}"; done
for i in 1 2; do run boot6_$i 40 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks 6 "${A[@]}"; done
print_rows
grep -h "gave up" "$out"/*.log | sed -E 's/block [0-9]+ //' | sort | uniq -c | head -12
