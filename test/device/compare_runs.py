#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Table of the perf logs <out>/<config>_<run>.log that a test/device script wrote: per size, the
fastest out-of-place time of each config over its runs, the ratio to the reference config when
given, and the largest #wrong seen.

usage: compare_runs.py <out-dir> [--ref CONFIG] [--title TEXT] CONFIG..."""
import argparse
import collections
import os
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--ref")
    ap.add_argument("--title", default="graph oop time (min of runs)")
    args = ap.parse_args()
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    wrong = collections.defaultdict(int)
    for name in sorted(os.listdir(args.out)):
        m = re.fullmatch(r"(.+)_(\d+)\.log", name)
        if not m or m.group(1) not in args.configs:
            continue
        for line in open(os.path.join(args.out, name)):
            x = line.split()
            if len(x) > 9 and x[2] in ("bfloat16", "half", "float", "int32"):
                times[m.group(1)][int(x[0])].append(float(x[5]))
                wrong[int(x[0])] = max(wrong[int(x[0])], int(x[8]))
    cfgs = [c for c in args.configs if c in times]
    if not cfgs:
        print("no logs for", " ".join(args.configs))
        return
    ref = args.ref if args.ref in times else None
    print(args.title + ("; ratio to " + ref if ref else "") + "\nbytes      " +
          " ".join(f"{c:>14}" for c in cfgs))
    for size in sorted(times[cfgs[0]]):
        cells = []
        for c in cfgs:
            if size not in times[c]:
                cells.append(f"{'-':>14}")
                continue
            t = min(times[c][size])
            r = f" {t / min(times[ref][size]):5.3f}" if ref and size in times[ref] else ""
            cells.append(f"{t:8.2f}{r}")
        print(f"{size:<10} " + " ".join(cells) + f"  wrong={wrong[size]}")


if __name__ == "__main__":
    main()
