#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One command: builds libsymmcoll and compares it with NCCL on all local GPUs (one process per
# GPU), for all-reduce, all-gather and reduce-scatter from 8 B to 1 GiB, data check on. Writes
# per collective <results>/<coll>.csv (+ .png) and a summary plot, and prints the tables.
#
# usage: perf/compare.sh [results-dir]
# env:   DTYPE (bfloat16), MIN_BYTES (8), MAX_BYTES (1G), ITERS (20), WARMUP (5), GRAPH (0: eager;
#        N: -G N), NGPUS (all visible), BUILD_DIR (build; absolute, or relative to the current
#        directory, as is results-dir), NCCL_HOME (NCCL root), GPU_ARCHS,
#        EXTRA_ARGS (more perf flags, e.g. "-R 2")
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

requested_gpus=${NGPUS:-}
echo "perf/compare.sh: compares libsymmcoll with NCCL on every local GPU, one process each (all-reduce," \
     "all-gather, reduce-scatter, 8 B-1 GiB); the first build takes 2-3 minutes on 16 cores, the runs a few minutes"
# GPUs first: nothing to build for where nothing can run.
perf_count_gpus
[ -n "$requested_gpus" ] && NGPUS=$requested_gpus
[ "$NGPUS" -ge 1 ] || perf_die "no GPU visible (nvidia-smi -L lists none): nothing to compare"
if [ "$NGPUS" -lt 2 ]; then
  echo "perf: $NGPUS GPU: libsymmcoll's kernels need 2 or more GPUs with peer access, so every call would go to NCCL; no comparison to make"
  exit 0
fi
results=$(perf_abs_path "${1:-$repo/perf-results/$(date +%Y%m%d-%H%M%S)}")
perf_build "$repo"
[ -n "$requested_gpus" ] && NGPUS=$requested_gpus

mkdir -p "$results"
dtype=${DTYPE:-bfloat16}
common=(-b "${MIN_BYTES:-8}" -e "${MAX_BYTES:-1G}" -f 2 -n "${ITERS:-20}" -w "${WARMUP:-5}" -c 1 -d "$dtype" -P "$NGPUS")
[ "${GRAPH:-0}" != 0 ] && common+=(-G "$GRAPH")
# shellcheck disable=SC2206
[ -n "${EXTRA_ARGS:-}" ] && common+=($EXTRA_ARGS)

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "nccl: ${NCCL_LIB_FILE:-default} (headers $NCCL_INCLUDE_DIR)"
  echo "gpus: $NGPUS"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null || true
  echo "command: perf/compare.sh; each binary: ${common[*]} -X <results>/<coll>"
} >"$results/env.txt"

status=0
for coll in all_reduce all_gather reduce_scatter; do
  echo "perf: $coll: ${common[*]}"
  if ! "$PERF_BIN/${coll}_perf" "${common[@]}" -X "$results/$coll" >"$results/$coll.log" 2>&1; then
    echo "perf: $coll failed or found wrong data, see $results/$coll.log" >&2
    status=1
  fi
done

plots=()
for coll in all_reduce all_gather reduce_scatter; do
  [ -f "$results/$coll.csv" ] && plots+=("$results/$coll.csv")
done
if [ ${#plots[@]} -gt 0 ]; then
  "$PERF_PYTHON" "$repo/perf/plot.py" --title "libsymmcoll vs NCCL, $NGPUS GPUs, $dtype" --out "$results/summary.png" \
    "${plots[@]}" || echo "perf: no summary plot (the CSVs are complete)"
fi

"$PERF_PYTHON" "$repo/perf/results_md.py" "$results" summary.png >"$results/RESULTS.md" ||
  echo "perf: no RESULTS.md (the CSVs are complete)"

echo
for coll in all_reduce all_gather reduce_scatter; do
  # the comparison table printed at the end of each run
  sed -n '/ vs nccl (time in us/,$p' "$results/$coll.log" | grep -v '^# plot\|results:' || true
  grep -h "Out of bounds values" "$results/$coll.log" | sed "s/^/# $coll: /" || true
done
echo
echo "perf: results in $results (CSV, PNG, logs, env.txt, RESULTS.md)"
exit $status
