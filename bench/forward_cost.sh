#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a call we forward costs in a CUDA graph, against the same call made to NCCL directly: the
# perf binaries' compare mode with every all-gather, all-reduce and reduce-scatter forced to NCCL
# (SYMMCOLL_*_ALGO=nccl), so both sides run NCCL's kernels and only our wrapping differs. Three
# variants: plain buffers, symmetric windows (-R 2), and windows with graph mixing off
# (NCCL_GRAPH_MIXING_SUPPORT=0: no ordering nodes of ours in the capture).
#   bench/forward_cost.sh PERF_BIN_DIR OUT_DIR      (env: NGPUS, all visible by default)
# Prints, per variant and size, NCCL's and our out-of-place time and the difference (us).
set -euo pipefail
bin=${1:?directory of the *_perf binaries} out=${2:?results directory}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=perf/build_env.sh
. "$repo/perf/build_env.sh" # multicast off, perf_count_gpus
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
requested_gpus=${NGPUS:-}
perf_count_gpus # visible GPUs (CUDA_VISIBLE_DEVICES too)
ngpus=${requested_gpus:-$NGPUS}
mkdir -p "$out"
run() { # variant, collective, extra perf flags...
  local variant=$1 coll=$2
  shift 2
  SYMMCOLL_ALLGATHER_ALGO=nccl SYMMCOLL_ALLREDUCE_ALGO=nccl SYMMCOLL_REDUCESCATTER_ALGO=nccl \
    "$bin/${coll}_perf" -b 8 -e 32M -f 4 \
    -n 20 -w 5 -c 1 -d bfloat16 -P "$ngpus" -G 10 --compare_reps 3 -X "$out/$variant.$coll" "$@" \
    >"$out/$variant.$coll.log" 2>&1 || echo "$variant $coll: failed, see $out/$variant.$coll.log"
  echo "== $variant $coll: bytes, NCCL us, ours (forwarded) us, difference"
  python3 - "$out/$variant.$coll.csv" <<'EOF'
import collections, csv, sys
times = collections.defaultdict(dict)
for row in csv.DictReader(open(sys.argv[1])):
    times[int(row["bytes"])][row["library"]] = float(row["oop_time_us"])
for size in sorted(times):
    nccl, ours = times[size].get("nccl"), times[size].get("libsymmcoll")
    if nccl is not None and ours is not None:
        print(f"{size:>11} {nccl:9.2f} {ours:9.2f} {ours - nccl:+7.2f}")
EOF
}
for coll in all_gather all_reduce reduce_scatter; do
  run plain "$coll"
  run windows "$coll" -R 2
  NCCL_GRAPH_MIXING_SUPPORT=0 run windows_nomixing "$coll" -R 2
done
