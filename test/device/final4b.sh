#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, after the test-helper cleanup (859e2ec, library unchanged since 011f1e9): the
# transport tests whose leak checks moved to harnessCountEntries.
# usage: test/device/final4b.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_fault_exchange 120 $TP fault exchange
for m in procs threads; do run tr_userreg_$m 90 $TP userreg $m; done
run tr_cycles_setup_1000 150 $TP cycles setup 1000
run tr_cycles_procs_100 150 $TP cycles procs 100
run tr_cycles_boot_1000 150 env SYMMCOLL_NCCL_LIB="$BOOT" $TP cycles bootstrap 1000
run tr_procs 60 $TP peers procs
print_rows
tar -C "$out" -czf "$out/../final4b_logs.tgz" . && rm -rf "$out"
