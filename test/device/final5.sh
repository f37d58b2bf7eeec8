#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 5, last GPU round. The library is unchanged since 011f1e9 (session 4); this session's
# experiments (rounds 25-29) changed nothing that was kept. PART=check: the whole GPU suite by
# hand, as final4.sh. PART=perf: the acceptance comparison against NCCL (2 processes, bf16;
# graph with 2 runs per library, eager with 6, alternating order), PyTorch's symmetric-memory
# kernels in one harness, and the peer push ceiling by method (perf/push_bw).
# usage: [PART=check|perf] test/device/final5.sh <out-dir> [build-dir]
# shellcheck source=test/device/common.sh
. "$(dirname "$0")/common.sh"
TP=$B/test/transport/test_peer_mem
T=$B/test/algos/test_allreduce
P=$B/perf/all_reduce_perf
PART=${PART:-all}
if [ "$PART" != perf ]; then
for m in procs nonblocking initall threads; do run tr_$m 60 $TP peers $m; done
for n in 3 8; do run tr_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP peers bootstrap $n; done
for m in procs threads; do run tr_userreg_$m 90 $TP userreg $m; done
run tr_cycles_setup_1000 150 $TP cycles setup 1000
run tr_sec_nonmember 60 $TP security nonmember
run tr_sec_squat 60 $TP security squat
run tr_mcguard 60 env SYMMCOLL_NCCL_LIB="$BOOT" $TP mcguard
run ar_direct_2     150 $T --mode direct --ranks 2 --quick --replays 1000 --soak 20000 --max-mb 256
run ar_direct_8     90  $T --mode direct --ranks 8 --quick --replays 100 --soak 5000 --max-mb 16
run ar_chunked      60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
run ar_rounds_1M    60  env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
run ar_g2_r1000     150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
run ar_threads_2    90  $T --mode nccl --threads --ranks 2 --quick --soak 5000 --replays 200 --max-mb 16
for n in 3 4 5 6 7 8; do run ar_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
run ar_soak_1e6     120 $T --mode nccl --procs 2 --quick --soak 1000000 --replays 0 --max-mb 1
gunzip -c "$B/allreduce.ptx.gz" > "$out/allreduce.ptx"
run disasm          60  python3 test/algos/test_disasm.py "$out/allreduce.ptx" $B/src/libsymmcoll.so.0
rm -f "$out/allreduce.ptx"
fi
if [ "$PART" != check ]; then
run cmp_G20 200 $P -N 2 -d bfloat16 -b 8 -e 1G -f 2 -w 5 -n 20 -c 1 -G 20 -X $out/allreduce_N2_bf16_G20
run cmp_eager 240 $P -N 2 -d bfloat16 -b 8 -e 256M -f 2 -w 5 -n 20 -c 1 --compare_reps 6 -X $out/allreduce_N2_bf16_eager
run torch_cmp_nccl 120 env SYMMCOLL_DISABLE=1 python3 perf/torch_compare.py nccl $out/torch_nccl.csv
run torch_cmp_ours 120 env LD_PRELOAD=$PWD/$B/src/libsymmcoll.so.0 python3 perf/torch_compare.py symmcoll $out/torch_ours.csv
run push_64 60 $B/perf/push_bw 64
fi
print_rows
if [ "$PART" != check ]; then
for m in G20 eager; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
echo "== torch (bytes, NCCL via torch, one_shot, two_shot_ | libsymmcoll via torch)"
paste -d' ' <(grep -E "^ +[0-9]+ " "$out/torch_cmp_nccl.log" | awk '{print $1, $2, $3, $4}') <(grep -E "^ +[0-9]+ " "$out/torch_cmp_ours.log" | awk '{print $2}')
grep -E "^(copy|sm |ce)" "$out/push_64.log"
fi
tar -C "$out" -czf "$out/../final5_${PART}_logs.tgz" . && rm -rf "$out"
