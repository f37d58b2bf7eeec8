#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, first GPU round: the 8-ranks bootstrap soak failure with per-launch TRACE (kernel,
# elements, blocks, stream per rank) and the grid in the timeout report; then the GPU suites
# again after the test/register refactors of the last session.
# usage: test/device/round9.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for i in 1 2 3; do run boot8_trace_$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_SPIN_TIMEOUT_MS=3000 SYMMCOLL_DEBUG=TRACE SYMMCOLL_DEBUG_SUBSYS=TUNER,COLL $T --ranks 8 "${A[@]}"; done
run boot8_nolamport 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_SPIN_TIMEOUT_MS=3000 $T --ranks 8 --algos oneshot,twoshot,multimem "${A[@]}"
run boot6 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_SPIN_TIMEOUT_MS=3000 $T --ranks 6 "${A[@]}"
TP=$B/test/transport/test_peer_mem
run tr_procs 40 $TP peers procs
run tr_initall 40 $TP peers initall
run tr_cycles_setup_200 60 $TP cycles setup 200
run direct_2        90 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 64
run nccl_g2         90 $T --mode nccl --ranks 2 --quick --soak 5000 --replays 200 --max-mb 64
run nccl_procs      90 $T --mode nccl --procs 2 --quick --soak 5000 --replays 200 --max-mb 64
run ar_boot_3       60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks 3 "${A[@]}"
print_rows
python3 - "$out" <<'PY'
import os, re, sys, collections
out = sys.argv[1]
for f in sorted(os.listdir(out)):
    if not f.startswith("boot8_trace"): continue
    tun = collections.defaultdict(list); ker = collections.defaultdict(list)
    for line in open(os.path.join(out, f), errors="replace"):
        m = re.search(r"rank (\d+): all-reduce of (\d+) bytes, type (\d+), op (\d+): (\w+)", line)
        if m: tun[int(m.group(1))].append(m.group(2, 3, 4, 5))
        m = re.search(r"rank (\d+): all-reduce kernel (\d+), (\d+) elements, (\d+) blocks", line)
        if m: ker[int(m.group(1))].append(m.group(2, 3, 4))
    for name, seq in (("tuner", tun), ("kernels", ker)):
        ranks = sorted(seq)
        n = min(len(seq[r]) for r in ranks) if ranks else 0
        first = next((i for i in range(n) if len({seq[r][i] for r in ranks}) > 1), None)
        print(f, name, "per rank", {r: len(seq[r]) for r in ranks}, "first divergence", first)
        if first is not None:
            for r in ranks: print("  rank", r, seq[r][max(0, first - 2):first + 3])
        elif ranks:
            print("  last 3 of rank 0:", seq[ranks[0]][-3:])
PY
grep -h "gave up" "$out"/boot*.log | head -40
tar -C "$out" -czf "$out/../round9_logs.tgz" . && rm -rf "$out"
