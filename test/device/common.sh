# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by test/device/gpu_suite.sh: multicast off, the real NCCL (the torch wheel's when
# present) as SYMMCOLL_NCCL_LIB, $out and $B from the arguments, and run(), which logs one
# command to $out/<name>.log and adds a result row to rows[] (printed by print_rows).
set -uo pipefail
start=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
# OUT_DIR and BUILD_DIR: absolute, or relative to where the script was started; BUILD_DIR
# defaults to the repository's build/.
out=${1:?out dir}; B=${2:-$PWD/build}
case $out in /*) ;; *) out=$start/$out ;; esac
case $B in /*) ;; *) B=$start/$B ;; esac
mkdir -p "$out"
W=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib','libnccl.so.2'))" 2>/dev/null)
export SYMMCOLL_NCCL_LIB=${SYMMCOLL_NCCL_LIB:-$W}
REAL=$SYMMCOLL_NCCL_LIB
BOOT=$B/test/bootstrap/libnccl.so.2
echo "real NCCL: $REAL"
rows=()
run() { # name timeout cmd...
  local name=$1 to=$2; shift 2
  local s e rc
  s=$(date +%s.%N); timeout "$to" "$@" >"$out/$name.log" 2>&1; rc=$?
  e=$(date +%s.%N)
  rows+=("$(printf '%-28s rc=%-4s %6.1fs %s' "$name" "$rc" "$(awk "BEGIN{print $e-$s}")" \
    "$(grep -E 'checks, [0-9]+ failed|processes, [0-9]+ failed|PASS|mismatches' "$out/$name.log" | tail -1)")")
  echo "${rows[-1]}" # as it happens too: a run cut short still shows its rows
  [ "$rc" = 0 ] || { echo "---- $name rc=$rc"; grep -E "MISMATCH|FAIL|failed|gave up|rror" "$out/$name.log" | head -8; }
}
print_rows() { echo; printf '%s\n' "${rows[@]}"; }
