#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, last GPU round. The library is unchanged since 011f1e9 (session 4); this session's
# experiments (rounds 25-29) changed nothing that was kept. PART=check: the whole GPU suite by
# hand, as final4.sh. PART=perf: the acceptance comparison against NCCL (2 processes, bf16;
# graph with 2 runs per library, eager with 6, alternating order), PyTorch's symmetric-memory
# kernels in one harness, and the peer push ceiling by method (perf/push_bw).
# usage: [PART=check|perf] test/device/final5.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
# shellcheck source=test/device/gpu_suite.sh
. "$(dirname "$0")/gpu_suite.sh"
P=$B/perf/all_reduce_perf
PART=${PART:-all}
if [ "$PART" != perf ]; then
run_gpu_suite
fi
if [ "$PART" != check ]; then
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/allreduce_N2_bf16_G20
run cmp_eager 240 $P -N 2 -d bfloat16 -b 8 -e 256M -f 2 -w 5 -n 20 -c 1 --compare_reps 6 -X $out/allreduce_N2_bf16_eager
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$PWD/$B/src/libsymmcoll.so.0 python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
run push_64 60 $B/perf/push_bw 64
fi
print_rows
if [ "$PART" != check ]; then
for m in G20 eager; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
echo "== torch (bytes, NCCL via torch, one_shot, two_shot_ | libsymmcoll via torch)"
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
grep -E "^(copy|sm |ce)" "$out/push_64.log"
fi
tar -C "$out" -czf "$out/../final5_${PART}_logs.tgz" . && rm -rf "$out"
