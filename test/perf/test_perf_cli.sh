#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The perf binaries' behaviour without a GPU and on bad input: clear messages and non-zero exit
# codes, never a crash. GPUs are hidden (CUDA_VISIBLE_DEVICES=""), so this runs anywhere.
set -u
export CUDA_VISIBLE_DEVICES=""
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
checks=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() { # name, wanted exit code, wanted text in stderr+stdout, command...
  local name=$1 want=$2 text=$3; shift 3
  checks=$((checks + 1))
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$text" "$tmp/out"; then
    failed=$((failed + 1))
    echo "FAILED: $name: exit $rc (wanted $want), output:" >&2
    sed 's/^/    /' "$tmp/out" >&2
  fi
}

for bin in "$@"; do
  name=$(basename "$bin")
  expect "$name -h" 0 "USAGE: " "$bin" -h
  expect "$name unknown flag" 2 "unknown option '-q'" "$bin" -q
  expect "$name bad size" 2 "invalid value '12Q' for -b" "$bin" -b 12Q
  expect "$name bad dtype" 2 "invalid datatype 'float17'" "$bin" -d float17
  expect "$name min > max" 2 "minbytes" "$bin" -b 1M -e 1K
  expect "$name no GPU" 1 "no usable CUDA device" "$bin" -b 8 -e 8
  expect "$name no GPU, -P 2" 1 "no usable CUDA device" "$bin" -b 8 -e 8 -P 2
  expect "$name no GPU, -t 2 -g 2" 1 "no usable CUDA device" "$bin" -t 2 -g 2
  expect "$name no GPU, compare" 1 "no results from the libsymmcoll run" "$bin" -b 8 -e 8 -X "$tmp/cmp"
done
echo "test_perf_cli: $checks checks, $failed failed"
[ "$failed" = 0 ] && [ "$checks" -gt 0 ]
