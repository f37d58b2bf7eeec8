#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, third GPU round: two-shot with split barriers (A(k+1) overlaps the mid barrier,
# C(k-1) the start barrier): correctness in every mode, then ours against NCCL from 1 MiB to
# 1 GiB (graph), and the eager host cost per call (-C 1) of both libraries at small sizes.
# usage: test/device/round11.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run direct_2        90 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_chunked  60 $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run direct_8        90 $T --mode direct --ranks 8 --quick --replays 50 --soak 2000 --max-mb 16
run rounds_1M       60 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run nccl_g2         90 $T --mode nccl --ranks 2 --quick --soak 5000 --replays 300 --max-mb 64
run nccl_procs      120 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for n in 3 8; do run boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks $n "${A[@]}"; done
P=$B/perf/all_reduce_perf
run cmp_G20_big 200 $P -N 2 -d bfloat16 -b 1M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/big_G20
run cpu_ours 60 $P -N 2 -d bfloat16 -b 8 -e 256K -f 8 -w 5 -n 100 -c 0 -C 1
run cpu_nccl 60 env SYMMCOLL_DISABLE=1 $P -N 2 -d bfloat16 -b 8 -e 256K -f 8 -w 5 -n 100 -c 0 -C 1
run wall_ours 60 $P -N 2 -d bfloat16 -b 8 -e 256K -f 8 -w 5 -n 100 -c 0
print_rows
echo "== compare, graph"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_G20_big.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'
for f in cpu_ours cpu_nccl wall_ours; do echo "== $f"; grep -E "^ +[0-9]+ +[0-9]+ +bfloat16" "$out/$f.log" | awk '{print $1, $6}'; done
which nsys ncu 2>/dev/null
tar -C "$out" -czf "$out/../round11_logs.tgz" . && rm -rf "$out"
