#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Final batched GPU round on a prebuilt tree (2 GPUs): all-reduce correctness with the shipped
# defaults, the perf comparison against NCCL (2 processes, bf16, eager and 20-op graphs, data
# check on; -g 2 float with our kernels), a 128-block two-shot trial, PyTorch: preload check
# (bit-identical results) and the symmetric-memory comparison harness.
# usage: test/device/final_round.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run ar_g2 60 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run ar_procs 60 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 16
run ar_threads 60 $T --mode nccl --threads --ranks 2 --quick --soak 5000 --replays 100 --max-mb 16
for n in 3 6 8; do run ar_boot_$n 60 env SYMMCOLL_NCCL_LIB=$BOOT $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 2000 --replays 50 --max-mb 4; done
run ar_direct_8 60 $T --mode direct --ranks 8 --quick --soak 2000 --replays 50 --max-mb 4
P=$B/perf/all_reduce_perf
run cmp_N2_eager 150 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/ar_N2_eager
run cmp_N2_G20 150 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/ar_N2_G20
run g2_float_eager 60 $P -g 2 -d float -b 8 -e 1G -f 4 -w 5 -n 20 -c 1
run g2_float_G20 60 $P -g 2 -d float -b 8 -e 1G -f 4 -w 5 -n 20 -c 1 -G 20
run twoshot_128blk 40 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_AR_MAX_BLOCKS=128 SYMMCOLL_AR_BYTES_PER_BLOCK=65536 $P -N 2 -d bfloat16 -b 1M -e 256M -f 4 -w 3 -n 20 -c 0 -G 20
run torch_preload 150 env PYTHON=python3 test/torch_preload_check.sh $B
LIB=$(readlink -f $B/src/libsymmcoll.so.0)
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$LIB python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
print_rows
grep -A40 "speedup\|==" "$out/cmp_N2_G20.log" | tail -45
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
awk '$3=="bfloat16"{print $1, $6}' "$out/twoshot_128blk.log" | tr '\n' ' '; echo
