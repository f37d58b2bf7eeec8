#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One command: builds libsymmcoll and compares it with NCCL on all local GPUs (one process per
# GPU), for all-reduce, all-gather and reduce-scatter from 8 B to 256 MiB, data check on. Each
# collective runs in the binaries' compare mode (NCCL alone, then libsymmcoll, twice, order
# alternating) once on plain buffers and once on symmetric windows (-R 2), so NCCL's symmetric
# kernels count too: the table per collective shows NCCL, NCCL -R 2, ours, ours -R 2 and ours
# against NCCL's best of the two per size, then one summary line (compare_table.py). Writes
# <results>/<coll>.csv and <coll>.R2.csv (+ .png, logs), <coll>.all.csv, summary.png,
# RESULTS.md and env.txt.
#
# usage: perf/compare.sh [results-dir]
# env:   DTYPE (bfloat16), MIN_BYTES (8), MAX_BYTES (256M), ITERS (20), WARMUP (5), GRAPH (0:
#        eager; N: -G N, e.g. 20), REPS (runs per library: 4 eager, 3 with GRAPH), WINDOWS (1; 0:
#        plain buffers only, half the runs), NGPUS (all
#        visible), BUILD_DIR (build; absolute, or relative to the current directory, as is
#        results-dir), NCCL_HOME (NCCL root), GPU_ARCHS, EXTRA_ARGS (more perf flags), PERF_BIN
#        (a directory of prebuilt *_perf binaries: no build)
# Runs: 3 collectives x (plain, -R 2) x (NCCL, ours) x REPS = 36 runs of a perf binary in graph
# mode, 48 eager; measured besides the build, with two runs each in graph mode: GRAPH=10
# MAX_BYTES=1G 157-167 s on 4x H200 and 110-115 s on 2x H100 (three: half as long again); eager
# with two runs each, to 64 MiB, about 86 s on 4x H200 and 60 s on 2x H200, to 1 GiB 69 s on 2x
# H100; eager with four, to 1 MiB, 113-116 s on 2x H100.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

requested_gpus=${NGPUS:-}
echo "perf/compare.sh: compares libsymmcoll with NCCL (plain and with symmetric windows) on every local" \
     "GPU, one process each (all-reduce, all-gather, reduce-scatter); the first build takes 2-3 minutes on" \
     "16 cores, the runs 2-4 minutes"
# GPUs first: nothing to build for where nothing can run.
perf_count_gpus
[ -n "$requested_gpus" ] && NGPUS=$requested_gpus
[ "$NGPUS" -ge 1 ] || perf_die "no GPU visible (nvidia-smi -L lists none): nothing to compare"
if [ "$NGPUS" -lt 2 ]; then
  echo "perf: $NGPUS GPU: libsymmcoll's kernels need 2 or more GPUs with peer access, so every call would go to NCCL; no comparison to make"
  exit 0
fi
results=$(perf_abs_path "${1:-$repo/perf-results/$(date +%Y%m%d-%H%M%S)}")
if [ -n "${PERF_BIN:-}" ]; then
  # Prebuilt binaries (copied onto a GPU machine, say): no build; NCCL found as the build would.
  perf_find_nccl
  [ -n "$NCCL_LIB_FILE" ] && export SYMMCOLL_NCCL_LIB=$NCCL_LIB_FILE
  export SYMMCOLL_PERF_PLOT="$repo/perf/plot.py"
  perf_find_python
else
  perf_build "$repo"
fi
[ -n "$requested_gpus" ] && NGPUS=$requested_gpus

mkdir -p "$results"
dtype=${DTYPE:-bfloat16}
common=(-b "${MIN_BYTES:-8}" -e "${MAX_BYTES:-256M}" -f 2 -n "${ITERS:-20}" -w "${WARMUP:-5}" -c 1 -d "$dtype" -P "$NGPUS")
[ "${GRAPH:-0}" != 0 ] && common+=(-G "$GRAPH")
# Runs per library: a median of two is their mean, and one slow run moves it (eager, 2x H100:
# single runs 1.5-4x the other made 0.66-0.99x rows; graphs, 4x H100: one 11.5 us run beside
# 5.9 made a 128 KiB row 8.7 us). Eager small sizes are host-bound, so eager takes four; graphs
# three, the fewest with a true median.
reps=${REPS:-$([ "${GRAPH:-0}" != 0 ] && echo 3 || echo 4)}
common+=(--compare_reps "$reps")
# shellcheck disable=SC2206
[ -n "${EXTRA_ARGS:-}" ] && common+=($EXTRA_ARGS)
variants=(plain)
[ "${WINDOWS:-1}" != 0 ] && variants+=(R2)

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "nccl: ${NCCL_LIB_FILE:-default} (headers $NCCL_INCLUDE_DIR)"
  echo "gpus: $NGPUS"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null || true
  echo "command: perf/compare.sh; each binary: ${common[*]} -X <results>/<coll>; and with -R 2: -X <results>/<coll>.R2"
} >"$results/env.txt"

status=0
start=$SECONDS
for coll in all_reduce all_gather reduce_scatter; do
  for variant in "${variants[@]}"; do
    prefix=$results/$coll reg=()
    [ "$variant" = R2 ] && prefix=$results/$coll.R2 reg=(-R 2)
    echo "perf: $coll${reg[*]:+ ${reg[*]}}: ${common[*]} (${SECONDS}s)"
    if ! "$PERF_BIN/${coll}_perf" "${common[@]}" ${reg[@]+"${reg[@]}"} -X "$prefix" >"$prefix.log" 2>&1; then
      echo "perf: $coll${reg[*]:+ ${reg[*]}} failed or found wrong data, see $prefix.log" >&2
      status=1
    fi
  done
done
runs=$((SECONDS - start))

# The table needs python3 alone; the plots need matplotlib ($PERF_PYTHON has it when any does).
table=$(python3 "$repo/perf/compare_table.py" --merged "$results") || status=1
plots=()
for coll in all_reduce all_gather reduce_scatter; do
  [ -f "$results/$coll.all.csv" ] && plots+=("$results/$coll.all.csv")
done
if [ ${#plots[@]} -gt 0 ]; then
  "$PERF_PYTHON" "$repo/perf/plot.py" --title "libsymmcoll vs NCCL, $NGPUS GPUs, $dtype" --out "$results/summary.png" \
    "${plots[@]}" >/dev/null || echo "perf: no summary plot (the CSVs are complete)"
fi
python3 "$repo/perf/results_md.py" "$results" summary.png >"$results/RESULTS.md" ||
  echo "perf: no RESULTS.md (the CSVs are complete)"

echo "$table"
echo
echo "perf: $((${#variants[@]} * 3)) compare runs in ${runs}s; results in $results (CSV, PNG, logs, env.txt, RESULTS.md)"
exit $status
