#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Turns a perf/compare.sh results directory into Markdown (for perf/RESULTS.md): the setup from
# env.txt, then one table per collective with both libraries' times, speedup and bus bandwidth.
"""usage: results_md.py <results-dir> [image path to reference] > RESULTS.md"""
import csv
import os
import sys

COLLS = [("all_reduce", "All-reduce"), ("all_gather", "All-gather (bytes = total output)"),
         ("reduce_scatter", "Reduce-scatter (bytes = total input)")]


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    image = sys.argv[2] if len(sys.argv) > 2 else "summary.png"
    print("# libsymmcoll against NCCL\n")
    env = os.path.join(d, "env.txt")
    if os.path.exists(env):
        print("```")
        print(open(env).read().rstrip())
        print("```\n")
    print("Times in microseconds (out-of-place, as nccl-tests reports them), bus bandwidth in GB/s, "
          "speedup = NCCL time / libsymmcoll time. #wrong: data-check mismatches of both runs.\n")
    for name, title in COLLS:
        path = os.path.join(d, name + ".csv")
        if not os.path.exists(path):
            continue
        rows = {}
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows.setdefault((r["type"], r["redop"], int(r["bytes"])), {})[r["library"]] = r
        print(f"## {title}\n")
        print("| bytes | type | NCCL time | libsymmcoll time | speedup | NCCL busbw | libsymmcoll busbw | #wrong |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for (dtype, _op, size), libs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
            n, o = libs.get("nccl"), libs.get("libsymmcoll")
            tn = float(n["oop_time_us"]) if n else None
            to = float(o["oop_time_us"]) if o else None
            wrong = sum(max(0, int(r[k])) for r in libs.values() for k in ("oop_wrong", "ip_wrong"))
            sp = f"{tn / to:.2f}x" if tn and to else "-"
            print(f"| {human(size)} | {dtype} | {tn if tn is not None else '-'} | {to if to is not None else '-'} | "
                  f"{sp} | {n['oop_busbw'] if n else '-'} | {o['oop_busbw'] if o else '-'} | {wrong} |")
        print()
    print(f"![time, bus bandwidth and speedup against size]({image})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
