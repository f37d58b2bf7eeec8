#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Plots perf CSVs (written by the perf binaries' compare mode): time, bus bandwidth and speedup
# against message size, one column per collective, one line per library.
"""usage: plot.py --out results.png file.csv [more.csv ...]"""
import argparse
import csv
import sys
from collections import defaultdict


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                try:
                    r["bytes"] = int(r["bytes"])
                    for k in ("oop_time_us", "oop_busbw", "ip_time_us", "ip_busbw"):
                        r[k] = float(r[k])
                except (KeyError, ValueError):
                    continue
                rows.append(r)
    return rows


def human(n):
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:g}{unit}"
        n /= 1024
    return str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--inplace", action="store_true", help="plot in-place times instead of out-of-place")
    ap.add_argument("csv", nargs="+")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("plot.py: matplotlib is not installed (pip install matplotlib, or apt-get install "
              "python3-matplotlib); the CSV files are complete without the plot", file=sys.stderr)
        return 3

    rows = read_rows(args.csv)
    if not rows:
        print("plot.py: no rows in " + ", ".join(args.csv), file=sys.stderr)
        return 2
    time_key = "ip_time_us" if args.inplace else "oop_time_us"
    bw_key = "ip_busbw" if args.inplace else "oop_busbw"

    # series[(collective, type, op)][library] = sorted [(bytes, time, busbw)]
    series = defaultdict(lambda: defaultdict(list))
    for r in rows:
        series[(r["collective"], r["type"], r["redop"])][r["library"]].append(
            (r["bytes"], r[time_key], r[bw_key]))
    keys = sorted(series)
    fig, axes = plt.subplots(3, len(keys), figsize=(5.5 * len(keys), 11), squeeze=False)
    fmt = FuncFormatter(lambda x, _pos: human(x))
    for col, key in enumerate(keys):
        libs = series[key]
        ax_t, ax_b, ax_s = axes[0][col], axes[1][col], axes[2][col]
        for lib in sorted(libs):
            pts = sorted(libs[lib])
            xs = [p[0] for p in pts]
            ax_t.plot(xs, [p[1] for p in pts], marker="o", ms=3, label=lib)
            ax_b.plot(xs, [p[2] for p in pts], marker="o", ms=3, label=lib)
        base = dict((p[0], p[1]) for p in libs.get("nccl", []))
        for lib in sorted(libs):
            if lib == "nccl" or not base:
                continue
            pts = [(b, base[b] / t) for b, t, _ in sorted(libs[lib]) if b in base and t > 0]
            if pts:
                ax_s.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"{lib} vs nccl")
        ax_s.axhline(1.0, color="gray", lw=0.8, ls="--")
        coll, dtype, op = key
        ax_t.set_title(f"{coll} ({dtype}{'' if op == 'none' else ', ' + op})")
        ax_t.set_ylabel("time (us, " + ("in-place" if args.inplace else "out-of-place") + ")")
        ax_b.set_ylabel("bus bandwidth (GB/s)")
        ax_s.set_ylabel("speedup (NCCL time / time)")
        for ax in (ax_t, ax_b, ax_s):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(fmt)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        ax_t.set_yscale("log")
        ax_s.set_xlabel("message size (bytes)")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
