#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The perf binaries on real GPUs, small sizes, data check on: every launch mode (-g, -t, -P),
# eager and graph, in-place and out-of-place, all types and ops, odd offsets, registration.
# Each run must exit 0 and report 0 wrong elements. Skips (77) without a GPU.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpus=0
command -v nvidia-smi >/dev/null 2>&1 && ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpus" -ge 1 ] || { echo "no GPU: skipped"; exit 77; }
n=$(( ngpus >= 2 ? 2 : 1 ))
ar=$1 ag=$2 rs=$3
# shellcheck source=../checks.sh
. "$(dirname "$0")/../checks.sh"

run() { # name, command...
  local name=$1; shift
  checks=$((checks + 1))
  local t0=$SECONDS
  timeout 120 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ $rc != 0 ] || ! grep -q "Out of bounds values : 0 OK" "$tmp/out"; then
    check_failed "($rc) $name: $*"
    tail -40 "$tmp/out" >&2
  else
    echo "ok: $name ($((SECONDS - t0)) s)"
  fi
}

small=(-b 8 -e 256K -f 8 -w 1 -n 3 -c 1)
for lib in symmcoll nccl; do
  if [ $lib = nccl ]; then export SYMMCOLL_DISABLE=1; else unset SYMMCOLL_DISABLE; fi
  run "$lib AR -g $n all types, all ops" "$ar" "${small[@]}" -g $n -d all -o all
  run "$lib AG -g $n all types" "$ag" "${small[@]}" -g $n -d all
  run "$lib RS -g $n all types, all ops" "$rs" "${small[@]}" -g $n -d all -o all
done
unset SYMMCOLL_DISABLE
# odd sizes (-i steps of 1000 B + unaligned start) and offsets, graph mode, registration
for bin in "$ar" "$ag" "$rs"; do
  name=$(basename "$bin")
  run "$name -g $n odd sizes, -u 1" "$bin" -b 1000 -e 5000 -i 1000 -w 1 -n 2 -c 2 -g $n -u 1 -d bfloat16
  run "$name -g $n graph -G 3" "$bin" -b 8 -e 4M -f 16 -w 1 -n 5 -G 3 -c 2 -g $n -d bfloat16
  run "$name -P $n eager" "$bin" -b 8 -e 4M -f 16 -w 1 -n 5 -c 1 -P $n
  run "$name -P $n graph" "$bin" -b 8 -e 4M -f 16 -w 1 -n 5 -G 2 -c 1 -P $n -d half
  run "$name -g $n -R 1" "$bin" -b 1K -e 1M -f 32 -w 1 -n 3 -c 1 -g $n -R 1
  run "$name -g $n -R 2" "$bin" -b 1K -e 1M -f 32 -w 1 -n 3 -c 1 -g $n -R 2
done
if [ $n = 2 ]; then
  run "AR -t 2 threads" "$ar" -b 8 -e 1M -f 32 -w 1 -n 3 -c 1 -t 2 -d float
  run "AR -z 1 blocking, -a 3" "$ar" -b 8 -e 1M -f 32 -w 1 -n 3 -c 1 -g 2 -z 1 -a 3
  run "AR cudaMalloc buffers" "$ar" -b 8 -e 1M -f 32 -w 1 -n 3 -c 1 -g 2 --alloc cuda -d bfloat16
  # compare mode: both runs, a table with speedups, a CSV
  checks=$((checks + 1))
  if timeout 120 "$ar" -b 1K -e 1M -f 32 -w 1 -n 3 -c 1 -P 2 -X "$tmp/cmp" >"$tmp/out" 2>&1 &&
     grep -q "libsymmcoll vs nccl" "$tmp/out" && [ "$(grep -c '^AllReduce,' "$tmp/cmp.csv")" = 6 ]; then
    echo "ok: compare mode"
  else
    check_failed "compare mode"
    tail -40 "$tmp/out" >&2
  fi
fi
checks_done test_perf_gpu
