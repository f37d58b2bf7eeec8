#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# -Dnccl_include naming a directory the compilers search anyway (/usr/include, where NCCL's
# packages put nccl.h) reaches no compile command: nvcc given -isystem=/usr/include fails every
# .cu file (libstdc++'s <cmath> no longer finds math.h). Checked on a stand-in directory made a
# default one through C_INCLUDE_PATH/CPLUS_INCLUDE_PATH (compile commands, one .cu object built),
# against a directory that is not a default one, and on /usr/include itself where it has nccl.h.
# Usage: test_nccl_include.sh SOURCE_ROOT NCCL_INCLUDE_DIR(or empty) CUDA_INCLUDE_DIR
set -uo pipefail
src=$1 nccl_inc=$2 cuda_inc=$3
for tool in meson ninja nvcc cc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "skip: no $tool"; exit 77; }
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# One small .cu file that includes nccl.h (launch.cu -> algos.h -> nccl_api.h -> nccl.h).
cu_object=src/libsymmcoll_internal.a.p/algos_launch.cu.o
opts=(-Dperf=false -Dgpu_archs=80 -Dnccl_compat=false)

# The nccl.h this build uses, copied into the stand-in.
header=$(printf '#include <nccl.h>\n' | cc -M -x c - ${nccl_inc:+-I"$nccl_inc"} -I"$cuda_inc" 2>/dev/null |
         tr ' \\' '\n\n' | grep '/nccl\.h$' | head -1)
[ -f "$header" ] || { echo "skip: nccl.h of this build not found"; exit 77; }
std="$tmp/std-include"
mkdir -p "$std"
cp "$header" "$std/nccl.h"

# 1. The stand-in is a default directory of every compiler: no -I/-isystem of it anywhere.
checks=$((checks + 1))
out=$(C_INCLUDE_PATH="$std" CPLUS_INCLUDE_PATH="$std" meson setup "$tmp/b1" "$src" "${opts[@]}" \
      -Dnccl_include="$std" 2>&1); rc=$?
if [[ $rc -ne 0 || "$out" != *"NCCL: -Dnccl_include=$std, a default include directory"* ]]; then
  fail "default_dir_setup: rc=$rc"; tail -5 <<<"$out"
elif grep -q -- "$std" "$tmp/b1/compile_commands.json"; then
  fail "default_dir_dropped: $std is in the compile commands"
  grep -o -- "-[a-z]*=\?$std" "$tmp/b1/compile_commands.json" | sort -u | head -3
else
  # ... and nvcc still finds nccl.h there.
  checks=$((checks + 1))
  out=$(C_INCLUDE_PATH="$std" CPLUS_INCLUDE_PATH="$std" ninja -C "$tmp/b1" "$cu_object" 2>&1) ||
    { fail "default_dir_build"; tail -15 <<<"$out"; }
fi

# 2. The same directory when it is not a default one is passed as is.
checks=$((checks + 1))
out=$(meson setup "$tmp/b2" "$src" "${opts[@]}" -Dnccl_include="$std" 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"NCCL: -Dnccl_include, headers $std"* ]] &&
  grep -q -- "-isystem=$std" "$tmp/b2/compile_commands.json" ||
  { fail "other_dir: rc=$rc, -isystem=$std expected in the compile commands"; tail -5 <<<"$out"; }

# 3. A directory without nccl.h: meson stops with one line naming it.
checks=$((checks + 1))
out=$(meson setup "$tmp/b3" "$src" "${opts[@]}" -Dnccl_include="$tmp" 2>&1); rc=$?
[[ $rc -ne 0 && "$out" == *"nccl.h not found in -Dnccl_include=$tmp"* ]] ||
  { fail "missing_header: rc=$rc"; tail -5 <<<"$out"; }

# 4. The real case: NCCL's packages put nccl.h into /usr/include.
if [ -f /usr/include/nccl.h ]; then
  checks=$((checks + 1))
  out=$(meson setup "$tmp/b4" "$src" "${opts[@]}" -Dnccl_include=/usr/include 2>&1 &&
        ninja -C "$tmp/b4" "$cu_object" 2>&1) || { fail "usr_include"; tail -15 <<<"$out"; }
else
  echo "skip usr_include: /usr/include has no nccl.h"
fi
echo "nccl_include: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
