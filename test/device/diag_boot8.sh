#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Diagnosis of the intermittent 8-ranks-on-2-GPUs bootstrap soak failure: repeats of the test,
# with the tuner's per-call TRACE (which algorithm each rank picked, in order) and with fewer blocks.
# usage: test/device/diag_boot8.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
A=(--mode nccl --threads --ranks 8 --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for i in 1 2 3; do run boot8_trace_$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_DEBUG=TRACE SYMMCOLL_DEBUG_SUBSYS=TUNER $T "${A[@]}"; done
for i in 1 2 3; do run boot8_plain_$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T "${A[@]}"; done
for i in 1 2 3; do run boot8_blk32_$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_AR_MAX_BLOCKS=32 $T "${A[@]}"; done
print_rows
python3 - "$out" <<'PY'
import os, re, sys, collections
out = sys.argv[1]
for f in sorted(os.listdir(out)):
    if not f.startswith("boot8_trace"): continue
    seq = collections.defaultdict(list)
    for line in open(os.path.join(out, f), errors="replace"):
        m = re.search(r"comm (0x[0-9a-f]+) rank (\d+): all-reduce of (\d+) bytes, type (\d+), op (\d+): (\w+)", line)
        if m: seq[int(m.group(2))].append((m.group(3), m.group(4), m.group(5), m.group(6)))
    ranks = sorted(seq)
    n = min(len(seq[r]) for r in ranks) if ranks else 0
    first = next((i for i in range(n) if len({seq[r][i] for r in ranks}) > 1), None)
    print(f, "calls per rank", {r: len(seq[r]) for r in ranks}, "first divergence", first)
    if first is not None:
        for r in ranks: print("  rank", r, seq[r][max(0, first - 2):first + 3])
PY
grep -h "gave up" "$out"/boot8_*.log | sed -E 's/block [0-9]+ //' | sort | uniq -c | head -20
tar -C "$out" -czf "$out/../diag_logs.tgz" . && rm -rf "$out"
