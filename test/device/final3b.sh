#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, last GPU round at the submitted library (after the Lamport prefetch and the
# non-blocking split fixes): the correctness modes most exposed to those changes, the 10^6-call
# soak, and the acceptance comparison against NCCL (2 processes, bf16, graph and eager, medians
# of two runs per library in alternating order). Tables last.
# usage: test/device/final3b.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_nonblocking 60 $TP peers nonblocking
T=$B/test/algos/test_allreduce
run ar_direct_2     150 $T --mode direct --ranks 2 --quick --replays 1000 --soak 20000 --max-mb 256
run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_boot_8       60  env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 8 --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4
run ar_soak_1e6     120 $T --mode nccl --procs 2 --quick --soak 1000000 --replays 0 --max-mb 1
P=$B/perf/all_reduce_perf
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/allreduce_N2_bf16_G20
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/allreduce_N2_bf16_eager
print_rows
for m in G20 eager; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
tar -C "$out" -czf "$out/../final3b_logs.tgz" . && rm -rf "$out"
