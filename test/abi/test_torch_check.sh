#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test/torch_preload_check.sh without PyTorch or a GPU (CPU suite). PYTHON is torch_check_stub.sh,
# whose ranks are a small application linked to the recording fake NCCL, so the check reads the
# log lines libsymmcoll really writes when preloaded. The check must pass with identical results
# and both ranks' lines, and fail, saying why, when one rank's line is missing or the results
# differ.
# Usage: test_torch_check.sh SOURCE_ROOT BUILD_ROOT NCCL_APP
set -u
src=${1:?source root} build=${2:?build root}
# shellcheck source=../checks.sh
. "$(dirname "$0")/../checks.sh"
export TMPDIR=$tmp PYTHON=$src/test/abi/torch_check_stub.sh TORCH_CHECK_APP=${3:?NCCL application}

run() { # name, then VAR=value settings for the check's run: its output in $tmp/NAME.out
  local name=$1
  shift
  env "$@" "$src/test/torch_preload_check.sh" "$build" >"$tmp/$name.out" 2>&1
  echo "$name: exit $?" >>"$tmp/$name.out"
}
holds() { # name, text its output must hold
  grep -qF -- "$2" "$tmp/$1.out" || { cat "$tmp/$1.out" >&2; false; }
}

run same
check "both ranks' lines found" holds same "libsymmcoll log lines naming the real NCCL: 2"
check "identical results pass" holds same "PASS: identical results with and without libsymmcoll"
check "identical results exit 0" holds same "same: exit 0"

run one_rank TORCH_CHECK_PRELOAD_RANKS=1
check "one rank's line missing fails" \
  holds one_rank "FAIL: libsymmcoll did not report the real NCCL in both ranks"
check "one rank's line missing exits 1" holds one_rank "one_rank: exit 1"

run differ TORCH_CHECK_PRELOAD_DIGEST=00000000000000000000
check "different results fail" holds differ "FAIL: results differ with libsymmcoll preloaded"
check "different results exit 1" holds differ "differ: exit 1"
checks_done test_torch_check
