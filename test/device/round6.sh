#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sixth batched GPU round on a prebuilt tree (2 GPUs): 1000 cross-process teardown/setup cycles of
# our peer memory on one communicator, windows (group path), the zero-copy cap of the tuner end to
# end (-R 2, data check), a staging-size trial for the two-shot.
# usage: test/device/round6.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
run tr_cycles_setup_1000 200 $TP cycles setup 1000
run tr_procs 40 $TP peers procs
run tr_initall 40 $TP peers initall
T=$B/test/algos/test_allreduce
run nccl_procs 120 $T --mode nccl --procs 2 --quick --soak 20000 --replays 100 --max-mb 64
P=$B/perf/all_reduce_perf
run zc_N2_auto 90 $P -N 2 -R 2 -d bfloat16 -b 8 -e 256M -f 8 -w 2 -n 5 -c 1
run zc_g2_auto 90 $P -g 2 -R 2 -d float -b 8 -e 256M -f 8 -w 2 -n 5 -c 1
for mb in 64 256; do
  run perf_twoshot_buf$mb 60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_BUFFER_BYTES=$((mb << 20)) $P -N 2 -d bfloat16 -b 8M -e 256M -f 2 -w 5 -n 30 -c 0 -G 20
done
print_rows
grep -E "cycles:|fds|maps" "$out/tr_cycles_setup_1000.log" | tail -4
for f in "$out"/zc_*.log; do echo "== $(basename "$f")"; grep -E "^ +[0-9]+ " "$f" | awk '{print $1, $6, $9, $10, $13}' | tr '\n' ';'; echo; done
for f in "$out"/perf_*.log; do echo "== $(basename "$f")"; awk '$3=="bfloat16"{print $1, $6}' "$f" | tr '\n' ' '; echo; done
tar -C "$out" -czf "$out/../round6_logs.tgz" . && rm -rf "$out"
