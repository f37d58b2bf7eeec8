#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds libsymmcoll and runs its tests: the CPU suite always (plus an ASan+UBSan build of it),
# the GPU suite when GPUs are present. Usage: test/run.sh [extra meson setup options]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test/run.sh: builds libsymmcoll twice (plain, and ASan+UBSan) and runs the CPU suite, then the" \
     "GPU suite when GPUs are present; about 40 minutes on 2 cores without a GPU, mostly compiling kernels"
. build-aux/prereqs.sh
# The two builds take about 3 GB (four GPU architectures in every test binary). nvcc fails with
# segfaults or "Internal error: writing file" on a full disk, so say it plainly first.
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
[ "${free_kb:-0}" -lt 4000000 ] &&
  echo "test/run.sh: warning: only $((free_kb / 1024)) MiB free here; the builds need about 3 GB" >&2
# Multicast stays off wherever our tests run (README.md, "NVLink multicast").
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

setup() { # dir, options...: meson's own output shows when it fails
  local dir=$1 log
  shift
  log=$(mktemp)
  local args=("$dir" "$@")
  [ -f "$dir/build.ninja" ] && args=(--reconfigure "${args[@]}")
  if ! meson setup "${args[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "test/run.sh: configuring $dir failed (above); NCCL and CUDA options: see README" >&2
    exit 1
  fi
  grep -E "^Message: (NCCL|CUDA arch|real NCCL)" "$log" || true
  rm -f "$log"
}

# nvcc's --keep leaves every intermediate file (about 1 GB); the disassembly test reads only the
# PTX, and ninja never reads them back.
prune_keep() { find "$1/src/device-keep" -type f ! -name '*.ptx' -delete 2>/dev/null || true; }

passed=0 failed=0 skipped=0
tally() { # build dir: add the results of its last `meson test` run to the totals
  local counts
  counts=$(python3 - "$1/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result", "")
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(ok, bad, skip)
PY
)
  read -r p f s <<<"$counts"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

setup build "$@"
symm_refresh_cuda build
ninja -C build || { echo "test/run.sh: the build failed (above)" >&2; exit 1; }
prune_keep build
meson test -C build --suite cpu --print-errorlogs
tally build

setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dgpu_archs=90a "$@"
symm_refresh_cuda build-asan
ninja -C build-asan || { echo "test/run.sh: the ASan build failed (above)" >&2; exit 1; }
prune_keep build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --suite cpu --print-errorlogs
tally build-asan

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  meson test -C build --suite gpu --print-errorlogs
  tally build
else
  echo "no GPU: GPU suite skipped"
fi
echo "$passed passed, $failed failed, $skipped skipped"
