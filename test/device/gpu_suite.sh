# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU suite by hand (every transport and all-reduce mode, 3-8 ranks through the test
# bootstrap, the 10^6-call soak, disassembly), as the final rounds run it. Sourced after
# common.sh; needs $B (build dir with allreduce.ptx.gz) and $out.
run_gpu_suite() {
  local TP=$B/test/transport/test_peer_mem T=$B/test/algos/test_allreduce
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
}
