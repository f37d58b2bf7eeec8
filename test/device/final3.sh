#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, final GPU round at the submitted library: every GPU test mode (transport and
# all-reduce, 2 processes, one process, threads, non-blocking, bootstrap 3..8 ranks, 1,000 setup
# cycles, security, multicast guard, 10^6-call soak, disassembly), then the acceptance comparison
# against NCCL (2 processes, bf16; graph and eager, medians of two runs in alternating order;
# eager also with -n 100), symmetric windows (-R 2) and the PyTorch harness. Tables last.
# usage: test/device/final3.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
for m in procs nonblocking initall threads; do run tr_$m 60 $TP peers $m; done
for n in 3 8; do run tr_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap $n; done
run tr_cycles_setup_1000 150 $TP cycles setup 1000
run tr_sec_nonmember 60 $TP security nonmember
run tr_sec_squat 60 $TP security squat
run tr_mcguard 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP mcguard
T=$B/test/algos/test_allreduce
run ar_direct_2     150 $T --mode direct --ranks 2 --quick --replays 1000 --soak 20000 --max-mb 256
run ar_direct_8     90  $T --mode direct --ranks 8 --quick --replays 100 --soak 5000 --max-mb 16
run ar_chunked      60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run ar_g2_r1000     150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_threads_2    90  $T --mode nccl --threads --ranks 2 --quick --soak 5000 --replays 200 --max-mb 16
for n in 3 4 5 6 7 8; do run ar_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
run ar_soak_1e6     120 $T --mode nccl --procs 2 --quick --soak 1000000 --replays 0 --max-mb 1
run disasm          60  python3 test/algos/test_disasm.py $B/test/algos/allreduce.ptx $B/src/libsymmcoll.so.0
P=$B/perf/all_reduce_perf
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/allreduce_N2_bf16_G20
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/allreduce_N2_bf16_eager
run cmp_eager_n100 120 $P -N 2 -d bfloat16 -b 8 -e 512K -f 2 -w 10 -n 100 -c 1 -X $out/allreduce_N2_bf16_eager_n100
run cmp_G20_R2 200 $P -N 2 -R 2 -d bfloat16 -b 1K -e 1G -f 4 -w 5 -n 20 -c 1 -G 20 --compare_reps 1 -X $out/allreduce_N2_bf16_G20_R2
LIB=$(readlink -f $B/src/libsymmcoll.so.0)
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$LIB python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
print_rows
grep -E "cycles:" "$out/tr_cycles_setup_1000.log"
for m in G20 eager eager_n100 G20_R2; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
tar -C "$out" -czf "$out/../final3_logs.tgz" . && rm -rf "$out"
