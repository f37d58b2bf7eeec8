#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Summary of perf/run_device_sweeps.sh: out-of-place time per size for NCCL alone and
# libsymmcoll, NCCL alone against reference times of NCCL on the H200 pair, wrong totals.
"""usage: sweep_summary.py <dir with <coll>_<mode>_<graph>_<lib>.csv files>"""
import csv
import glob
import os
import sys

K, M, G = 1 << 10, 1 << 20, 1 << 30
# Reference times of NCCL 2.28.9 alone on 2x H200 (NV18), "base" in the printed table:
# (mode, graph, collective) -> {bytes: time in us}
REFERENCE = {
    ("g2", "eager", "all_reduce"): {K: 12.65, 16 * K: 12.67, 256 * K: 14.14, M: 15.01, 4 * M: 35.39, 16 * M: 78.24,
                                    64 * M: 249.05, 256 * M: 890.44, G: 3233.1},
    ("g2", "G20", "all_reduce"): {K: 5.99, 16 * K: 7.05, 64 * K: 7.21, 256 * K: 8.46, M: 14.11, 4 * M: 33.62,
                                  16 * M: 69.90},
    ("g2", "eager", "all_gather"): {K: 19.39, M: 22.05, 16 * M: 54.44, 256 * M: 546.25, G: 1993.3},
    ("g2", "eager", "reduce_scatter"): {K: 12.87, M: 14.68, 16 * M: 52.77, 256 * M: 560.92, G: 1962.0},
    ("N2", "eager", "all_reduce"): {K: 10.25, 16 * K: 9.81, 64 * K: 10.99, 256 * K: 10.89, M: 16.09, 4 * M: 34.71,
                                    16 * M: 78.49, 64 * M: 247.82, 256 * M: 889.25, G: 3265.1},
    ("N2", "G20", "all_reduce"): {K: 5.80, 16 * K: 6.88, 64 * K: 7.11, 256 * K: 8.42, M: 15.54, 4 * M: 34.33,
                                  16 * M: 73.73, 64 * M: 233.70},
    ("N2", "eager", "all_gather"): {K: 10.04, 16 * K: 10.24, 64 * K: 10.58, 256 * K: 11.34, M: 12.02, 4 * M: 27.81,
                                    16 * M: 55.18, 64 * M: 157.15, 256 * M: 549.30, G: 1982.9},
    ("N2", "G20", "all_gather"): {K: 5.00, 16 * K: 6.04, 64 * K: 6.28, 256 * K: 6.91, M: 11.40, 4 * M: 26.16,
                                  16 * M: 45.10, 64 * M: 123.71},
    ("N2", "eager", "reduce_scatter"): {K: 6.89, 16 * K: 7.77, 64 * K: 8.62, 256 * K: 9.26, M: 11.21, 4 * M: 24.52,
                                        16 * M: 52.59, 64 * M: 166.64, 256 * M: 589.44, G: 2050.6},
    ("N2", "G20", "reduce_scatter"): {K: 5.07, 16 * K: 5.80, 64 * K: 6.07, 256 * K: 6.76, M: 11.42, 4 * M: 23.81,
                                      16 * M: 51.60, 64 * M: 164.49},
}
SHOWN = [8, K, 16 * K, 64 * K, 256 * K, M, 4 * M, 16 * M, 64 * M, 256 * M, G]
COLLS = ["all_reduce", "all_gather", "reduce_scatter"]
SHORT = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS"}


def human(n):
    for unit, size in (("G", G), ("M", M), ("K", K)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def load(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                rows[int(r["bytes"])] = r
            except (KeyError, ValueError):
                pass
    return rows


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "*_*_*_*.csv"))):
        base = os.path.basename(path)[:-4]
        parts = base.rsplit("_", 3)
        if len(parts) != 4:
            continue
        coll, mode, graph, lib = parts
        runs[(coll, mode, graph, lib)] = load(path)

    within = total = 0
    for mode, dtype in (("g2", "float"), ("N2", "bfloat16")):
        for graph in ("eager", "G20"):
            print(f"\n== {mode} ({'1 process, -g 2' if mode == 'g2' else '2 processes, -P 2'}), {graph}, {dtype}: "
                  "out-of-place time (us); base = reference NCCL time, d% = NCCL alone vs base")
            hdr = f"{'bytes':>6}"
            for c in COLLS:
                s = SHORT[c]
                hdr += f" | {s + ' nccl':>9} {s + ' ours':>9} {'x':>5} {'base':>8} {'d%':>6}"
            print(hdr)
            for size in SHOWN:
                line = f"{human(size):>6}"
                for c in COLLS:
                    n = runs.get((c, mode, graph, "nccl"), {}).get(size)
                    o = runs.get((c, mode, graph, "symmcoll"), {}).get(size)
                    tn = float(n["oop_time_us"]) if n else None
                    to = float(o["oop_time_us"]) if o else None
                    b = REFERENCE.get((mode, graph, c), {}).get(size)
                    sp = f"{tn / to:5.2f}" if tn and to else f"{'-':>5}"
                    dp = "-"
                    if tn and b:
                        dev = 100.0 * (tn - b) / b
                        dp = f"{dev:+.1f}"
                        total += 1
                        within += abs(dev) <= 10.0
                    line += (f" | {tn if tn is not None else '-':>9} {to if to is not None else '-':>9} {sp}"
                             f" {b if b else '-':>8} {dp:>6}")
                print(line)

    print("\n== runs: exit code, rows, wrong elements (out-of-place + in-place)")
    bad = 0
    for key in sorted(runs):
        rows = runs[key]
        wrong = sum(max(0, int(r[k])) for r in rows.values() for k in ("oop_wrong", "ip_wrong"))
        name = "_".join(key)
        rc_path = os.path.join(d, name + ".rc")
        rc = open(rc_path).read().strip() if os.path.exists(rc_path) else "?"
        flag = "" if rc == "0" and wrong == 0 and rows else "  <-- CHECK"
        bad += bool(flag)
        print(f"{name:40s} rc={rc:>3} rows={len(rows):3d} wrong={wrong}{flag}")
    for rc_path in sorted(glob.glob(os.path.join(d, "*.rc"))):
        name = os.path.basename(rc_path)[:-3]
        if tuple(name.rsplit("_", 3)) not in runs:
            print(f"{name:40s} rc={open(rc_path).read().strip():>3} no CSV  <-- CHECK (see {name}.log)")
            bad += 1
    print(f"\nNCCL alone within 10% of the reference times: {within} of {total} points; runs needing a look: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
