#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Stands in for python in test/torch_preload_check.sh where there is no PyTorch or GPU. Called
# as "PYTHON test/torch_preload_check.py RESULTS", it runs two "ranks" of a small NCCL
# application (TORCH_CHECK_APP, linked to the recording fake NCCL), which inherit the check's
# environment (in its second run LD_PRELOAD=libsymmcoll and the library's log file), then writes
# the digest line the real script ends with. Under LD_PRELOAD, TORCH_CHECK_PRELOAD_RANKS (2) and
# TORCH_CHECK_PRELOAD_DIGEST change what it does, so that test_torch_check.sh can make the
# check fail.
set -euo pipefail
results=${2:?usage: torch_check_stub.sh SCRIPT RESULTS}
ranks=2 digest=13b9c157bda163b4ddaf
if [ -n "${LD_PRELOAD:-}" ]; then
  ranks=${TORCH_CHECK_PRELOAD_RANKS:-$ranks}
  digest=${TORCH_CHECK_PRELOAD_DIGEST:-$digest}
fi
for _ in $(seq 1 "$ranks"); do
  CUDA_VISIBLE_DEVICES='' "${TORCH_CHECK_APP:?the NCCL application}" >/dev/null
done
echo "checked 914 results, 0 mismatches, overall $digest" >"$results"
