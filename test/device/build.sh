#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds libsymmcoll, its tests and the perf binaries on a GPU machine, as perf/compare.sh does
# (the GPU's architecture only, NCCL found as meson finds it), into BUILD_DIR (default: the
# repository's build/), and prints the seconds it took. Then, for example:
#   test/device/meson_in_parts.sh BUILD_DIR RESULTS 500     (the GPU suite, in parts)
#   PERF_BIN=BUILD_DIR/perf GRAPH=10 perf/compare.sh OUT     (the comparison without a rebuild)
#   test/device/build.sh [BUILD_DIR]
set -euo pipefail
start=$(date +%s)
BUILD_DIR=${1:-${BUILD_DIR:-}}
export BUILD_DIR
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/../../perf/build_env.sh"
perf_build "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
echo "build: $BUILD_DIR in $(($(date +%s) - start)) s"
