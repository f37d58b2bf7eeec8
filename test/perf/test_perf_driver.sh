#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The perf driver end to end on the mock CUDA/NCCL (host memory, collectives executed on the
# host): every launch mode a single process has, graphs, in-place, odd sizes and offsets, all
# types and ops, registration; 0 wrong; and planted corruption is counted and fails the run.
set -u
checks=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ar=$1 ag=$2 rs=$3
export MOCK_NGPUS=4

expect() { # name, wanted exit, wanted text, command...
  local name=$1 want=$2 text=$3; shift 3
  checks=$((checks + 1))
  timeout 120 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$text" "$tmp/out"; then
    failed=$((failed + 1))
    echo "FAILED: $name: exit $rc (wanted $want, text '$text'):" >&2
    tail -30 "$tmp/out" | sed 's/^/    /' >&2
  fi
}
ok="Out of bounds values : 0 OK"
small=(-b 8 -e 64K -f 8 -w 1 -n 2 -c 1)
for bin in "$ar" "$ag" "$rs"; do
  n=$(basename "$bin")
  expect "$n -g 2 all types/ops" 0 "$ok" "$bin" "${small[@]}" -g 2 -d all -o all
  expect "$n -g 3 odd sizes -u 3" 0 "$ok" "$bin" -b 1000 -e 7000 -i 3000 -w 1 -n 2 -c 2 -g 3 -u 3 -d half
  expect "$n -t 2 threads" 0 "$ok" "$bin" "${small[@]}" -t 2 -d bfloat16
  expect "$n -t 2 -g 2 graph" 0 "$ok" "$bin" "${small[@]}" -t 2 -g 2 -G 3 -d float
  expect "$n -g 2 graph -z 0 -a 2" 0 "$ok" "$bin" "${small[@]}" -g 2 -G 2 -a 2 -d int32
  expect "$n -g 2 -z 1" 0 "$ok" "$bin" "${small[@]}" -g 2 -z 1 -d uint8
  expect "$n -g 2 -z 3 -C 1" 0 "cputime" "$bin" "${small[@]}" -g 2 -z 3 -C 1
  expect "$n -g 2 -R 1" 0 "$ok" "$bin" "${small[@]}" -g 2 -R 1
  expect "$n -g 2 -R 2 --alloc cuda" 0 "$ok" "$bin" "${small[@]}" -g 2 -R 2 --alloc cuda
  expect "$n -g 1" 0 "$ok" "$bin" "${small[@]}" -g 1 -d double
  expect "$n corruption found" 3 "Out of bounds values : 8 FAILED" env MOCK_CORRUPT=1 "$bin" -b 1K -e 64K -f 4 -w 0 -n 1 -c 1 -g 2
  expect "$n corruption, graph" 3 "Out of bounds values : 2 FAILED" env MOCK_CORRUPT=1 "$bin" -b 1K -e 1K -w 0 -n 2 -G 2 -c 3 -g 2
  expect "$n too many GPUs" 2 "only 4 were found" "$bin" -b 8 -e 8 -g 5
  expect "$n no GPU" 1 "no usable CUDA device" env MOCK_NGPUS=0 "$bin" -b 8 -e 8
  expect "$n csv" 0 "$ok" "$bin" -b 1K -e 4K -f 2 -w 0 -n 1 -g 2 --csv "$tmp/$n.csv" --label mock
  checks=$((checks + 1))
  rows=$(grep -c ",mock," "$tmp/$n.csv" 2>/dev/null)
  if [ "$rows" != 3 ]; then failed=$((failed + 1)); echo "FAILED: $n csv rows: $rows" >&2; fi
done
# compare mode: two child runs (SYMMCOLL_DISABLE=1, then not), the side-by-side table, one CSV
expect "compare mode" 0 "AllReduce: libsymmcoll vs nccl" "$ar" -b 1K -e 4K -f 2 -w 0 -n 1 -g 2 -X "$tmp/cmp"
checks=$((checks + 1))
if [ "$(grep -c '^AllReduce,nccl,' "$tmp/cmp.csv" 2>/dev/null)" != 3 ] ||
   [ "$(grep -c '^AllReduce,libsymmcoll,' "$tmp/cmp.csv" 2>/dev/null)" != 3 ] ||
   ! grep -q "SYMMCOLL_DISABLE=1" "$tmp/out"; then
  failed=$((failed + 1))
  echo "FAILED: compare mode CSV or the NCCL-alone run" >&2
fi
# the table: header and one line per size, nccl-tests columns
expect "table header" 0 "#       size         count      type   redop    root     time   algbw   busbw  #wrong" \
  "$ar" -b 1K -e 4K -f 2 -w 0 -n 1 -g 2
expect "table line" 0 "        1024           256     float     sum      -1" "$ar" -b 1K -e 4K -f 2 -w 0 -n 1 -g 2
expect "AG sizes" 0 "        4096           512     float    none      -1" "$ag" -b 4K -e 4K -w 0 -n 1 -g 2
expect "RS sizes" 0 "        4096           512     float     sum      -1" "$rs" -b 4K -e 4K -w 0 -n 1 -g 2
echo "test_perf_driver: $checks checks, $failed failed"
[ "$failed" = 0 ]
