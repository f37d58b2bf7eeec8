#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One batched GPU round for the all-reduce work on a 2-GPU node, run on a build made elsewhere
# (binaries run directly, no meson): correctness (test_allreduce in every mode), the multimem
# disassembly check, then per-algorithm perf sweeps (2 processes, bf16) to tune the thresholds.
# usage: test/device/allreduce_round.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
q=(--quick --replays 100 --soak 2000)
run direct_2        120 $T --mode direct --ranks 2 "${q[@]}" --max-mb 64
run nccl_g2         120 $T --mode nccl --ranks 2 "${q[@]}" --max-mb 64
run nccl_procs      120 $T --mode nccl --procs 2 "${q[@]}" --max-mb 16
run nccl_threads    60  $T --mode nccl --threads --ranks 2 "${q[@]}" --max-mb 16
run direct_chunked  60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
for n in 3 4 8; do run direct_ranks_$n 90 $T --mode direct --ranks $n --quick --soak 1000 --replays 50 --max-mb 4; done
run disasm 60 python3 test/algos/test_disasm.py $B/test/algos/allreduce.ptx $B/src/libsymmcoll.so.0
P=$B/perf/all_reduce_perf
for g in 0 20; do
  for a in nccl lamport oneshot twoshot; do
    gf=(); [ $g = 20 ] && gf=(-G 20)
    dis=(); [ $a = nccl ] && dis=(SYMMCOLL_DISABLE=1)
    run perf_${a}_G$g 90 env "${dis[@]}" SYMMCOLL_ALLREDUCE_ALGO=$a $P -N 2 -d bfloat16 -b 1K -e 256M -f 4 -w 5 -n 30 -c 0 "${gf[@]}"
  done
done
print_rows
python3 - "$out" <<'PY'
import sys, re, os
out = sys.argv[1]
tab = {}
for f in sorted(os.listdir(out)):
    m = re.match(r"perf_(\w+)_G(\d+)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        p = line.split()
        if len(p) > 6 and p[0].isdigit() and p[2] == "bfloat16":
            tab.setdefault((int(m.group(2)), int(p[0])), {})[m.group(1)] = float(p[5])
for g in (0, 20):
    print(f"\n== G{g}: out-of-place us (2 procs, bf16)\n{'bytes':>10} {'nccl':>9} {'lamport':>9} {'oneshot':>9} {'twoshot':>9}")
    for (gg, b), d in sorted(tab.items()):
        if gg == g:
            print(f"{b:>10} " + " ".join(f"{d.get(a, float('nan')):9.2f}" for a in ("nccl", "lamport", "oneshot", "twoshot")))
PY
