#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4: two-shot instances specialised for 2 ranks (arrays and loops for 2 ranks, far fewer
# registers) with blocks of 256, 512 or 1024 threads (SYMMCOLL_AR_TWO_RANK_THREADS), against the
# generic instance (8 ranks, 256 threads) and NCCL: correctness, then 8 MiB-1 GiB in graphs.
# The knob and the 512/1024-thread instances existed only in the build this round ran (never
# committed); 256 threads won and is what commit "two-shot: 2-rank instance" kept.
# usage: test/device/round22.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
for th in 256 512 1024; do
  run t${th}_direct_2 90 env SYMMCOLL_AR_TWO_RANK_THREADS=$th $T --mode direct --ranks 2 --quick --algos twoshot --replays 100 --soak 2000 --max-mb 256
done
run t512_procs 120 env SYMMCOLL_AR_TWO_RANK_THREADS=512 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 8M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  for th in 0 256 512 1024; do run th${th}_$rep 120 env SYMMCOLL_AR_TWO_RANK_THREADS=$th $P "${S[@]}"; done
done
run nccl_1 120 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
echo "== two-shot registers (2-rank instances, bf16 sum)"
cuobjdump --dump-resource-usage "$B/src/libsymmcoll.so" 2>/dev/null | grep -A1 "twoShotKernelINS_4BF16ELi0" | grep -o "REG:[0-9]* STACK:[0-9]*" | head -4
python3 test/device/compare_runs.py "$out" --ref nccl th0 th256 th512 th1024 nccl
tar -C "$out" -czf "$out/../round22_logs.tgz" . && rm -rf "$out"
