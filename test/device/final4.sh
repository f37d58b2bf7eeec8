#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 4, last GPU round at the submitted library (two-shot with the ncclCommRegister
# descriptor exchange resolved inside the start wait; ncclCommRegister peer mapping). PART=check:
# the whole GPU suite by hand (every transport and all-reduce mode, the 10^6-call soak,
# disassembly); PART=perf: the acceptance comparison against NCCL (2 processes, bf16; graph with
# 2 runs per library, eager with 4, alternating order), ncclCommRegister (-R 1) against NCCL
# with its registration, and the cost of the descriptor exchange (forced two-shot with and
# without it). usage: [PART=check|perf] test/device/final4.sh <out-dir> [build-dir]
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
run cmp_eager 200 $P -N 2 -d bfloat16 -b 8 -e 256M -f 2 -w 5 -n 20 -c 1 --compare_reps 4 -X $out/allreduce_N2_bf16_eager
run cmp_G20_R1 150 $P -N 2 -R 1 -d bfloat16 -b 1K -e 1G -f 4 -w 5 -n 20 -c 1 -G 20 --compare_reps 1 -X $out/allreduce_N2_bf16_G20_R1
R=(-N 2 -d bfloat16 -b 64K -e 4M -f 2 -w 5 -n 20 -c 1 -G 20)
for rep in 1 2; do
  run xchg_$rep   60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}"
  run noxchg_$rep 60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot SYMMCOLL_ZERO_COPY_MAX_BYTES=-1 $P "${R[@]}"
  run reg_$rep    60 env SYMMCOLL_ALLREDUCE_ALGO=twoshot $P "${R[@]}" -R 1
done
fi
print_rows
if [ "$PART" != check ]; then
for m in G20 eager G20_R1; do echo "== compare $m"; grep -E "^ +[0-9]+ +bfloat16" "$out/cmp_$m.log" | awk '{print $1, $4, $5, $6, $7, $8, $9, $10, $11, $12}'; done
python3 test/device/compare_runs.py "$out" --title "forced two-shot (graph, min of 2 runs)" xchg noxchg reg
fi
tar -C "$out" -czf "$out/../final4_${PART}_logs.tgz" . && rm -rf "$out"
