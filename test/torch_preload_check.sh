#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs test/torch_preload_check.py twice on 2 GPUs, with the real NCCL alone and under
# LD_PRELOAD=libsymmcoll, and fails unless both runs pass their own checks, give identical
# digests, and our log shows that libsymmcoll was loaded and forwarded to the real NCCL.
# Usage: test/torch_preload_check.sh [build dir (default: build)]   (PYTHON=... to pick python)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
python=${PYTHON:-python3}
lib=$(readlink -f "$build/src/libsymmcoll.so.0")
[ -f "$lib" ] || { echo "no $build/src/libsymmcoll.so.0: build first" >&2; exit 1; }

# Multicast stays off on these machines, for NCCL, torch and NVSHMEM alike.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset SYMMCOLL_NCCL_LIB SYMMCOLL_DISABLE

out=$(mktemp -d "${TMPDIR:-/tmp}/torch-preload-check.XXXXXX")
echo "outputs in $out"

echo "== without libsymmcoll"
"$python" test/torch_preload_check.py "$out/plain.txt"
echo "== with LD_PRELOAD=$lib"
LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" SYMMCOLL_DEBUG=INFO SYMMCOLL_DEBUG_SUBSYS=INIT,ENV \
  SYMMCOLL_DEBUG_FILE="$out/symmcoll.%h.%p.log" \
  "$python" test/torch_preload_check.py "$out/preload.txt"

status=0
tail -n 1 "$out/plain.txt"
tail -n 1 "$out/preload.txt"
if ! diff -u "$out/plain.txt" "$out/preload.txt" >"$out/diff.txt"; then
  echo "FAIL: results differ with libsymmcoll preloaded:" >&2
  head -n 40 "$out/diff.txt" >&2
  status=1
fi

# Each rank's process must have loaded libsymmcoll and found the real NCCL: its first INFO line
# (src/core/forward.c) reads "libsymmcoll <version>: real NCCL <path> (<how>)"; the python parent
# logs nothing, having made no NCCL call. No match is a failure reported below, not an exit here.
found_lines=$(grep -hE "SYMMCOLL INFO libsymmcoll [0-9.]+: real NCCL " "$out"/symmcoll.*.log \
  2>/dev/null || true)
found=$(printf '%s' "$found_lines" | grep -c . || true)
echo "libsymmcoll log lines naming the real NCCL: $found"
[ -z "$found_lines" ] || printf '%s\n' "$found_lines" | sed 's/^[^ ]* //' | sort | uniq -c
if [ "$found" -lt 2 ]; then
  echo "FAIL: libsymmcoll did not report the real NCCL in both ranks (was it preloaded?)" >&2
  status=1
fi
if grep -hq "SYMMCOLL WARN" "$out"/symmcoll.*.log 2>/dev/null; then
  echo "warnings from libsymmcoll:" >&2
  grep -h "SYMMCOLL WARN" "$out"/symmcoll.*.log >&2
  status=1
fi
[ $status -eq 0 ] && echo "PASS: identical results with and without libsymmcoll"
exit $status
