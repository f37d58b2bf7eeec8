#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, eighth GPU round: non-blocking communicators (set up after their first all-reduce),
# and the suites around the touched code (communicator setup, windows, all-reduce entry).
# usage: test/device/round16.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_nonblocking   60 env SYMMCOLL_DEBUG=INFO SYMMCOLL_DEBUG_SUBSYS=INIT $TP peers nonblocking
run tr_procs         40 $TP peers procs
run tr_initall       40 $TP peers initall
run tr_threads       40 $TP peers threads
run tr_boot8         60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap 8
T=$B/test/algos/test_allreduce
run nccl_g2         90 $T --mode nccl --ranks 2 --quick --soak 5000 --replays 300 --max-mb 64
run nccl_procs      120 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 64
print_rows
grep -E "SYMMCOLL (INFO|WARN)" "$out/tr_nonblocking.log" | sed -E 's/^[^ ]+ //' | sort | uniq -c | head -20
grep -E "FAIL|rror" "$out/tr_nonblocking.log" | head -20
tar -C "$out" -czf "$out/../round16_logs.tgz" . && rm -rf "$out"
