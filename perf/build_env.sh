# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by perf/compare.sh and perf/run_device_sweeps.sh: finds meson, ninja and NCCL (a CUDA
# toolkit install, or the nvidia-nccl wheel of a Python environment, preferred when present),
# configures and builds libsymmcoll with its perf binaries into $BUILD_DIR (default: the
# repository's build/; absolute, or relative to the directory the script was started from).
# Sets PERF_BIN (directory of the binaries), NCCL_LIB_FILE, NCCL_INCLUDE_DIR, NGPUS.

# Multicast stays off wherever our perf runs (README.md, "NVLink multicast").
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

perf_die() { echo "perf: $*" >&2; exit 1; }

# Where the calling script was started: relative paths users give are taken from there, also
# after perf_build has changed to the repository.
PERF_START_DIR=$PWD

# perf_abs_path PATH: PATH as an absolute path (relative ones from PERF_START_DIR).
perf_abs_path() {
  case $1 in
    /*) echo "$1" ;;
    *) echo "$PERF_START_DIR/$1" ;;
  esac
}

# perf_build_dir REPO: the build directory, absolute: $BUILD_DIR, else REPO/build.
perf_build_dir() {
  if [ -n "${BUILD_DIR:-}" ]; then perf_abs_path "$BUILD_DIR"; else echo "$1/build"; fi
}

# meson/ninja may live in a Python environment (e.g. the torch venv) rather than on PATH.
perf_find_build_tools() {
  local d
  for d in /opt/torch/.venv/bin "$(dirname "$(command -v python3 2>/dev/null || echo /nonexistent/x)")"; do
    [ -x "$d/meson" ] && ! command -v meson >/dev/null 2>&1 && PATH="$PATH:$d"
    [ -x "$d/ninja" ] && ! command -v ninja >/dev/null 2>&1 && PATH="$PATH:$d"
  done
  local shim
  shim="$(mktemp -d "${TMPDIR:-/tmp}/perf-shim.XXXXXX")"
  if ! command -v meson >/dev/null 2>&1 && python3 -c "import mesonbuild" >/dev/null 2>&1; then
    printf '#!/bin/sh\nexec python3 -m mesonbuild.mesonmain "$@"\n' >"$shim/meson"
    chmod +x "$shim/meson"
    PATH="$PATH:$shim"
  fi
  if ! command -v ninja >/dev/null 2>&1 && python3 -c "import ninja" >/dev/null 2>&1; then
    printf '#!/bin/sh\nexec python3 -m ninja "$@"\n' >"$shim/ninja"
    chmod +x "$shim/ninja"
    PATH="$PATH:$shim"
  fi
  # build-aux/prereqs.sh wants pkg-config; our configuration needs it only for -Dmpi=enabled. On a
  # machine without it (and without network for apt), a stand-in that finds nothing will do.
  if ! command -v pkg-config >/dev/null 2>&1; then
    printf '#!/bin/sh\nexit 1\n' >"$shim/pkg-config"
    chmod +x "$shim/pkg-config"
    PATH="$PATH:$shim"
  fi
  export PATH
}

# The Python to run plot.py with: the first that has matplotlib (else python3, which then says
# what is missing).
perf_find_python() {
  PERF_PYTHON=python3
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c "import matplotlib" >/dev/null 2>&1; then
      PERF_PYTHON=$py
      break
    fi
  done
  export PERF_PYTHON SYMMCOLL_PERF_PYTHON=$PERF_PYTHON
}

# NCCL: build-aux/find_nccl.py decides, as meson does (NCCL_HOME, the CUDA toolkit, the compiler's
# system paths, pkg-config, the nvidia-nccl wheel of python3 or of the torch venv).
perf_find_nccl() {
  local out py=python3
  [ -x /opt/torch/.venv/bin/python3 ] && ! python3 -c "import nvidia.nccl" >/dev/null 2>&1 &&
    py=/opt/torch/.venv/bin/python3
  out=$("$py" "$(dirname "${BASH_SOURCE[0]}")/../build-aux/find_nccl.py" --format shell \
        --cuda-include "$(dirname "$(dirname "$(command -v nvcc)")")/include") || perf_die "$out"
  eval "$out"
  export NCCL_SOURCE NCCL_INCLUDE_DIR NCCL_LIB_FILE
}

perf_count_gpus() {
  NGPUS=0
  if command -v nvidia-smi >/dev/null 2>&1; then NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    local visible
    visible=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$visible" -lt "$NGPUS" ] && NGPUS=$visible
  fi
  export NGPUS
}

perf_gpu_arch() {
  local cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  case "$cap" in
    90) echo "90a" ;;
    100) echo "100a" ;;
    "") echo "80;90a" ;;
    *) echo "$cap" ;;
  esac
}

perf_build() {
  local repo=$1
  cd "$repo" || perf_die "cannot cd to $repo"
  perf_find_build_tools
  # shellcheck source=/dev/null
  . build-aux/prereqs.sh
  perf_find_nccl
  perf_count_gpus
  BUILD_DIR=$(perf_build_dir "$repo")
  local opts=(-Dgpu_archs="${GPU_ARCHS:-$(perf_gpu_arch)}" -Dperf=true)
  [ -n "$NCCL_INCLUDE_DIR" ] && opts+=(-Dnccl_include="$NCCL_INCLUDE_DIR")
  [ -n "$NCCL_LIB_FILE" ] && opts+=(-Dnccl_lib="$NCCL_LIB_FILE")
  echo "perf: NCCL from $NCCL_SOURCE (library ${NCCL_LIB_FILE:-none found}), $NGPUS GPU(s), build dir $BUILD_DIR"
  local log
  log=$(mktemp)
  [ -f "$BUILD_DIR/build.ninja" ] && opts=(--reconfigure "${opts[@]}")
  if ! meson setup "$BUILD_DIR" "${opts[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    perf_die "meson setup failed (above)"
  fi
  rm -f "$log"
  symm_refresh_cuda "$BUILD_DIR"
  ninja -C "$BUILD_DIR" >/dev/null || { ninja -C "$BUILD_DIR"; perf_die "build failed"; }
  PERF_BIN=$BUILD_DIR/perf
  [ -x "$PERF_BIN/all_reduce_perf" ] || perf_die "perf binaries missing in $PERF_BIN"
  # The real NCCL libsymmcoll forwards to (also what SYMMCOLL_DISABLE=1 runs alone).
  [ -n "$NCCL_LIB_FILE" ] && export SYMMCOLL_NCCL_LIB=$NCCL_LIB_FILE
  export SYMMCOLL_PERF_PLOT="$repo/perf/plot.py"
  perf_find_python
  export PERF_BIN
}
