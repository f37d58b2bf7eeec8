#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, first GPU round: two-shot with the gather fused into the next round's reduce and
# the ncclCommRegister descriptor exchange. Correctness in every mode (random subsets of ranks
# reading in place, many rounds), the transport's registration test, then the two-shot at
# 4 MiB-1 GiB in graphs with the gather fused and not (SYMMCOLL_AR_FUSE_GATHER), against NCCL
# in the same run, and ncclCommRegister (-R 1) at 64 KiB-4 MiB with the two-shot forced.
# The fused gather (SYMMCOLL_AR_FUSE_GATHER) existed only in the build this round ran: it measured
# no gain and was taken out before the descriptor exchange was committed.
# usage: [PART=check|perf] test/device/round18.sh <out-dir> [build-dir]   (both by default)
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
PM=$B/test/transport/test_peer_mem
PART=${PART:-all}
if [ "$PART" != perf ]; then
run direct_2        90 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_2_nofuse 90 env SYMMCOLL_AR_FUSE_GATHER=0 $T --mode direct --ranks 2 --quick --replays 50 --soak 0 --max-mb 16
run direct_chunked  60 $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run direct_8        90 $T --mode direct --ranks 8 --quick --replays 50 --soak 2000 --max-mb 16
run rounds_1M       60 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run rounds_64K_8    60 env SYMMCOLL_AR_ROUND_BYTES=65536 $T --mode direct --ranks 8 --quick --algos twoshot --soak 0 --replays 20 --max-mb 8
run nccl_procs      120 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for n in 3 8; do run boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks $n "${A[@]}"; done
run peers_procs     60 $PM peers procs
run peers_nonblock  60 $PM peers nonblocking
run userreg_procs   90 $PM userreg procs
run userreg_threads 90 $PM userreg threads
run setup_cycles    240 $PM cycles setup 100
fi
if [ "$PART" != check ]; then
P=$B/perf/all_reduce_perf
S=(-N 2 -d bfloat16 -b 4M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run fuse1_$rep 120 $P "${S[@]}"
  run fuse0_$rep 120 env SYMMCOLL_AR_FUSE_GATHER=0 $P "${S[@]}"
done
run nccl_1 120 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
R=(-N 2 -d bfloat16 -b 64K -e 4M -f 4 -w 5 -n 20 -c 1 -G 20)
run reg1_two 90 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}" -R 1
run reg0_two 90 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}" -R 0
fi
print_rows
echo "== two-shot registers/stack (all instances)"
cuobjdump --dump-resource-usage "$B/src/libsymmcoll.so" 2>/dev/null | grep -A1 "twoShotKernel" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c | head -8
python3 - "$out" <<'PY'
import sys, os, re, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for f in sorted(os.listdir(out)):
    m = re.match(r"(fuse\d|nccl|reg\d_two)_?(\d?)\.log", f)
    if not m: continue
    for line in open(os.path.join(out, f)):
        x = line.split()
        if len(x) > 9 and x[2] == "bfloat16": t[m.group(1)].setdefault(int(x[0]), []).append((float(x[5]), x[8]))
for group in (["fuse1", "fuse0", "nccl"], ["reg1_two", "reg0_two"]):
    cfgs = [c for c in group if c in t]
    if not cfgs: continue
    sizes = sorted(t[cfgs[0]])
    print("bytes      " + " ".join(f"{c:>16}" for c in cfgs) + ("   fuse1/nccl fuse0/nccl" if "nccl" in cfgs else ""))
    for s in sizes:
        row = f"{s:<10} " + " ".join(f"{min(t[c][s])[0]:10.2f} w={max(v[1] for v in t[c][s]):>3}" for c in cfgs)
        if "nccl" in cfgs and s in t["nccl"]:
            n = min(t["nccl"][s])[0]
            row += "   " + " ".join(f"{min(t[c][s])[0]/n:9.3f}" for c in ("fuse1", "fuse0") if c in t)
        print(row)
PY
tar -C "$out" -czf "$out/../round18_${PART}_logs.tgz" . && rm -rf "$out"
