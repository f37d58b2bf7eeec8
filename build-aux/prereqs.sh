# SPDX-License-Identifier: Apache-2.0
# Sourced by the build scripts: installs what building libsymmcoll needs on a bare Debian/Ubuntu
# machine (meson, ninja, pkg-config) and puts the CUDA toolkit on PATH.
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
done
export PATH
need=() optional=()
command -v meson >/dev/null 2>&1 || need+=(meson)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Only for finding NCCL through `pkg-config nccl` and for the install test's pkg-config check.
command -v pkg-config >/dev/null 2>&1 || optional+=(pkg-config)
if [ $((${#need[@]} + ${#optional[@]})) -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing ${need[*]} ${optional[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq "${need[@]}" "${optional[@]}" >/dev/null || {
      [ ${#need[@]} -gt 0 ] && { echo "installing ${need[*]} failed: install them and retry" >&2; exit 1; }
      echo "pkg-config could not be installed: NCCL is searched without it"
    }
  elif [ ${#need[@]} -gt 0 ]; then
    echo "missing ${need[*]}: install them (e.g. pip install meson ninja) and retry" >&2
    exit 1
  else
    echo "pkg-config not found: NCCL is searched without it"
  fi
fi
# meson_at_least MAJOR MINOR: the meson on PATH is that new.
meson_at_least() { python3 - "$(meson --version 2>/dev/null || echo 0)" "$1" "$2" <<'PY'
import sys
v = [int(x) for x in (sys.argv[1].split(".") + ["0", "0"])[:2] if x.isdigit()]
sys.exit(0 if len(v) == 2 and tuple(v) >= (int(sys.argv[2]), int(sys.argv[3])) else 1)
PY
}
# meson.build asks for meson >= 1.0 (Debian 12 ships 1.0.1; Ubuntu 22.04's 0.61 is too old).
meson_ok() { meson_at_least 1 0; }
if ! meson_ok; then
  echo "meson $(meson --version 2>/dev/null || echo '(none)') is older than 1.0: installing a newer one with pip"
  python3 -m pip install --quiet --user 'meson>=1.0' 'ninja' >/dev/null 2>&1 ||
    python3 -m pip install --quiet --break-system-packages --user 'meson>=1.0' 'ninja' >/dev/null 2>&1 || true
  PATH="$HOME/.local/bin:$PATH"
  export PATH
  meson_ok || { echo "meson >= 1.0 is needed (pip install 'meson>=1.0'), found $(meson --version 2>/dev/null || echo none)" >&2; exit 1; }
fi
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: install the CUDA toolkit (>= 12.5)" >&2; exit 1; }

# Meson before 1.4 passes nvcc no dependency flags, so ninja never sees which .cu includes which
# header: after a header edit an existing build keeps stale kernels, or objects that disagree on
# a struct's layout. symm_refresh_cuda BUILD_DIR (before ninja) makes every CUDA file newer than
# the build when any header is.
symm_refresh_cuda() {
  local lib="$1/src/libsymmcoll.so.0"
  [ -f "$lib" ] || return 0
  meson_at_least 1 4 && return 0
  if [ -n "$(find src include test perf \( -name '*.cuh' -o -name '*.h' \) -newer "$lib" -print -quit)" ]; then
    echo "a header changed since the last build (meson $(meson --version) does not track headers of CUDA files): recompiling every CUDA file"
    find src test perf -name '*.cu' -exec touch {} +
  fi
}
