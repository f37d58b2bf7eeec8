#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build-aux/find_nccl.py finds NCCL in each layout users have, in the documented order, and says what
# it tried when there is none; meson setup stops with that line. Usage: FIND_NCCL SOURCE_ROOT
set -uo pipefail
find=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
expect() { # name, expected first line (source), expected include, expected library, args...
  local name=$1 want_src=$2 want_inc=$3 want_lib=$4 out
  shift 4
  checks=$((checks + 1))
  out=$("$@" 2>&1)
  local got_src got_inc got_lib
  got_src=$(sed -n 1p <<<"$out"); got_inc=$(sed -n 2p <<<"$out"); got_lib=$(sed -n 3p <<<"$out")
  # shellcheck disable=SC2053
  if [[ $got_src != $want_src || $got_inc != "$want_inc" || $got_lib != $want_lib ]]; then
    echo "FAIL $name: got [$got_src] [$got_inc] [$got_lib], want [$want_src] [$want_inc] [$want_lib]"
    fails=$((fails + 1))
  fi
}
mk() { mkdir -p "$1/include" "$1/lib"; echo '#define NCCL_STUB 1' >"$1/include/nccl.h"; : >"$1/lib/libnccl.so.2"; }
empty_cuda="$tmp/cuda/include"; mkdir -p "$empty_cuda"
nopy="$tmp/nopy"; mkdir -p "$nopy"            # a PATH without python3 or pkg-config
base=(env -u NCCL_HOME PATH="$nopy:/usr/bin:/bin" PKG_CONFIG_PATH= PYTHONPATH= python3 "$find")
isolated_py=(env -u NCCL_HOME PATH="$nopy" PKG_CONFIG_PATH= PYTHONPATH= "$(python3 -c 'import sys; print(sys.executable)')")
isolated=("${isolated_py[@]}" "$find")

# 1. NCCL_HOME / --nccl-home win over everything.
mk "$tmp/home"
expect home_env 'nccl_home*' "$tmp/home/include" "$tmp/home/lib/libnccl.so.2" \
  env NCCL_HOME="$tmp/home" python3 "$find" --cuda-include "$empty_cuda"
expect home_arg 'nccl_home*' "$tmp/home/include" "$tmp/home/lib/libnccl.so.2" \
  "${base[@]}" --nccl-home "$tmp/home" --cuda-include "$empty_cuda"
# A named home without nccl.h is an error, not a cue to look elsewhere.
checks=$((checks + 1))
out=$("${base[@]}" --nccl-home "$tmp/nowhere" --cuda-include "$empty_cuda"); rc=$?
[[ $rc -eq 1 && "$out" == *"the NCCL home $tmp/nowhere"* && "$out" == *"-Dnccl_home"* ]] ||
  { echo "FAIL home_missing: rc=$rc $out"; fails=$((fails + 1)); }

# 2. The CUDA toolkit's include directory.
mk "$tmp/cudatk"
mkdir -p "$tmp/cudatk/lib64"; : >"$tmp/cudatk/lib64/libnccl.so.2"
expect cuda 'cuda*' "$tmp/cudatk/include" "$tmp/cudatk/lib64/libnccl.so.2" \
  "${base[@]}" --cuda-include "$tmp/cudatk/include"

# 3. The compiler's own system paths (a tree laid out like /usr): no include directory passed.
mk "$tmp/sys/usr"
expect system system '' '*' "${base[@]}" --cuda-include "$empty_cuda" --cc "cc -isystem $tmp/sys/usr/include"

# 4. pkg-config nccl.
if command -v pkg-config >/dev/null 2>&1; then
  mk "$tmp/pc"
  mkdir -p "$tmp/pc/pkgconfig"
  printf 'prefix=%s\nincludedir=${prefix}/include\nlibdir=${prefix}/lib\nName: nccl\nDescription: x\nVersion: 2.28.0\nCflags: -I${includedir}\nLibs: -L${libdir} -lnccl\n' \
    "$tmp/pc" >"$tmp/pc/pkgconfig/nccl.pc"
  expect pkgconfig pkg-config "$tmp/pc/include" "$tmp/pc/lib/libnccl.so.2" \
    env -u NCCL_HOME PATH="/usr/bin:/bin" PKG_CONFIG_PATH="$tmp/pc/pkgconfig" PYTHONPATH= python3 "$find" \
    --cuda-include "$empty_cuda" --cc false
fi

# 5. The nvidia-nccl wheel of python3 on PATH.
mkdir -p "$tmp/site/nvidia/nccl"
: >"$tmp/site/nvidia/__init__.py"; : >"$tmp/site/nvidia/nccl/__init__.py"
mk "$tmp/site/nvidia/nccl"
expect wheel 'wheel of*' "$tmp/site/nvidia/nccl/include" "$tmp/site/nvidia/nccl/lib/libnccl.so.2" \
  env -u NCCL_HOME PATH="$nopy:/usr/bin:/bin" PKG_CONFIG_PATH=/nonexistent PYTHONPATH="$tmp/site" python3 "$find" \
  --cuda-include "$empty_cuda" --cc false

# 6. Nothing anywhere: one line naming every place tried and the option to set. Not checkable
# where the interpreter running find_nccl.py has the wheel itself (PyTorch's venv): it is found.
if "${isolated_py[@]}" -c 'import nvidia.nccl' >/dev/null 2>&1; then
  echo "skip nothing: $("${isolated_py[@]}" -c 'import sys; print(sys.executable)') has the nvidia-nccl wheel"
else
  checks=$((checks + 1))
  out=$("${isolated[@]}" --cuda-include "$empty_cuda" --cc false); rc=$?
  [[ $rc -eq 1 && $(wc -l <<<"$out") -eq 1 && "$out" == *"$empty_cuda"* && "$out" == *"system paths"* &&
     "$out" == *"pkg-config"* && "$out" == *"wheel"* && "$out" == *"-Dnccl_home"* ]] ||
    { echo "FAIL nothing: rc=$rc $out"; fails=$((fails + 1)); }
fi

# 7. meson setup stops on that line (a named home without NCCL), and takes a good one.
if command -v meson >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
  checks=$((checks + 1))
  out=$(meson setup "$tmp/b1" "$src" -Dperf=false -Dnccl_home="$tmp/nowhere" 2>&1); rc=$?
  [[ $rc -ne 0 && "$out" == *"the NCCL home $tmp/nowhere"* ]] ||
    { echo "FAIL meson_missing: rc=$rc"; tail -5 <<<"$out"; fails=$((fails + 1)); }
  checks=$((checks + 1))
  out=$(meson setup "$tmp/b2" "$src" -Dperf=false -Dnccl_home="$tmp/home" 2>&1); rc=$?
  [[ $rc -eq 0 && "$out" == *"NCCL: nccl_home $tmp/home"* ]] ||
    { echo "FAIL meson_home: rc=$rc"; tail -5 <<<"$out"; fails=$((fails + 1)); }
fi
echo "find_nccl: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
