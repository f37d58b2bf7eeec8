#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The comparison perf/compare.sh prints: per collective and size, NCCL plain, NCCL with symmetric
# windows (-R 2), libsymmcoll plain and with windows, and ours against NCCL's best of the two
# (speedup = best NCCL time / our time, out-of-place); then one summary line per collective.
# Reads what the perf binaries' compare mode (-X PREFIX) writes: <dir>/<coll>.csv (plain run)
# and <dir>/<coll>.R2.csv (-R 2 run), each with the libraries "nccl" and "libsymmcoll".
# Plain python3; results_md.py renders the same rows as Markdown.
"""usage: compare_table.py [--merged] <results-dir>
  --merged  also write <dir>/<coll>.all.csv: the four variants as libraries, for plot.py"""
import csv
import os
import statistics
import sys

COLLS = ("all_reduce", "all_gather", "reduce_scatter")
# (file suffix, library in the CSV, column title, library name in <coll>.all.csv)
VARIANTS = (("", "nccl", "NCCL", "nccl"),
            (".R2", "nccl", "NCCL -R 2", "nccl -R 2"),
            ("", "libsymmcoll", "ours", "libsymmcoll"),
            (".R2", "libsymmcoll", "ours -R 2", "libsymmcoll -R 2"))
NCCL_TITLES = ("NCCL", "NCCL -R 2")
OURS_TITLES = ("ours", "ours -R 2")


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def load(d, coll):
    """{(type, redop): {bytes: {column title: CSV row}}} from both runs' CSVs; {} when none."""
    cases = {}
    for suffix, library, title, _ in VARIANTS:
        path = os.path.join(d, coll + suffix + ".csv")
        if not os.path.exists(path):
            continue
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("library") != library:
                    continue
                try:
                    size = int(r["bytes"])
                    float(r["oop_time_us"])
                except (KeyError, ValueError):
                    continue
                cases.setdefault((r["type"], r["redop"]), {}).setdefault(size, {})[title] = r
    return cases


def time_of(row):
    t = float(row["oop_time_us"]) if row else 0.0
    return t if t > 0 else None


def table_rows(sizes):
    """One dict per size: times per column title (None: missing), best NCCL, speedups, #wrong.
    NCCL's best is taken over every NCCL variant the runs measured: a size one of them lacks
    (a run cut short) has no best and no speedup, rather than one against the slower variant
    alone. #wrong is None when no run checked that size (-c 0 writes -1)."""
    measured = [k for k in NCCL_TITLES if any(k in runs for runs in sizes.values())]
    out = []
    for size in sorted(sizes):
        runs = sizes[size]
        t = {title: time_of(runs.get(title)) for title in NCCL_TITLES + OURS_TITLES}
        nccl = [t[k] for k in measured]
        best = min(nccl) if nccl and None not in nccl else None
        speedup = {k: (best / t[k] if best is not None and t[k] is not None else None) for k in OURS_TITLES}
        counts = [int(r.get(k) or 0) for r in runs.values() for k in ("oop_wrong", "ip_wrong")]
        wrong = sum(max(0, c) for c in counts) if any(c >= 0 for c in counts) else None
        out.append({"bytes": size, "time": t, "best": best, "speedup": speedup, "wrong": wrong})
    return out


def summary(rows, title):
    """Worst, median and best speedup of column `title` over the nonzero sizes, and the sizes below
    1.0x. A 0-byte call moves nothing on either side, so its ratio is timer noise (0.03 against
    0.04 us) and stays out of the summary (the table still shows the row)."""
    sweep = [r for r in rows if r["bytes"] > 0]
    pts = [(r["speedup"][title], r["bytes"], i) for i, r in enumerate(sweep)
           if r["speedup"][title] is not None]
    if not pts:
        return f"{title}: no results"
    worst, best = min(pts), max(pts)
    # Sizes below 1.0x, consecutive ones of the sweep as one range ("1 MiB-64 MiB"); a size
    # without a speedup in between breaks the range.
    spans = []
    for s, b, i in pts:
        if s >= 1.0:
            continue
        if spans and spans[-1][2] == i - 1:
            spans[-1][1:] = [b, i]
        else:
            spans.append([b, b, i])
    below = [human(a) if a == b else f"{human(a)}-{human(b)}" for a, b, _ in spans]
    return (f"{title} vs NCCL's best: worst {worst[0]:.2f}x ({human(worst[1])}), median "
            f"{statistics.median(s for s, _, _ in pts):.2f}x, best {best[0]:.2f}x ({human(best[1])}); "
            f"below 1.0x: {', '.join(below) if below else 'none'}")


def summary_line(coll, rows):
    parts = [summary(rows, "ours")]
    if any(r["speedup"]["ours -R 2"] is not None for r in rows):
        parts.append(summary(rows, "ours -R 2"))
    return f"# {coll}: " + " | ".join(parts)


def wrong_text(wrong):
    return "n/a" if wrong is None else str(wrong)


def fmt(x, width, suffix=""):
    return f"{x:{width}.2f}{suffix}" if x is not None else f"{'-':>{width + len(suffix)}}"


def print_table(coll, dtype, op, rows, out):
    what = dtype if op in ("", "none") else f"{dtype} {op}"
    print(f"# {coll} ({what}): out-of-place time in us; best = the faster of NCCL and NCCL -R 2; "
          "speedup = best / ours", file=out)
    print(f"# {'size':>9} {'NCCL':>10} {'NCCL -R 2':>10} {'ours':>10} {'ours -R 2':>10} "
          f"{'ours/best':>10} {'ours -R 2/best':>15} {'#wrong':>7}", file=out)
    for r in rows:
        t, s = r["time"], r["speedup"]
        print(f"  {human(r['bytes']):>9} {fmt(t['NCCL'], 10)} {fmt(t['NCCL -R 2'], 10)} {fmt(t['ours'], 10)} "
              f"{fmt(t['ours -R 2'], 10)} {fmt(s['ours'], 9, 'x')} {fmt(s['ours -R 2'], 14, 'x')} "
              f"{wrong_text(r['wrong']):>7}", file=out)


def write_merged(d, coll, cases):
    """<coll>.all.csv: every variant's rows, the library column naming the variant."""
    rows = []
    for sizes in cases.values():
        for size in sorted(sizes):
            for suffix, _library, title, name in VARIANTS:
                r = sizes[size].get(title)
                if r is not None:
                    rows.append(dict(r, library=name))
    if not rows:
        return None
    path = os.path.join(d, coll + ".all.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return path


def main(argv):
    args = [a for a in argv if a != "--merged"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = args[0]
    found = 0
    for coll in COLLS:
        cases = load(d, coll)
        if not cases:
            continue
        found += 1
        for (dtype, op), sizes in sorted(cases.items()):
            rows = table_rows(sizes)
            print()
            print_table(coll, dtype, op, rows, sys.stdout)
            print(summary_line(coll, rows))
        if "--merged" in argv:
            write_merged(d, coll, cases)
    if not found:
        print(f"compare_table.py: no <coll>.csv in {d}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
