#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fifth batched GPU round on a prebuilt tree (2 GPUs): transport with windows registered inside a
# group (one thread, both ranks), all-reduce correctness after the Lamport/two-shot changes, the
# zero-copy path end to end (perf binaries with symmetric windows, -R 2, data check), the
# acceptance comparison (2 processes, bf16, graph and eager, medians of alternating runs), the
# PyTorch harness, and 1000 cross-process create/destroy cycles last.
# usage: test/device/round5.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_procs 40 $TP peers procs
run tr_initall 40 $TP peers initall
run tr_threads 40 $TP peers threads
run tr_boot_8 40 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap 8
T=$B/test/algos/test_allreduce
run direct_2        120 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_chunked  60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run direct_ranks_8  90  $T --mode direct --ranks 8 --quick --soak 1000 --replays 50 --max-mb 4
run nccl_g2_r1000   150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run nccl_procs_r1000 150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
for n in 3 8; do run ar_boot_$n 90 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
run ar_soak_1e6 150 $T --mode nccl --ranks 2 --quick --soak 1000000 --replays 0 --max-mb 4 --no-abort
P=$B/perf/all_reduce_perf
run zc_N2_check 90 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_DEBUG=INFO SYMMCOLL_DEBUG_SUBSYS=TRANSPORT $P -N 2 -R 2 -d bfloat16 -b 8 -e 256M -f 8 -w 2 -n 5 -c 1
run zc_g2_check 90 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P -g 2 -R 2 -d float -b 8 -e 256M -f 8 -w 2 -n 5 -c 1
sweep() { # name bmin bmax extra-args...
  local name=$1 lo=$2 hi=$3; shift 3
  run perf_$name 90 env "$@" -d bfloat16 -b "$lo" -e "$hi" -f 2 -w 5 -n 30 -c 0 -G 20
}
sweep lamport 16K 256K SYMMCOLL_ALLREDUCE_ALGO=lamport $P -N 2
sweep twoshot 1M 1G SYMMCOLL_ALLREDUCE_ALGO=twoshot $P -N 2
sweep twoshot_R2 1M 1G SYMMCOLL_ALLREDUCE_ALGO=twoshot $P -N 2 -R 2
sweep nccl_R2 1M 1G SYMMCOLL_DISABLE=1 $P -N 2 -R 2
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/ar_N2_bf16_G20
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/ar_N2_bf16_eager
LIB=$(readlink -f $B/src/libsymmcoll.so.0)
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$LIB python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
print_rows
grep -c "peer-mapped on rank" "$out/zc_N2_check.log"; grep -E "^ +[0-9]+ " "$out/zc_N2_check.log" | awk '{print $1, $6, $9, $10, $13}' | tr '\n' ';'; echo
for f in "$out"/perf_*.log; do echo "== $(basename "$f")"; awk '$3=="bfloat16"{print $1, $6}' "$f" | tr '\n' ' '; echo; done
for m in G20 eager; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $10, $11, $12}'; done
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
tar -C "$out" -czf "$out/../round5_logs.tgz" . 
rows=()
run tr_cycles_procs_1000 330 $TP cycles procs 1000
print_rows; tail -3 "$out/tr_cycles_procs_1000.log"
tar -C "$out" -czf "$out/../round5_logs.tgz" . && rm -rf "$out"
