#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The meson `gpu` suite in parts, for machines that cap one command's time: runs the suite's tests
# one at a time (those named first, then the rest in meson's order), skips every test that already
# has a line in RESULTS (an earlier part), and starts no test once BUDGET seconds have passed.
#   test/device/meson_in_parts.sh BUILD_DIR RESULTS BUDGET_S [TEST...]
# RESULTS gets one line per test: name, meson's verdict and seconds; each test's meson log is
# copied beside it (RESULTS.d/). Run it again with the same RESULTS for the next part.
set -uo pipefail
B=${1:?build dir} results=${2:?results file} budget=${3:?budget seconds}
shift 3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
mkdir -p "$results.d"
touch "$results"
# Test names without meson's prefixes ("libsymmcoll:gpu / x", "gpu - libsymmcoll:x").
all=$(meson test -C "$B" --no-rebuild --suite gpu --list 2>/dev/null | sed -e 's/.*[/:] *//')
for t in $(printf '%s\n' "$@" $all | awk 'NF && !seen[$0]++'); do
  grep -q "^$t " "$results" && continue
  if [ $(($(date +%s) - t0)) -ge "$budget" ]; then
    echo "meson_in_parts: budget spent, next part starts at $t"
    break
  fi
  s=$(date +%s)
  meson test -C "$B" --no-rebuild --suite gpu "$t" --logbase "part_$t" >"$results.d/$t.out" 2>&1
  verdict=$(grep -Eo '(OK|FAIL|SKIP|TIMEOUT|ERROR|EXPECTEDFAIL|UNEXPECTEDPASS) +[0-9.]+s' \
    "$results.d/$t.out" | head -1)
  cp "$B/meson-logs/part_$t.txt" "$results.d/" 2>/dev/null
  echo "$t ${verdict:-NO-RESULT} (wall $(($(date +%s) - s)) s)" | tee -a "$results"
done
echo "meson_in_parts: $(grep -c ' OK ' "$results") OK, $(grep -c ' SKIP ' "$results") skipped," \
  "$(grep -vc ' OK \| SKIP ' "$results") other, of $(printf '%s\n' $all | grep -c .) tests"
