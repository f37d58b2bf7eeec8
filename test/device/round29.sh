#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: peer push bandwidth by method (perf/push_bw): copy engine, SM 16-byte stores (the
# two-shot's way), TMA bulk stores, copy engine and SM stores side by side; one way and both
# ways; 256, 64 and 32 MiB per direction (first run: no side by side, 16-132 TMA blocks).
# usage: test/device/round29.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
run push_256 120 $B/perf/push_bw 256
run push_64 120 $B/perf/push_bw 64
run push_32 120 $B/perf/push_bw 32
print_rows
cat "$out/push_256.log" "$out/push_64.log" "$out/push_32.log"
tar -C "$out" -czf "$out/../round29_logs.tgz" . && rm -rf "$out"
