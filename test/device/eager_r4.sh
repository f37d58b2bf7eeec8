#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, last GPU call: the eager comparison again with 4 runs of each library (alternating
# order, medians), after two-run comparisons scattered by up to 30% at the small sizes.
# usage: test/device/eager_r4.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
run cmp_eager_r4 120 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 --compare_reps 4 -X $out/allreduce_N2_bf16_eager_r4
print_rows
grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_eager_r4.log" | awk '{print $1, $4, $5, $6, $7, $8, $9}'
