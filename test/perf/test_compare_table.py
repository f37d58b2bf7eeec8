#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# perf/compare_table.py and perf/results_md.py on synthetic compare-mode CSVs: NCCL's best of
# plain and -R 2 per size, our speedups against it, the summary line (worst, median, best, sizes
# below 1.0x), missing variants and sizes (a size one NCCL variant lacks has no best), #wrong
# (n/a when nothing was checked), the merged CSV for plot.py.
# Usage: test_compare_table.py PERF_DIR
import csv
import os
import subprocess
import sys
import tempfile

from checks import Checks  # beside this file

HEADER = ("collective,library,bytes,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,"
          "ip_time_us,ip_algbw,ip_busbw,ip_wrong")
check = Checks("test_compare_table")


def write(path, coll, rows):
    """rows: (library, bytes, oop time, oop wrong)"""
    with open(path, "w") as f:
        print(HEADER, file=f)
        for lib, size, t, wrong in rows:
            print(f"{coll},{lib},{size},{size // 2},bfloat16,sum,-1,{t:.3f},1.0,1.0,{wrong},{t:.3f},1.0,1.0,-1", file=f)


def main():
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as empty:
        return run(sys.argv[1], d, empty)


def run(perf, d, empty):
    # all-reduce: both runs; ours -R 2 is missing at 256 MiB; NCCL -R 2 found 2 wrong at 1 KiB.
    write(os.path.join(d, "all_reduce.csv"), "AllReduce", [
        ("nccl", 8, 10, 0), ("libsymmcoll", 8, 5, 0),
        ("nccl", 1024, 10, 0), ("libsymmcoll", 1024, 8, 0),
        ("nccl", 1 << 20, 20, 0), ("libsymmcoll", 1 << 20, 24, 0),
        ("nccl", 256 << 20, 700, 0), ("libsymmcoll", 256 << 20, 640, 0)])
    write(os.path.join(d, "all_reduce.R2.csv"), "AllReduce", [
        ("nccl", 8, 8, 0), ("libsymmcoll", 8, 4, 0),
        ("nccl", 1024, 12, 2), ("libsymmcoll", 1024, 8, 0),
        ("nccl", 1 << 20, 18, 0), ("libsymmcoll", 1 << 20, 15, 0),
        ("nccl", 256 << 20, 650, 0)])
    # all-gather: plain buffers only (WINDOWS=0); a 0-byte row, slower for us, stays out of the
    # summary.
    write(os.path.join(d, "all_gather.csv"), "AllGather", [
        ("nccl", 0, 0.03, 0), ("libsymmcoll", 0, 0.04, 0),
        ("nccl", 1024, 9, 0), ("libsymmcoll", 1024, 3, 0),
        ("nccl", 2048, 9, 0), ("libsymmcoll", 2048, 12, 0)])

    sys.path.insert(0, perf)
    import compare_table as ct
    rows = ct.table_rows(ct.load(d, "all_reduce")[("bfloat16", "sum")])
    got = [(r["bytes"], r["best"], r["speedup"]["ours"], r["speedup"]["ours -R 2"], r["wrong"]) for r in rows]
    want = [(8, 8.0, 1.6, 2.0, 0), (1024, 10.0, 1.25, 1.25, 2), (1 << 20, 18.0, 0.75, 1.2, 0),
            (256 << 20, 650.0, 650 / 640, None, 0)]
    check("rows", len(got) == len(want) and all(
        g[:2] == w[:2] and g[4] == w[4] and all((a is None and b is None) or (a is not None and b is not None and abs(a - b) < 1e-9)
                                                for a, b in zip(g[2:4], w[2:4])) for g, w in zip(got, want)), f"{got}")
    line = ct.summary_line("all_reduce", rows)
    want_line = ("# all_reduce: ours vs NCCL's best: worst 0.75x (1 MiB), median 1.13x, best 1.60x (8 B); "
                 "below 1.0x: 1 MiB | ours -R 2 vs NCCL's best: worst 1.20x (1 MiB), median 1.25x, "
                 "best 2.00x (8 B); below 1.0x: none")
    check("summary", line == want_line, f"\n got  {line}\n want {want_line}")
    # Consecutive sizes below 1.0x collapse into ranges.
    fake = [{"bytes": 1 << k, "speedup": {"ours": sp, "ours -R 2": None}}
            for k, sp in zip(range(10, 17), (0.9, 0.8, 1.1, 0.7, 0.95, 0.99, 1.3))]
    got_ranges = ct.summary(fake, "ours")
    check("ranges", got_ranges.endswith("below 1.0x: 1 KiB-2 KiB, 8 KiB-32 KiB"), got_ranges)
    ag = ct.table_rows(ct.load(d, "all_gather")[("bfloat16", "sum")])
    check("plain only", [(r["best"], r["speedup"]["ours -R 2"]) for r in ag] == [(0.03, None), (9.0, None), (9.0, None)],
          f"{ag}")
    line = ct.summary_line("all_gather", ag)
    check("plain only summary", line == "# all_gather: ours vs NCCL's best: worst 0.75x (2 KiB), median 1.88x, "
          "best 3.00x (1 KiB); below 1.0x: 2 KiB", line)

    # The command line: tables, summary lines, the merged CSV; a directory without CSVs fails.
    r = subprocess.run([sys.executable, os.path.join(perf, "compare_table.py"), "--merged", d],
                       capture_output=True, text=True)
    out = r.stdout
    check("cli exit", r.returncode == 0, r.stderr)
    check("cli tables", "# all_reduce (bfloat16 sum)" in out and "# all_gather (bfloat16 sum)" in out
          and "reduce_scatter" not in out, out)
    check("cli row", "      1 MiB      20.00      18.00      24.00      15.00      0.75x           1.20x       0" in out, out)
    check("cli missing", "    256 MiB     700.00     650.00     640.00          -      1.02x               -       0" in out, out)
    check("cli summary", out.count("# all_reduce: ours vs NCCL's best") == 1, out)
    with open(os.path.join(d, "all_reduce.all.csv"), newline="") as f:
        merged = list(csv.DictReader(f))
    libs = sorted({m["library"] for m in merged})
    check("merged", len(merged) == 15 and libs == ["libsymmcoll", "libsymmcoll -R 2", "nccl", "nccl -R 2"],
          f"{len(merged)} rows, {libs}")
    r = subprocess.run([sys.executable, os.path.join(perf, "compare_table.py"), empty], capture_output=True, text=True)
    check("cli empty", r.returncode == 1, f"exit {r.returncode}")

    r = subprocess.run([sys.executable, os.path.join(perf, "results_md.py"), d], capture_output=True, text=True)
    md = r.stdout
    check("markdown", r.returncode == 0 and "## All-reduce, bfloat16" in md
          and "| 1 MiB | 20.00 | 18.00 | 24.00 | 15.00 | 0.75x | 1.20x | 0 |" in md
          and "all_reduce: ours vs NCCL's best: worst 0.75x" in md, md + r.stderr)

    # The -R 2 run lacks NCCL at 2 KiB (cut short): no best there, rather than a speedup against
    # plain NCCL alone, and the sizes below 1.0x on either side of it stay two ranges. No run
    # checked data (-c 0: -1): #wrong is n/a, not 0.
    with tempfile.TemporaryDirectory() as cut:
        write(os.path.join(cut, "reduce_scatter.csv"), "ReduceScatter", [
            ("nccl", 1024, 10, -1), ("libsymmcoll", 1024, 12, -1),
            ("nccl", 2048, 30, -1), ("libsymmcoll", 2048, 12, -1),
            ("nccl", 4096, 10, -1), ("libsymmcoll", 4096, 12, -1)])
        write(os.path.join(cut, "reduce_scatter.R2.csv"), "ReduceScatter", [
            ("nccl", 1024, 10, -1), ("libsymmcoll", 1024, 12, -1),
            ("libsymmcoll", 2048, 12, -1),
            ("nccl", 4096, 10, -1), ("libsymmcoll", 4096, 12, -1)])
        rs = ct.table_rows(ct.load(cut, "reduce_scatter")[("bfloat16", "sum")])
        check("missing variant", [(r["best"], r["speedup"]["ours"], r["wrong"]) for r in rs]
              == [(10.0, 10 / 12, None), (None, None, None), (10.0, 10 / 12, None)], f"{rs}")
        line = ct.summary(rs, "ours")
        check("missing variant ranges", line.endswith("below 1.0x: 1 KiB, 4 KiB"), line)
        r = subprocess.run([sys.executable, os.path.join(perf, "compare_table.py"), cut],
                           capture_output=True, text=True)
        check("cli n/a", r.returncode == 0 and
              "      2 KiB      30.00          -      12.00      12.00          -               -     n/a"
              in r.stdout, r.stdout + r.stderr)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
