#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: where the two-shot's time goes. An uncommitted build prints, for one call in 512,
# the globaltimer of thread 0 of blocks 0, 64 and 127 at every phase boundary (entry, beginCall,
# A, arrive start, wait start, B, arrive mid, wait mid, C, end). Graphs at 16 MiB, 64 MiB, 1 GiB.
# The instrumentation existed only in that build (never committed); the timeline is summarized
# in perf/NOTES.md.
# usage: test/device/round27.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
P=$B/perf/all_reduce_perf
for sz in 16M 64M 1G; do
  run ph_$sz 60 $P -N 2 -d bfloat16 -b $sz -e $sz -f 2 -w 5 -n 20 -c 1 -G 20
done
print_rows
for sz in 16M 64M 1G; do echo "== $sz"; grep -E "^ +[0-9]+ +bfloat16" "$out/ph_$sz.log"; grep PHASES "$out/ph_$sz.log" | sort -k3,3n -k5,5n | head -12; done
tar -C "$out" -czf "$out/../round27_logs.tgz" . && rm -rf "$out"
