#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Seventh batched GPU round on a prebuilt tree (2 GPUs): 1000 cross-process teardown/setup cycles,
# and the two-shot round-size knob (SYMMCOLL_AR_ROUND_BYTES): correctness with small rounds, then
# timings at 8-256 MiB for a few caps.
# usage: test/device/round7.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_cycles_setup_1000 240 $TP cycles setup 1000
T=$B/test/algos/test_allreduce
run direct_2_round1M 120 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --replays 50 --soak 0 --max-mb 64
run nccl_procs_round1M 120 env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode nccl --procs 2 --quick --replays 50 --soak 2000 --max-mb 64
P=$B/perf/all_reduce_perf
for rb in 0 4 8 16; do
  run perf_twoshot_round$rb 60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_AR_ROUND_BYTES=$((rb << 20)) $P -N 2 -d bfloat16 -b 8M -e 256M -f 2 -w 5 -n 30 -c 0 -G 20
done
print_rows
grep -E "cycles:|fds|maps|memory" "$out/tr_cycles_setup_1000.log" | tail -4
for f in "$out"/perf_*.log; do echo "== $(basename "$f")"; awk '$3=="bfloat16"{print $1, $6}' "$f" | tr '\n' ' '; echo; done
tar -C "$out" -czf "$out/../round7_logs.tgz" . && rm -rf "$out"
