#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU suite by hand on a GPU machine (every transport and all-reduce mode, the host
# path's tests, 3-8 ranks through the test bootstrap, all-gather and reduce-scatter, the 10^6-call
# soaks, disassembly):
#   test/device/gpu_suite.sh OUT_DIR [BUILD_DIR]     (or source it and call run_gpu_suite)
#   PART=repeats [REPEATS=10 CALLS=3000] test/device/gpu_suite.sh OUT_DIR [BUILD_DIR]: the soak,
#   REPEATS consecutive runs at each world size 2..8
#   PART=hangs [REPEATS=20] ...: the streams_2 hang, with the watchdog's reports
#   PART=collectives-hangs [REPEATS=40 RANKS=3 GPUS=0,1] ...: test_collectives RANKS --quick,
#   REPEATS runs under the watchdog on the GPUs GPUS (the copy-engine hang of src/algos/README.md
#   needs ranks that share a GPU, as 3 ranks on 2 GPUs do; on a larger host too)
# One log per command in OUT_DIR, a summary table at the end.
run_gpu_suite() {
  local TB=$B/test/transport T=$B/test/algos/test_allreduce C=$B/test/core/test_core_gpu
  local STAGE="SYMMCOLL_STAGE_AT_CREATION=1"
  for m in procs initall threads; do run tr_$m 60 env $STAGE $TB/test_peer_mem $m; done
  run tr_nonblocking 60 $TB/test_peer_mem nonblocking
  for n in 3 8; do run tr_boot_$n 60 env $STAGE SYMMCOLL_NCCL_LIB="$BOOT" $TB/test_peer_mem bootstrap $n; done
  for m in procs threads; do run tr_userreg_$m 90 env $STAGE $TB/test_peer_userreg $m; done
  run tr_cycles_setup_1000 150 env $STAGE $TB/test_peer_cycles setup 1000
  run tr_fault_exchange 60 env $STAGE $TB/test_peer_cycles fault
  run tr_sec_nonmember 60 env $STAGE $TB/test_peer_security nonmember
  run tr_sec_squat 60 env $STAGE $TB/test_peer_security squat
  run tr_mcguard 60 env $STAGE SYMMCOLL_NCCL_LIB="$BOOT" $TB/test_peer_security mcguard
  # A setting on one rank only: every rank forwards (same: the control, ours active).
  for m in maxctas disable same; do run tr_agree_$m 120 $TB/test_peer_agree $m; done
  # The host path through the bootstrap (test/core/README.md): the full-size runs.
  local F="SYMMCOLL_ALLREDUCE_ALGO=oneshot" CB="SYMMCOLL_NCCL_LIB=$BOOT"
  run core_late_30s 120 env $CB $F $C late 2 30000
  for n in 2 4; do
    run core_fault_$n 60 env $CB $F SYMMCOLL_TEST_FAIL_RANK=1 SYMMCOLL_TEST_FAIL_CALL=3 $C fault $n
  done
  run core_streams_1e5 300 env $CB $F $C streams 2 100000
  run core_abort_1000 600 env $CB $F $C abort 2 1000
  run core_group 60 env $CB $F $C group 2
  run core_nonblocking 60 env $CB $F $C nonblocking 2
  for n in 3 8; do
    run core_abort_setup_$n 60 env $CB $F $C abort-setup $n
    run core_abort_setup_norevoke_$n 60 env $CB $F $C abort-setup-norevoke $n
  done
  for n in 2 4 8; do run core_split_$n 60 env $CB $F $C split $n; done
  for n in 3 8; do run core_shrink_$n 60 env $CB $F $C shrink $n; done
  run core_mismatch 60 env $CB $F SYMMCOLL_TEST_KNOB_SKEW_RANK=1 $C mismatch 2
  for w in maxCTAs minCTAs CTAPolicy disable maxRanks; do
    run core_mismatch_$w 60 env $CB $F SYMMCOLL_TEST_KNOB_SKEW_RANK=1 SYMMCOLL_TEST_SKEW_WHAT=$w $C mismatch 3
  done
  for m in cta-zero cta-efficiency max-ctas; do run core_$m 60 env $CB $F $C $m 2; done
  run core_cta_zero_8 60 env $CB $F $C cta-zero 8
  for n in 2 4 8; do run core_ce_abort_$n 60 env $CB $C ce-abort $n; done
  for n in 2 3 4 5 6 7 8; do run core_soak_$n 300 env $CB $C soak $n 20000; done
  # All-reduce kernels (test/algos, owned with the kernels).
  run ar_direct_2     150 $T --mode direct --ranks 2 --quick --replays 1000 --soak 20000 --max-mb 256
  run ar_direct_8     90  $T --mode direct --ranks 8 --quick --replays 100 --soak 5000 --max-mb 16
  run ar_chunked      60  $T --mode direct --ranks 2 --quick --staging-mb 1 --soak 0 --replays 50 --max-mb 16
  run ar_rounds_1M    60  env SYMMCOLL_AR_ROUND_BYTES=1048576 $T --mode direct --ranks 2 --quick --algos twoshot --soak 0 --replays 50 --max-mb 64
  run ar_g2_r1000     150 $T --mode nccl --ranks 2 --quick --soak 20000 --replays 1000 --max-mb 64
  run ar_procs_r1000  150 $T --mode nccl --procs 2 --quick --soak 20000 --replays 1000 --max-mb 256
  run ar_threads_2    90  $T --mode nccl --threads --ranks 2 --quick --soak 5000 --replays 200 --max-mb 16
  for n in 3 4 5 6 7 8; do run ar_boot_$n 60 env SYMMCOLL_NCCL_LIB="$BOOT" $T --mode nccl --threads --ranks $n --quick --no-nccl-compare --soak 1000 --replays 50 --max-mb 4; done
  run ar_soak_1e6     120 $T --mode nccl --procs 2 --quick --soak 1000000 --replays 0 --max-mb 1
  # 4 ranks on 4 GPUs through the real NCCL (skip with fewer GPUs).
  run ar_g4           90  $T --mode nccl --ranks 4 --quick --soak 5000 --replays 200 --max-mb 64
  run ar_procs4       90  $T --mode nccl --procs 4 --quick --soak 5000 --replays 200 --max-mb 64
  # All-gather and reduce-scatter: every algorithm (multimem emulated), type, op, size and
  # placement, graph replays, then the mixed soak of all three collectives (10^6 calls).
  local TC=$B/test/algos/test_collectives
  for n in 2 3 4 5 6 7 8; do run coll_$n 300 env SYMMCOLL_NCCL_LIB="$BOOT" $TC $n; done
  run coll_soak_1e6 600 env SYMMCOLL_NCCL_LIB="$BOOT" $TC 2 --quick --soak 1000000
  # Captured all-gather and reduce-scatter in place on plain buffers: one process per GPU, the
  # real NCCL (skips with fewer than 2 GPUs).
  run graph_zero_copy 300 $B/test/algos/test_graph_zero_copy
  # ncclplain: windows' buffers reach the real NCCL through their aliases; one process per GPU.
  run nccl_plain 300 $B/test/algos/test_nccl_plain
  run disasm 300 python3 test/algos/test_disasm.py $B/src/libsymmcoll.so.0 $B/src/device-keep
}

# Consecutive runs of the mixed soak (ours and forwarded calls on two streams) at every world
# size: REPEATS runs of CALLS calls each.
run_soak_repeats() {
  local C=$B/test/core/test_core_gpu n i
  for n in 2 3 4 5 6 7 8; do
    for i in $(seq 1 "${REPEATS:-10}"); do
      run soak_${n}_run$i 120 env SYMMCOLL_NCCL_LIB="$BOOT" $C soak $n "${CALLS:-3000}"
    done
  done
}

# The streams_2 hang (test/core/README.md): REPEATS runs each of `streams` and
# `streams-eager` under the watchdog, whose report (device epochs, tickets, signal words) and
# stacks land in the logs of the runs that hang.
run_stream_hangs() {
  local C=$B/test/core/test_core_gpu m i
  for m in streams streams-eager; do
    for i in $(seq 1 "${REPEATS:-20}"); do
      run ${m}_run$i 40 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_ALLREDUCE_ALGO=oneshot \
        SYMMCOLL_TEST_WATCHDOG_S=10 CUDA_MODULE_LOADING=EAGER $C $m 2 20000
    done
  done
}

# The hang of collectives_boot_3 at its first copy-engine all-gather (src/algos/README.md,
# "Copy-engine all-gather"): REPEATS runs of the quick sweep under the watchdog, whose report
# (each rank's stage, algorithm, size) and stacks land in the logs of the runs that hang.
run_collectives_hangs() {
  local TC=$B/test/algos/test_collectives i
  for i in $(seq 1 "${REPEATS:-40}"); do
    run coll_${RANKS:-3}_run$i 60 env SYMMCOLL_NCCL_LIB="$BOOT" SYMMCOLL_TEST_WATCHDOG_S=40 \
      CUDA_VISIBLE_DEVICES="${GPUS:-0,1}" $TC "${RANKS:-3}" --quick
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # shellcheck source=test/device/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
  case "${PART:-suite}" in
    repeats) run_soak_repeats ;;
    hangs) run_stream_hangs ;;
    collectives-hangs) run_collectives_hangs ;;
    *) run_gpu_suite ;;
  esac
  print_rows
fi
