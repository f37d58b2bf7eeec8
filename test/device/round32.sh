#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5: after one of our kernels gave up (errorFlag set), ncclAllReduce forwards to the real
# NCCL and launches nothing of ours (test_allreduce nccl mode: errorForwardTest, then the abort
# test), plus the nccl-mode all-reduce runs whose host path changed.
# usage: test/device/round32.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
T=$B/test/algos/test_allreduce
run ar_g2_r1000     150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_threads_2    90  $T --mode nccl --threads --ranks 2 --quick --soak 5000 --replays 200 --max-mb 16
run ar_boot_8 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks 8 --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4
print_rows
grep -E "after an error|abort:" "$out/ar_g2_r1000.log" | head -5
tar -C "$out" -czf "$out/../round32_logs.tgz" . && rm -rf "$out"
