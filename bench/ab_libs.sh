#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Before/after of a change to libsymmcoll itself: the same perf binaries run with two builds of the
# library, alternating A, B, A, B, ... (LD_LIBRARY_PATH picks the library: it is searched before
# the binaries' RUNPATH), and per collective and size the median out-of-place time of each and
# their ratio. NCCL is not run: each side's median comes from the same binary and flags.
#   bench/ab_libs.sh PERF_BIN_DIR LIB_DIR_A LIB_DIR_B OUT_DIR [perf flags...]
#   LIB_DIR_*: directories holding libsymmcoll.so.0 (BUILD/src of two builds)
#   env: COLLS (all_reduce all_gather reduce_scatter), REPS (runs per library, 4), NGPUS (all
#   visible); perf flags default to -b 8 -e 1M -f 2 -n 20 -w 5 -c 1 -d bfloat16 -G 20
# Prints "bytes A_us B_us B/A" rows (B/A below 1: B is faster); exit 1 when a run failed or
# found wrong data.
set -euo pipefail
bin=${1:?directory of the *_perf binaries} libA=${2:?library directory A} libB=${3:?library directory B}
out=${4:?results directory}
shift 4
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh" # multicast off, perf_count_gpus
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
requested_gpus=${NGPUS:-}
perf_count_gpus
ngpus=${requested_gpus:-$NGPUS}
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-b 8 -e 1M -f 2 -n 20 -w 5 -c 1 -d bfloat16 -G 20)
for d in "$libA" "$libB"; do
  [ -e "$d/libsymmcoll.so.0" ] || perf_die "no libsymmcoll.so.0 in $d"
done
# Two copies of one library would make a comparison of noise with itself.
cmp -s "$libA/libsymmcoll.so.0" "$libB/libsymmcoll.so.0" && echo "ab_libs: A and B are the same file"
mkdir -p "$out"
status=0
for coll in ${COLLS:-all_reduce all_gather reduce_scatter}; do
  for ((i = 1; i <= ${REPS:-4}; i++)); do
    for side in A B; do
      lib=$libA
      [ "$side" = B ] && lib=$libB
      if ! LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin/${coll}_perf" \
           "${flags[@]}" -P "$ngpus" --csv "$out/$coll.$side.$i.csv" --label "$side" \
           >"$out/$coll.$side.$i.log" 2>&1; then
        echo "ab_libs: $coll run $i of $side failed or found wrong data ($out/$coll.$side.$i.log)"
        status=1
      fi
    done
  done
  echo "== $coll: bytes, A us, B us, B/A (medians of ${REPS:-4} runs each, out of place)"
  python3 - "$out" "$coll" <<'PY'
import csv, glob, statistics, sys
out, coll = sys.argv[1], sys.argv[2]
times = {}
for path in glob.glob(f"{out}/{coll}.[AB].*.csv"):
    for row in csv.DictReader(open(path)):
        times.setdefault(int(row["bytes"]), {}).setdefault(row["library"], []).append(
            float(row["oop_time_us"]))
for size in sorted(times):
    a, b = times[size].get("A"), times[size].get("B")
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{size:>11} {ma:9.2f} {mb:9.2f} {mb / ma:7.3f}")
PY
done
exit $status
