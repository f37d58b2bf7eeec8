#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Report of perf/phase_timing.patch's record: per-phase host times of replayed calls.

    python3 perf/phase_report.py FILE

FILE holds the TSC ticks per microsecond (a double), then one record per replayed call: 11
timestamps (rdtsc) at the phase boundaries of src/enqueue.c and a spare word. Prints the median
over blocks of 200 calls (host_path's blocks of 100 calls on 2 ranks) of each phase's median, the
first 5 blocks (host_path's warmup) left out."""
import statistics as st
import struct
import sys

NAMES = ["acquire", "checks+lock", "health+repeat lookup", "current device", "capture+stream id",
         "orderBefore", "counters", "replayed cuLaunchKernel", "orderAfter (event)",
         "unlock+release"]
STAMPS = 11
BLOCK = 200


def main(path):
    data = open(path, "rb").read()
    ticksPerUs = struct.unpack_from("d", data, 0)[0]
    size = 8 * (STAMPS + 1)
    n = (len(data) - 8) // size
    recs = [struct.unpack_from(f"{STAMPS + 1}Q", data, 8 + size * i) for i in range(n)]
    blocks = []
    for b in range(0, n - BLOCK + 1, BLOCK):
        chunk = recs[b:b + BLOCK]
        whole = st.median([(r[10] - r[0]) / ticksPerUs for r in chunk])
        phases = [st.median([(r[i + 1] - r[i]) / ticksPerUs for r in chunk]) for i in range(10)]
        blocks.append((whole, phases))
    blocks = blocks[5:]
    if not blocks:
        sys.exit("phase_report: too few records")
    print(f"{n} replayed calls, {len(blocks)} blocks; whole call "
          f"{st.median(b[0] for b in blocks):.3f} us")
    for i, name in enumerate(NAMES):
        print(f"  {name:26s} {st.median(b[1][i] for b in blocks):.3f}")
    print(f"  {'outside the launch':26s} {st.median(b[0] - b[1][7] for b in blocks):.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
