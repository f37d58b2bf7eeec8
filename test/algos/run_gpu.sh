#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# All-reduce GPU checks in one go: builds, runs the meson GPU tests of test/algos, the
# disassembly check, world sizes 3..8 (test-built peers; and through the test bootstrap when it is
# built), thread-mode ranks, and an optional long soak. Prints a compact table last.
#   test/algos/run_gpu.sh                 # default (a few minutes at most on 2x H200)
#   SOAK=1000000 test/algos/run_gpu.sh    # adds the 10^6-call soak (direct and nccl mode)
#   BUILD=build test/algos/run_gpu.sh     # build directory (default: build)
set -uo pipefail
cd "$(dirname "$0")/../.."
# Multicast stays off (README.md, "NVLink multicast"): nothing here may create it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${BUILD:-build}
SOAK=${SOAK:-0}
. build-aux/prereqs.sh
if [ ! -f "$BUILD/build.ninja" ]; then meson setup "$BUILD" -Dgpu_archs=90a >/dev/null || exit 1; fi
ninja -C "$BUILD" >/dev/null || { echo "build failed"; exit 1; }
BIN=$BUILD/test/algos/test_allreduce
REAL_NCCL=$(sed -n 's/.*real NCCL for tests and as the runtime fallback: //p' "$BUILD/meson-logs/meson-log.txt" | tail -1)
[ -n "$REAL_NCCL" ] && [ "$REAL_NCCL" != "(none)" ] && export SYMMCOLL_NCCL_LIB=${SYMMCOLL_NCCL_LIB:-$REAL_NCCL}
LOGDIR=$BUILD/algos-gpu-logs
mkdir -p "$LOGDIR"
rows=()

run() { # name, command...
  local name=$1; shift
  local log=$LOGDIR/$name.log start end rc summary
  start=$(date +%s.%N)
  timeout 900 "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  case $rc in 0) res=PASS ;; 77) res=SKIP ;; 124) res=TIMEOUT ;; *) res="FAIL($rc)" ;; esac
  summary=$(grep -E "checks, [0-9]+ failed|processes, [0-9]+ failed|skipped" "$log" | tail -1)
  rows+=("$(printf '%-34s %-9s %7.1fs  %s' "$name" "$res" "$(awk "BEGIN{print $end - $start}")" "$summary")")
  if [ "$res" != PASS ] && [ "$res" != SKIP ]; then
    echo "---- $name ($res): first mismatches / errors ----"
    grep -E "MISMATCH|FAIL|OVERRUN|gave up|error" "$log" | head -20
  fi
}

# 1. The meson GPU tests of this area, and the disassembly check (cuobjdump exists there).
run meson_gpu_algos meson test -C "$BUILD" --print-errorlogs \
  allreduce_direct_2 allreduce_direct_4 allreduce_direct_procs allreduce_direct_chunked \
  allreduce_nccl_g allreduce_nccl_procs
run disasm_multimem meson test -C "$BUILD" --print-errorlogs disasm
grep -h "SASS\|PTX" "$BUILD/meson-logs/testlog.txt" | tail -3

# 2. World sizes 3..8 with test-built peer memory (ranks spread over the GPUs, one thread).
for n in 3 5 6 7 8; do
  run "direct_ranks_$n" "$BIN" --mode direct --ranks "$n" --quick --soak 3000 --replays 100 --max-mb 8
done
# Real-valued floats (tolerance vs NCCL, bitwise vs our reference).
run nccl_g_real "$BIN" --mode nccl --ranks 2 --quick --real --soak 0 --replays 0 --max-mb 16
# 3. Ranks as threads calling ncclCommInitRank (real NCCL: one rank per GPU).
run nccl_threads_2 "$BIN" --mode nccl --threads --ranks 2 --quick --soak 2000 --replays 100 --max-mb 16
# 4. World sizes 3..8 through the test bootstrap (fake libnccl with threads), when built.
BOOT=$(find "$BUILD/test/bootstrap" -name 'libnccl*.so*' 2>/dev/null | head -1)
if [ -n "$BOOT" ]; then
  for n in 3 4 5 6 7 8; do
    run "bootstrap_threads_$n" env SYMMCOLL_NCCL_LIB="$PWD/$BOOT" "$BIN" --mode nccl --threads \
      --ranks "$n" --quick --no-nccl-compare --soak 2000 --replays 100 --max-mb 8
  done
else
  rows+=("bootstrap_threads_3..8              SKIP      (no test bootstrap library in $BUILD/test/bootstrap)")
fi
# 5. The long soak, when asked.
if [ "$SOAK" -gt 0 ]; then
  run "soak_direct_$SOAK" "$BIN" --mode direct --ranks 2 --quick --soak "$SOAK" --replays 0 --max-mb 4 --no-abort
  run "soak_nccl_g_$SOAK" "$BIN" --mode nccl --ranks 2 --quick --soak "$SOAK" --replays 0 --max-mb 4 --no-abort
fi

echo
echo "== all-reduce GPU results (logs in $LOGDIR) =="
printf '%s\n' "${rows[@]}"
! printf '%s\n' "${rows[@]}" | grep -qE "FAIL|TIMEOUT"
