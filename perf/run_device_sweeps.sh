#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The reference sweeps on a 2-GPU node: the three binaries from 8 B to 1 GiB with -c 1, in
# single-process -g 2 mode (float, like sweep_summary.py's first reference tables) and
# two-process -P 2 mode (bfloat16, like its last ones), eager and -G 20, each with
# SYMMCOLL_DISABLE=1 (NCCL alone) and without (libsymmcoll). Logs and CSVs go to <out>; a
# summary table (time per size, wrong totals, NCCL alone against sweep_summary.py's reference
# times) is printed last.
#
# usage: perf/run_device_sweeps.sh <out-dir> [quick]
#   quick: 8 B..64 MiB only (a smoke run)
# env: BUILD_DIR (absolute, or relative to the current directory), NCCL_HOME, GPU_ARCHS (see
#      perf/build_env.sh), SKIP_BUILD=1 (binaries exist)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

out=${1:?usage: perf/run_device_sweeps.sh <out-dir> [quick]}
max=1G
[ "${2:-}" = quick ] && max=64M
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ "${SKIP_BUILD:-0}" = 1 ]; then
  PATH="$PATH:/usr/local/cuda/bin"
  perf_find_nccl
  [ -n "$NCCL_LIB_FILE" ] && export SYMMCOLL_NCCL_LIB=$NCCL_LIB_FILE
  PERF_BIN=$(perf_build_dir "$repo")/perf
else
  perf_build "$repo" # exits on failure; sets PERF_BIN and SYMMCOLL_NCCL_LIB
fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "nccl: ${NCCL_LIB_FILE:-default}"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null || true
} >"$out/env.txt"

# -w 5 -n 20 as nccl-tests' usual; the graph runs replay one graph of the 20 ops 20 times.
start=$(date +%s)
for mode in g2 N2; do
  case $mode in
    g2) launch=(-g 2) dtype=float ;;
    N2) launch=(-P 2) dtype=bfloat16 ;;
  esac
  for graph in eager G20; do
    gflags=()
    [ $graph = G20 ] && gflags=(-G 20)
    for coll in all_reduce all_gather reduce_scatter; do
      for lib in nccl symmcoll; do
        name=${coll}_${mode}_${graph}_${lib}
        args=(-b 8 -e "$max" -f 2 -w 5 -n 20 -c 1 -d "$dtype" "${launch[@]}" "${gflags[@]}"
              --csv "$out/$name.csv" --label "$lib")
        if [ $lib = nccl ]; then
          SYMMCOLL_DISABLE=1 timeout 300 "$PERF_BIN/${coll}_perf" "${args[@]}" >"$out/$name.log" 2>&1
        else
          env -u SYMMCOLL_DISABLE timeout 300 "$PERF_BIN/${coll}_perf" "${args[@]}" >"$out/$name.log" 2>&1
        fi
        rc=$?
        echo "$name rc=$rc $(( $(date +%s) - start ))s"
        echo "$rc" >"$out/$name.rc"
      done
    done
  done
done

python3 "$repo/perf/sweep_summary.py" "$out"
