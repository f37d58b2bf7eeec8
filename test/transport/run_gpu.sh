#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the transport GPU suite (peer memory in every rank mode, windows, ncclCommRegister
# zero-copy, create/destroy cycles, security, multicast guard) and the test bootstrap's GPU test;
# prints a table last.
# Usage: test/transport/run_gpu.sh [extra meson setup options]
#   NCCL_LIB=/path/libnccl.so.2   the real NCCL (default: configure-time search, then the torch
#                                 venv's nvidia-nccl wheel when python3 can import it)
set -uo pipefail
cd "$(dirname "$0")/../.."
# Multicast stays off (README.md, "NVLink multicast"): these stay set for everything below.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_MODULE_LOADING=EAGER
. build-aux/prereqs.sh

if [ -z "${NCCL_LIB:-}" ]; then
  NCCL_LIB=$(python3 - 2>/dev/null <<'PY'
import os
try:
    import nvidia.nccl as n
    for base in list(getattr(n, "__path__", [])):
        p = os.path.join(base, "lib", "libnccl.so.2")
        if os.path.exists(p):
            print(p)
            break
except Exception:
    pass
PY
)
fi
setup_opts=("$@")
if [ -n "${NCCL_LIB:-}" ]; then
  export SYMMCOLL_NCCL_LIB="$NCCL_LIB" # tests of the bootstrap override it in their own env
  setup_opts+=("-Dnccl_lib=$NCCL_LIB")
  inc=$(dirname "$(dirname "$NCCL_LIB")")/include
  [ -f "$inc/nccl.h" ] && setup_opts+=("-Dnccl_include=$inc")
  echo "real NCCL: $NCCL_LIB"
fi
if [ -f build/build.ninja ]; then
  meson setup --reconfigure build "${setup_opts[@]}" >/dev/null || meson setup --wipe build -Dgpu_archs=90a "${setup_opts[@]}" || exit 1
else
  meson setup build -Dgpu_archs=90a "${setup_opts[@]}" | tail -3 || exit 1
fi
ninja -C build || exit 1
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"

tests=$(meson test -C build --list 2>/dev/null | sed -n 's/^libsymmcoll:gpu \/ //p' |
        grep -E '^(transport_gpu_|bootstrap_gpu)' || true)
[ -n "$tests" ] || tests=$(meson test -C build --list 2>/dev/null | grep -oE '(transport_gpu_[a-z0-9_]+|bootstrap_gpu)')
start=$(date +%s)
# shellcheck disable=SC2086
meson test -C build --print-errorlogs --num-processes 1 $tests
rc=$?
echo "wall time: $(( $(date +%s) - start )) s"

python3 - build/meson-logs/testlog.json <<'PY'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    t = json.loads(line)
    out = t.get("stdout", "") or ""
    m = re.findall(r"(\d+) checks, (\d+) failed", out)
    checks = f"{m[-1][0]} checks, {m[-1][1]} failed" if m else "-"
    rows.append((t["name"].split(" / ")[-1], t["result"], f'{t.get("duration", 0):.1f}s', checks))
w = max((len(r[0]) for r in rows), default=10)
print()
print(f'{"test".ljust(w)}  {"result":8}  {"time":>7}  checks')
for r in rows:
    print(f"{r[0].ljust(w)}  {r[1]:8}  {r[2]:>7}  {r[3]}")
PY
exit $rc
