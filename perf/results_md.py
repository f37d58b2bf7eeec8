#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Turns a perf/compare.sh results directory into Markdown (for perf/RESULTS.md): the setup from
# env.txt, then per collective the table and summary line of compare_table.py (NCCL, NCCL -R 2,
# ours, ours -R 2, ours against NCCL's best).
"""usage: results_md.py <results-dir> [image path to reference] > RESULTS.md"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_table as ct  # noqa: E402

TITLES = {"all_reduce": "All-reduce", "all_gather": "All-gather (bytes = total output)",
          "reduce_scatter": "Reduce-scatter (bytes = total input)"}


def cell(x, suffix=""):
    return f"{x:.2f}{suffix}" if x is not None else "-"


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
    print("Out-of-place times in microseconds, as nccl-tests reports them. NCCL -R 2 and ours -R 2: "
          "buffers registered as symmetric windows. Best: the faster of NCCL and NCCL -R 2 at that "
          "size; speedup = best / our time. #wrong: data-check mismatches of every run.\n")
    for coll in ct.COLLS:
        cases = ct.load(d, coll)
        for (dtype, _op), sizes in sorted(cases.items()):
            rows = ct.table_rows(sizes)
            print(f"## {TITLES[coll]}, {dtype}\n")
            print("| bytes | NCCL | NCCL -R 2 | ours | ours -R 2 | ours / best | ours -R 2 / best | #wrong |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                t, s = r["time"], r["speedup"]
                print(f"| {ct.human(r['bytes'])} | {cell(t['NCCL'])} | {cell(t['NCCL -R 2'])} | {cell(t['ours'])} | "
                      f"{cell(t['ours -R 2'])} | {cell(s['ours'], 'x')} | {cell(s['ours -R 2'], 'x')} | {ct.wrong_text(r['wrong'])} |")
            print()
            print(ct.summary_line(coll, rows).lstrip("# ") + "\n")
    print(f"![time, bus bandwidth and speedup against size]({image})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
