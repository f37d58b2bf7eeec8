#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch on 2 GPUs with and without libsymmcoll: runs perf/torch_bench.py once plain (PyTorch's
# own NCCL) and once under LD_PRELOAD=libsymmcoll, then prints the table: bf16 all-reduce per
# size (NCCL, ours, PyTorch symmetric memory's one_shot/two_shot_, ours against the best of
# PyTorch), and DDP and FSDP2 training-step times plain against preloaded with "bit-identical"
# for the final parameters (the training steps run TRAIN_RUNS times each way, alternating). Exit 0
# only when every run finished and the parameters match. About 2 minutes on 2x H200 (each run:
# PyTorch start-up and NCCL creation, 15-20 s; nine sizes x 60 calls x 3 ops; 23 DDP and 23 FSDP2
# steps), well under 4.
#
# usage: perf/torch_bench.sh OUT_DIR
# env:   PYTHON (python3: one with torch and 2 GPUs), BUILD_DIR (build; absolute, or relative
#        to the current directory), TIMEOUT (600 s per run), TRAIN_RUNS (3), TORCH_BENCH_BATCH
#        (rows per rank and step, 8192)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh" # multicast off; perf_abs_path, perf_build_dir
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

out=$(perf_abs_path "${1:?usage: perf/torch_bench.sh OUT_DIR}")
python=${PYTHON:-python3}
lib=$(perf_build_dir "$repo")/src/libsymmcoll.so.0
[ -f "$lib" ] || perf_die "no $lib: build first (perf/compare.sh or test/run.sh builds it; BUILD_DIR=...)"
lib=$(readlink -f "$lib")
mkdir -p "$out"
# PyTorch's NCCL is found by libsymmcoll itself (the copy torch loaded), as for any application.
unset SYMMCOLL_NCCL_LIB SYMMCOLL_DISABLE
start=$SECONDS

status=0
# run_bench LOG [VAR=VALUE ...] -- LABEL [PART ...]: one torch_bench.py run, its output in LOG.
run_bench() {
  local log=$1 envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "${TIMEOUT:-600}" "$python" "$repo/perf/torch_bench.py" "$out" "$@" >"$log" 2>&1 ||
    { echo "perf: a torch_bench run failed, see $log" >&2; tail -5 "$log" >&2; status=1; }
}
preload="LD_PRELOAD=$lib${LD_PRELOAD:+:$LD_PRELOAD}"

echo "perf: torch_bench plain (PyTorch's NCCL), logs in $out/plain.log"
run_bench "$out/plain.log" -- nccl
echo "perf: torch_bench with LD_PRELOAD=$lib ($((SECONDS - start))s)"
rm -f "$out"/symmcoll.*.log
run_bench "$out/preload.log" "$preload" SYMMCOLL_DEBUG=INFO SYMMCOLL_DEBUG_SUBSYS=INIT \
  "SYMMCOLL_DEBUG_FILE=$out/symmcoll.%h.%p.log" -- libsymmcoll
# Step times drift between processes: TRAIN_RUNS-1 more rounds of the training steps alone, the
# order alternating (preload first in every other round); the table takes the median over runs.
for ((i = 2; i <= ${TRAIN_RUNS:-3}; i++)); do
  for which in $( ((i % 2 == 0)) && echo "preload plain" || echo "plain preload"); do
    echo "perf: training steps, $which, round $i ($((SECONDS - start))s)"
    if [ "$which" = plain ]; then
      run_bench "$out/plain.$i.log" TORCH_BENCH_APPEND=1 -- nccl ddp fsdp
    else
      run_bench "$out/preload.$i.log" "$preload" TORCH_BENCH_APPEND=1 -- libsymmcoll ddp fsdp
    fi
  done
done

# Both rank processes must have loaded libsymmcoll and found the real NCCL (src/core/forward.c logs
# "libsymmcoll <version>: real NCCL <path> (<how>)").
found=$(cat "$out"/symmcoll.*.log 2>/dev/null | grep -c "SYMMCOLL INFO libsymmcoll .*: real NCCL " || true)
if [ "$found" -lt 2 ]; then
  echo "perf: libsymmcoll reported the real NCCL in $found processes, not 2: was it preloaded?" >&2
  status=1
fi
"$python" "$repo/perf/torch_bench.py" --report "$out" nccl libsymmcoll || status=1
echo
echo "perf: torch_bench done in $((SECONDS - start))s; CSVs and logs in $out"
exit $status
