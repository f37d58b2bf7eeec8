#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# perf/build_env.sh, perf/compare.sh, bench/forward_cost.sh and bench/ab_libs.sh without a GPU: meson, ninja and
# nvidia-smi are stubs, and the "perf binaries" the stub ninja installs are a script that writes
# the CSV rows the real compare mode (-X) writes. Checks where BUILD_DIR and the results directory
# end up (absolute, relative to the caller's directory, default), that compare.sh runs through, and
# what forward_cost.sh and ab_libs.sh run and print.
# Usage: test_perf_scripts.sh SOURCE_ROOT
# check() evaluates its condition later, hence the single quotes; subshells set BUILD_DIR on purpose.
# shellcheck disable=SC2016,SC2030,SC2031
set -u
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# The scripts run from a copy of their part of the tree: nothing here writes into the sources.
src=$tmp/repo
mkdir -p "$src/build-aux"
cp -r "$1/perf" "$src/perf"
cp "$1/build-aux/prereqs.sh" "$1/build-aux/find_nccl.py" "$src/build-aux/"
export TMPDIR=$tmp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
checks=0 failed=0
check() { # name, condition (a command), message on failure
  local name=$1 msg=$3
  checks=$((checks + 1))
  if ! eval "$2"; then
    failed=$((failed + 1))
    echo "FAILED: $name: $msg" >&2
  fi
}

# ---- stubs ------------------------------------------------------------------------------------
stub=$tmp/stub
mkdir -p "$stub" "$tmp/nccl/include" "$tmp/nccl/lib" "$tmp/cwd"
: >"$tmp/nccl/include/nccl.h"
: >"$tmp/nccl/lib/libnccl.so.2"
cat >"$stub/meson" <<'EOF'
#!/usr/bin/env bash
# meson stub: setup records its arguments and makes the build directory.
[ "${1:-}" = --version ] && { echo 1.4.0; exit 0; }
[ "${1:-}" = setup ] || exit 0
shift
[ "$1" = --reconfigure ] && shift
mkdir -p "$1" && : >"$1/build.ninja" && echo "setup $*" >>"$1/stub.log"
EOF
cat >"$stub/ninja" <<'EOF'
#!/usr/bin/env bash
# ninja stub: "builds" the perf binaries of -C DIR (copies of the fake perf binary).
[ "${1:-}" = -C ] || exit 0
mkdir -p "$2/perf"
for c in all_reduce all_gather reduce_scatter; do cp "$FAKE_PERF" "$2/perf/${c}_perf"; done
echo "ninja $2" >>"$2/stub.log"
EOF
cat >"$stub/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
  -L) for ((i = 0; i < ${FAKE_NGPUS:-2}; i++)); do echo "GPU $i: Fake GPU (UUID: GPU-$i)"; done ;;
  *compute_cap*) echo "9.0" ;;
  *) for ((i = 0; i < ${FAKE_NGPUS:-2}; i++)); do echo "$i, Fake GPU, 1.0"; done ;;
esac
EOF
# The fake perf binary, compare mode only: <prefix>.csv with both libraries' rows.
cat >"$tmp/fake_perf" <<'EOF'
#!/usr/bin/env bash
# Times: NCCL 10 us + bytes/100 MB/s-ish, ours faster below 1 MiB, slower above; with -R 2
# NCCL takes 0.9 of that, ours 0.8.
coll=$(basename "$0" _perf)
echo "fake $coll $*" >>"$FAKE_LOG"
echo "env $coll mixing=${NCCL_GRAPH_MIXING_SUPPORT:-} forced=${SYMMCOLL_ALLGATHER_ALGO:-}/${SYMMCOLL_ALLREDUCE_ALGO:-}/${SYMMCOLL_REDUCESCATTER_ALGO:-}" >>"$FAKE_LOG.env"
prefix="" min=8 max=1024 dtype=float reg=0 csv="" label=""
while [ $# -gt 0 ]; do
  case $1 in
    -X) prefix=$2; shift ;;
    --csv) csv=$2; shift ;;
    --label) label=$2; shift ;;
    -R) reg=$2; shift ;;
    -b) min=$2; shift ;;
    -e) max=$2; shift ;;
    -d) dtype=$2; shift ;;
  esac
  shift
done
num() { local v=$1; case $v in *K) v=$((${v%K} << 10)) ;; *M) v=$((${v%M} << 20)) ;; *G) v=$((${v%G} << 30)) ;; esac; echo "$v"; }
min=$(num "$min") max=$(num "$max")
name=$(case $coll in all_reduce) echo AllReduce ;; all_gather) echo AllGather ;; *) echo ReduceScatter ;; esac)
if [ -z "$prefix" ] && [ -n "$csv" ]; then
  # One library's run (--csv, --label): the library found first on LD_LIBRARY_PATH decides, a
  # directory named libB taking 0.8 of the time.
  echo "lib $coll $label ${LD_LIBRARY_PATH%%:*}" >>"$FAKE_LOG.env"
  f=1; case ${LD_LIBRARY_PATH%%:*} in */libB) f=0.8 ;; esac
  {
    echo "collective,library,bytes,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong"
    for ((b = min; b <= max; b *= 2)); do
      t=$(awk -v b="$b" -v f="$f" 'BEGIN { printf "%.3f", (10 + b / 1e5) * f }')
      echo "$name,$label,$b,$b,$dtype,sum,-1,$t,1,1,0,$t,1,1,0"
    done
  } >"$csv"
  exit 0
fi
[ -n "$prefix" ] || { echo "fake perf: compare mode or --csv only" >&2; exit 2; }
{
  echo "collective,library,bytes,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong"
  for ((b = min; b <= max; b *= 2)); do
    t=$(awk -v b="$b" -v r="$reg" 'BEGIN { printf "%.3f", (10 + b / 1e5) * (r == 2 ? 0.9 : 1) }')
    o=$(awk -v b="$b" -v r="$reg" 'BEGIN { printf "%.3f", ((b < 1048576 ? 5 : 12) + b / 1e5) * (r == 2 ? 0.8 : 1) }')
    echo "$name,nccl,$b,$b,$dtype,sum,-1,$t,1,1,0,$t,1,1,0"
    echo "$name,libsymmcoll,$b,$b,$dtype,sum,-1,$o,1,1,0,$o,1,1,0"
  done
} >"$prefix.csv"
echo "# $name: libsymmcoll vs nccl (time in us; speedup = nccl time / libsymmcoll time; busbw in GB/s)"
echo "  fake table"
[ "$coll" = "${FAKE_FAIL:-}" ] && exit 3
exit 0
EOF
chmod +x "$stub"/* "$tmp/fake_perf"
export PATH="$stub:$PATH" FAKE_PERF=$tmp/fake_perf FAKE_LOG=$tmp/fake.log NCCL_HOME=$tmp/nccl
unset BUILD_DIR GRAPH MAX_BYTES MIN_BYTES ITERS NGPUS EXTRA_ARGS PERF_BIN

# ---- BUILD_DIR and paths, as build_env.sh's functions see them --------------------------------
paths=$(cd "$tmp/cwd" && . "$src/perf/build_env.sh" &&
        echo "$(perf_build_dir /repo)|$(BUILD_DIR=/abs/b perf_build_dir /repo)|$(BUILD_DIR=rel/b perf_build_dir /repo)|$(perf_abs_path out)")
check build_dir_paths '[ "$paths" = "/repo/build|/abs/b|$tmp/cwd/rel/b|$tmp/cwd/out" ]' "got $paths"

# ---- perf_build with an absolute and a relative BUILD_DIR -------------------------------------
got=$(cd "$tmp/cwd" && export BUILD_DIR=$tmp/abs && . "$src/perf/build_env.sh" && perf_build "$src" >/dev/null && echo "$PERF_BIN")
check perf_build_absolute '[ "$got" = "$tmp/abs/perf" ] && grep -q "^setup $tmp/abs " "$tmp/abs/stub.log"' \
  "PERF_BIN=$got; $(cat "$tmp/abs/stub.log" 2>/dev/null)"
got=$(cd "$tmp/cwd" && export BUILD_DIR=rel && . "$src/perf/build_env.sh" && perf_build "$src" >/dev/null && echo "$PERF_BIN")
check perf_build_relative '[ "$got" = "$tmp/cwd/rel/perf" ] && [ -x "$tmp/cwd/rel/perf/all_reduce_perf" ]' "PERF_BIN=$got"

# ---- compare.sh end to end, BUILD_DIR absolute, results relative to the caller ---------------
(cd "$tmp/cwd" && BUILD_DIR=$tmp/pb "$src/perf/compare.sh" res >"$tmp/compare.out" 2>&1)
rc=$?
check compare_runs '[ $rc -eq 0 ]' "exit $rc: $(tail -5 "$tmp/compare.out")"
check compare_results_dir '[ -f "$tmp/cwd/res/all_reduce.csv" ] && [ -f "$tmp/cwd/res/env.txt" ]' \
  "no results in $tmp/cwd/res: $(ls "$tmp/cwd/res" 2>&1)"
runs=$(grep -c "^fake " "$FAKE_LOG" 2>/dev/null)
check compare_runs_count '[ "${runs:-0}" = 6 ]' "the fake binaries ran ${runs:-0} times, not 3 collectives x (plain, -R 2)"

# ---- compare.sh: what it runs and the table it prints -----------------------------------------
out=$tmp/compare.out
check compare_r2_runs '[ "$(grep -c -- " -R 2 -X .*\.R2$" "$FAKE_LOG")" = 3 ]' "$(cat "$FAKE_LOG")"
# Eager by default: four runs per library.
check compare_defaults 'grep -q -- "-b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -d bfloat16 -P 2 --compare_reps 4 -X" "$FAKE_LOG"' "$(head -1 "$FAKE_LOG")"
for coll in all_reduce all_gather reduce_scatter; do
  check "table_$coll" 'grep -q "^# $coll (bfloat16 sum): out-of-place time" "$out"' "$(cat "$out")"
  check "summary_$coll" 'grep -q "^# $coll: ours vs NCCL.s best: worst .* | ours -R 2 vs NCCL.s best: " "$out"' "$(cat "$out")"
  check "merged_$coll" '[ -f "$tmp/cwd/res/$coll.all.csv" ] && [ -f "$tmp/cwd/res/$coll.R2.csv" ]' "$(ls "$tmp/cwd/res")"
done
# 8 B: NCCL 10.00, NCCL -R 2 9.00 (best), ours 5.00, ours -R 2 4.00: 1.80x and 2.25x.
check table_row 'grep -q "^        8 B      10.00       9.00       5.00       4.00      1.80x           2.25x       0$" "$out"' \
  "$(grep "8 B" "$out")"
check results_md 'grep -q "^## All-reduce, bfloat16" "$tmp/cwd/res/RESULTS.md"' "$(head -20 "$tmp/cwd/res/RESULTS.md")"

# Graph mode, plain buffers only, a failing collective: -G 20 passed, no -R 2 runs, exit 1.
: >"$FAKE_LOG"
(cd "$tmp/cwd" && BUILD_DIR=$tmp/pb GRAPH=20 WINDOWS=0 MAX_BYTES=64K FAKE_FAIL=all_gather \
   "$src/perf/compare.sh" res2 >"$tmp/compare2.out" 2>&1)
rc=$?
check graph_exit '[ $rc -eq 1 ] && grep -q "all_gather failed or found wrong data" "$tmp/compare2.out"' "exit $rc"
check graph_args '[ "$(grep -c -- "-e 64K .*-G 20 --compare_reps 3 -X" "$FAKE_LOG")" = 3 ] && ! grep -q -- "-R 2" "$FAKE_LOG"' "$(cat "$FAKE_LOG")"
check graph_summary 'grep -q "^# all_reduce: ours vs NCCL.s best: .*below 1.0x: none$" "$tmp/compare2.out"' \
  "$(grep "^# all_reduce:" "$tmp/compare2.out")"

# Prebuilt binaries (PERF_BIN): those run, and nothing is configured or built.
mkdir -p "$tmp/prebuilt"
for c in all_reduce all_gather reduce_scatter; do cp "$FAKE_PERF" "$tmp/prebuilt/${c}_perf"; done
: >"$FAKE_LOG"
(cd "$tmp/cwd" && BUILD_DIR=$tmp/nobuild PERF_BIN=$tmp/prebuilt WINDOWS=0 MAX_BYTES=64K REPS=3 \
   "$src/perf/compare.sh" res3 >"$tmp/compare3.out" 2>&1)
rc=$?
check prebuilt_runs '[ $rc -eq 0 ] && [ -f "$tmp/cwd/res3/all_reduce.csv" ]' "exit $rc: $(tail -5 "$tmp/compare3.out")"
check reps_knob '[ "$(grep -c -- "--compare_reps 3 -X" "$FAKE_LOG")" = 3 ]' "$(cat "$FAKE_LOG")"
check prebuilt_no_build '[ ! -e "$tmp/nobuild" ]' "built into $tmp/nobuild: $(ls "$tmp/nobuild" 2>&1)"
check prebuilt_count '[ "$(grep -c "^fake " "$FAKE_LOG")" = 3 ]' "$(cat "$FAKE_LOG")"

# ---- bench/forward_cost.sh: every call forced to NCCL, three variants per collective ----------
mkdir -p "$src/bench"
cp "$1/bench/forward_cost.sh" "$src/bench/"
: >"$FAKE_LOG"
: >"$FAKE_LOG.env"
"$src/bench/forward_cost.sh" "$tmp/prebuilt" "$tmp/fwd" >"$tmp/fwd.out" 2>&1
rc=$?
check fwd_runs '[ $rc -eq 0 ] && [ "$(grep -c "^fake " "$FAKE_LOG")" = 9 ] && [ "$(grep -c -- "-G 10 --compare_reps 3 -X .* -R 2$" "$FAKE_LOG")" = 6 ]' \
  "exit $rc: $(cat "$FAKE_LOG")"
check fwd_env '[ "$(grep -c "forced=nccl/nccl/nccl$" "$FAKE_LOG.env")" = 9 ] && [ "$(grep -c "mixing=0 " "$FAKE_LOG.env")" = 3 ]' \
  "$(cat "$FAKE_LOG.env")"
# 8 B: NCCL 10.00 us, ours 5.00: a difference of -5.00.
check fwd_table 'grep -q "^== windows_nomixing reduce_scatter: bytes" "$tmp/fwd.out" && grep -qE "^ +8 +10\.00 +5\.00 +-5\.00$" "$tmp/fwd.out"' \
  "$(cat "$tmp/fwd.out")"

# ---- bench/ab_libs.sh: two builds of the library, alternating, medians and their ratio --------
cp "$1/bench/ab_libs.sh" "$src/bench/"
mkdir -p "$tmp/libA" "$tmp/libB"
echo a >"$tmp/libA/libsymmcoll.so.0"
echo b >"$tmp/libB/libsymmcoll.so.0"
: >"$FAKE_LOG"
: >"$FAKE_LOG.env"
COLLS=all_reduce REPS=2 "$src/bench/ab_libs.sh" "$tmp/prebuilt" "$tmp/libA" "$tmp/libB" "$tmp/ab" \
  -b 8 -e 64 -G 20 >"$tmp/ab.out" 2>&1
rc=$?
order=$(grep "^lib all_reduce" "$FAKE_LOG.env" | awk '{print $3 ":" $4}' | tr '\n' ' ')
check ab_order '[ $rc -eq 0 ] && [ "$order" = "A:$tmp/libA B:$tmp/libB A:$tmp/libA B:$tmp/libB " ]' \
  "exit $rc, runs: $order"
check ab_flags '[ "$(grep -c -- "-b 8 -e 64 -G 20 -P 2 --csv $tmp/ab/all_reduce\.[AB]\.[12]\.csv --label [AB]$" "$FAKE_LOG")" = 4 ]' \
  "$(cat "$FAKE_LOG")"
# 8 B: A 10.00 us, B 8.00 (0.8 of it).
check ab_table 'grep -q "^== all_reduce: bytes, A us, B us, B/A" "$tmp/ab.out" && grep -qE "^ +8 +10\.00 +8\.00 +0\.800$" "$tmp/ab.out"' \
  "$(cat "$tmp/ab.out")"

echo "test_perf_scripts: $checks checks, $failed failed"
[ "$failed" = 0 ]
