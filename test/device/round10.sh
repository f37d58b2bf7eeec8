#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 3, second GPU round: the lazy-loading fix (kernels preloaded at communicator setup)
# against the 8-ranks bootstrap failure and every world size 3..8 through the bootstrap; host
# cost of the CUDA calls on the eager path; Lamport grid sizes at 64-512 KiB.
# usage: test/device/round10.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
A=(--mode nccl --threads --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4)
for i in 1 2 3; do run boot8_$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_SPIN_TIMEOUT_MS=3000 $T --ranks 8 "${A[@]}"; done
for n in 4 5 6 7; do run boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_SPIN_TIMEOUT_MS=3000 $T --ranks $n "${A[@]}"; done
run boot8_soak20k 120 env SYMMCOLL_NCCL_LIB="$BOOT" $T --ranks 8 --mode nccl --threads --quick --no-nccl-compare --soak 20000 --replays 200 --max-mb 4
run launch_costs 60 $B/perf/launch_costs
P=$B/perf/all_reduce_perf
for bpb in 1024 2048 4096; do
  run lamport_bpb_$bpb 60 env SYMMCOLL_AR_BYTES_PER_BLOCK=$bpb $P -N 2 -d bfloat16 -b 32K -e 512K -f 2 -w 5 -n 50 -c 0 -G 20
done
print_rows
cat "$out/launch_costs.log"
for bpb in 1024 2048 4096; do echo "== bytes per block $bpb"; grep -E "^ +[0-9]+ +[0-9]+ +bfloat16" "$out/lamport_bpb_$bpb.log" | awk '{print $1, $6, $10}'; done
tar -C "$out" -czf "$out/../round10_logs.tgz" . && rm -rf "$out"
