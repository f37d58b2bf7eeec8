# SPDX-License-Identifier: Apache-2.0
# Sourced by the build scripts: installs what building libsymmcoll needs on a bare Debian/Ubuntu
# machine (meson, ninja, pkg-config) and puts the CUDA toolkit on PATH.
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
done
export PATH
need=()
command -v meson >/dev/null 2>&1 || need+=(meson)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing ${need[*]}: install them (e.g. pip install meson ninja) and retry" >&2
    exit 1
  fi
fi
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: install the CUDA toolkit (>= 12.4)" >&2; exit 1; }
