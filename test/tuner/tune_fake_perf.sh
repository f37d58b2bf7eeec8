#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Stand-in for the perf binaries in test_tune_cli.sh: checks the environment symmcoll-tune gives
# it, then writes CSV rows (perf/report.c's format) with synthetic times for the sweep.
# FAKE_WRONG=algo:bytes reports wrong elements for that algorithm at that size.
set -u
coll=allreduce
case $(basename "$0") in
  all_gather_perf) coll=allgather ;; reduce_scatter_perf) coll=reducescatter ;;
esac
b=8 e=8 f=2 csv= label= type=float reg=0
args="$*"
while [ $# -gt 0 ]; do
  case $1 in
    -b) b=$2; shift ;; -e) e=$2; shift ;; -f) f=$2; shift ;; -d) type=$2; shift ;;
    --csv) csv=$2; shift ;; --label) label=$2; shift ;; -R) reg=$2; shift ;;
  esac
  shift
done
echo "run $label $coll $args"
upper=$(echo "$coll" | tr a-z A-Z)
if [ "$label" = nccl ]; then
  [ "${SYMMCOLL_DISABLE:-}" = 1 ] || exit 9
else
  [ -z "${SYMMCOLL_DISABLE:-}" ] && [ -s "${SYMMCOLL_TUNING_FILE:-}" ] || exit 9
  [ "$(printenv "SYMMCOLL_${upper}_ALGO")" = "$label" ] || exit 9
  # NCCL given the windows' aliases is measured with windows only.
  [ "$label" != ncclplain ] || [ "$reg" = 2 ] || exit 9
fi
bytes() { # 8, 256K, 1G -> bytes
  local v=$1
  case $v in *K) echo $(( ${v%K} << 10 )) ;; *M) echo $(( ${v%M} << 20 )) ;;
    *G) echo $(( ${v%G} << 30 )) ;; *) echo "$v" ;; esac
}
lo=$(bytes "$b") hi=$(bytes "$e")
for ((s = lo; s <= hi; s *= f)); do
  case $label in
    nccl) t=10 ;; lamport) t=5 ;; twoshot) t=8 ;; push | pull) t=9 ;; ncclplain) t=7.2 ;;
    oneshot) if [ "$s" -le $((4 << 20)) ]; then t=7; else t=20; fi ;;
  esac
  wrong=0
  [ "${FAKE_WRONG:-}" = "$label:$s" ] && wrong=3
  echo "$coll,$label,$s,$s,$type,sum,-1,$t,1,1,$wrong,$t,1,1,0" >>"$csv"
done
