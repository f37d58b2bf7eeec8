#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, last GPU round at the submitted library (two-shot with the ncclCommRegister
# descriptor exchange resolved inside the start wait; ncclCommRegister peer mapping). PART=check:
# the whole GPU suite by hand (every transport and all-reduce mode, the 10^6-call soak,
# disassembly); PART=perf: the acceptance comparison against NCCL (2 processes, bf16; graph with
# 2 runs per library, eager with 4, alternating order), ncclCommRegister (-R 1) against NCCL
# with its registration, and the cost of the descriptor exchange (forced two-shot with and
# without it). usage: [PART=check|perf] test/device/final4.sh <out-dir> [build-dir]
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
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 256M -f 2 -w 5 -n 20 -c 1 --compare_reps 4 -X $out/allreduce_N2_bf16_eager
run cmp_G20_R1 150 $P -N 2 -R 1 -d bfloat16 -b 1K -e 1G -f 4 -w 5 -n 20 -c 1 -G 20 --compare_reps 1 -X $out/allreduce_N2_bf16_G20_R1
R=(-N 2 -d bfloat16 -b 64K -e 4M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run xchg_$rep   60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}"
  run noxchg_$rep 60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_ZERO_COPY_MAX_BYTES=-1 $P "${R[@]}"
  run reg_$rep    60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}" -R 1
done
fi
print_rows
if [ "$PART" != check ]; then
for m in G20 eager G20_R1; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
python3 test/device/compare_runs.py "$out" --title "forced two-shot (graph, min of 2 runs)" xchg noxchg reg
fi
tar -C "$out" -czf "$out/../final4_${PART}_logs.tgz" . && rm -rf "$out"
