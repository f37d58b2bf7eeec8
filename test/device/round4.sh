#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fourth batched GPU round on a prebuilt tree (2 GPUs): the shipped defaults (128 blocks, balanced
# two-shot rounds, tuner row from round 3) checked for correctness, kernel resource usage, a few
# block-count trials, then the acceptance comparison against NCCL (2 processes, bf16, graph and
# eager, both libraries twice in alternating order, medians) and the PyTorch harness.
# usage: test/device/round4.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run direct_2        120 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_chunked  60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run direct_ranks_8  90  $T --mode direct --ranks 8 --quick --soak 1000 --replays 50 --max-mb 4
run nccl_procs_r1000 150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_boot_8 90 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 8 --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4
cuobjdump --dump-resource-usage $B/src/libsymmcoll.so.0 2>&1 | grep -A1 "4BF16ELi0E" | grep -o "Function [^:]*\|REG:[0-9]*\|SHARED:[0-9]*" | paste - - - > "$out/resources.txt"
P=$B/perf/all_reduce_perf
sweep() { # name bmin bmax extra-env...
  local name=$1 lo=$2 hi=$3; shift 3
  run perf_$name 90 env "$@" $P -N 2 -d bfloat16 -b "$lo" -e "$hi" -f 2 -w 5 -n 30 -c 0 -G 20
}
sweep G_lamport128 16K 256K SYMMCOLL_ALLREDUCE_ALGO=lamport
sweep G_lamport128b1k 16K 256K SYMMCOLL_ALLREDUCE_ALGO=lamport SYMMCOLL_AR_BYTES_PER_BLOCK=1024
sweep G_oneshot128 256K 8M SYMMCOLL_ALLREDUCE_ALGO=oneshot
sweep G_oneshot64 256K 8M SYMMCOLL_ALLREDUCE_ALGO=oneshot SYMMCOLL_AR_MAX_BLOCKS=64
sweep G_twoshot128 1M 1G SYMMCOLL_ALLREDUCE_ALGO=twoshot
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/ar_N2_bf16_G20
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -X $out/ar_N2_bf16_eager
LIB=$(readlink -f $B/src/libsymmcoll.so.0)
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$LIB python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
print_rows
cat "$out/resources.txt"
for f in "$out"/perf_*.log; do echo "== $(basename "$f")"; awk '$3=="bfloat16"{print $1, $6}' "$f" | tr '\n' ' '; echo; done
for m in G20 eager; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $10, $11}'; done
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
tar -C "$out" -czf "$out/../round4_logs.tgz" . && rm -rf "$out"
