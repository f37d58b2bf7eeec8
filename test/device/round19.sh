#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, second GPU round: the two-shot with the ncclCommRegister descriptor exchange (fused
# gather taken out again: round 18 measured no gain). Correctness again, then the cost of the
# exchange: forced two-shot at 64 KiB-4 MiB with the exchange (default), without it
# (SYMMCOLL_ZERO_COPY_MAX_BYTES=-1) and the previous library (buildv = da8af4a, preloaded), all
# without registration, and with ncclCommRegister (-R 1); then auto 4 MiB-1 GiB, new against
# previous against NCCL. usage: test/device/round19.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
PM=$B/test/transport/test_peer_mem
run direct_2        90 $T --mode direct --ranks 2 --quick --replays 100 --soak 2000 --max-mb 256
run direct_8        90 $T --mode direct --ranks 8 --quick --replays 50 --soak 2000 --max-mb 16
run rounds_1M       60 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run nccl_procs      120 $T --mode nccl --procs 2 --quick --soak 5000 --replays 300 --max-mb 256
run boot_8          60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks 8 --mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4
run userreg_procs   90 $PM userreg procs
run userreg_threads 90 $PM userreg threads
P=$B/perf/all_reduce_perf
V=$PWD/buildv/src/libsymmcoll.so.0
R=(-N 2 -d bfloat16 -b 64K -e 4M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run xchg_$rep   60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}"
  run noxchg_$rep 60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_ZERO_COPY_MAX_BYTES=-1 $P "${R[@]}"
  run prev_$rep   60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot LD_PRELOAD=$V $P "${R[@]}"
  run reg_$rep    60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}" -R 1
done
S=(-N 2 -d bfloat16 -b 4M -e 1G -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run new_$rep  120 $P "${S[@]}"
  run old_$rep  120 env LD_PRELOAD=$V $P "${S[@]}"
done
run nccl_1 120 env SYMMCOLL_DISABLE=1 $P "${S[@]}"
print_rows
python3 test/device/compare_runs.py "$out" --title "forced two-shot" xchg noxchg prev reg
python3 test/device/compare_runs.py "$out" --ref nccl new old nccl
tar -C "$out" -czf "$out/../round19_logs.tgz" . && rm -rf "$out"
