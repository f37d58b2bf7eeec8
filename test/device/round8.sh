#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Final batched GPU round on a prebuilt tree (2 GPUs) at the submitted commit: correctness in
# every rank mode, 1000 cross-process setup/teardown cycles, the acceptance comparison against
# NCCL (2 processes, bf16, graph and eager; medians of two runs each in alternating order), the
# same with symmetric windows (-R 2) and the PyTorch harness. Tables last.
# usage: test/device/round8.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_procs 40 $TP peers procs
run tr_initall 40 $TP peers initall
run tr_cycles_setup_1000 120 $TP cycles setup 1000
T=$B/test/algos/test_allreduce
run direct_2        120 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_chunked  60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run nccl_g2_r1000   150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run nccl_procs_r1000 150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
for n in 3 8; do run ar_boot_$n 90 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
P=$B/perf/all_reduce_perf
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/allreduce_N2_bf16_G20
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/allreduce_N2_bf16_eager
run cmp_G20_R2 200 $P -N 2 -R 2 -d bfloat16 -b 1K -e 1G -f 4 -w 5 -n 20 -c 1 -G 20 --compare_reps 1 -X $out/allreduce_N2_bf16_G20_R2
LIB=$(readlink -f $B/src/libsymmcoll.so.0)
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$LIB python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
print_rows
grep -E "cycles:" "$out/tr_cycles_setup_1000.log"
for m in G20 eager G20_R2; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
tar -C "$out" -czf "$out/../round8_logs.tgz" . && rm -rf "$out"
