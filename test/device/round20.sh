#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, last GPU round for the setup exchange that keeps a rank with a local failure in the
# all-gather (empty record, pinned host memory): the fault test (rank 1 cannot stage its
# exchange: everyone forwards, no hang, all-reduce right), then every setup path that goes
# through the exchange (processes, non-blocking, ncclCommInitAll groups, threads, bootstrap,
# registration, 1,000 setup cycles) and the all-reduce modes that set up communicators.
# usage: test/device/round20.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
T=$B/test/algos/test_allreduce
run tr_fault_exchange 120 env SYMMCOLL_DEBUG=INFO $TP fault exchange
for m in procs nonblocking initall threads; do run tr_$m 60 $TP peers $m; done
for n in 3 8; do run tr_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap $n; done
for m in procs threads; do run tr_userreg_$m 90 $TP userreg $m; done
run tr_cycles_setup_1000 150 $TP cycles setup 1000
run tr_sec_squat 60 $TP security squat
run ar_g2_r1000     150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_boot_8       60  env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 8 --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4
print_rows
grep -h "WARN\|forwards" "$out/tr_fault_exchange.log" | sort | uniq -c | head -8
tar -C "$out" -czf "$out/../round20_logs.tgz" . && rm -rf "$out"
