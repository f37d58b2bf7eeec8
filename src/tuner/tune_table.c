/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in table and the row lookup shared with tuning files. */
#include "tune_table.h"

#include <stdint.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define ANY SYMM_TUNE_ANY
#define AR SYMM_COLL_ALLREDUCE
#define AG SYMM_COLL_ALLGATHER
#define RS SYMM_COLL_REDUCESCATTER
#define NVLINK SYMM_LINK_NVLINK

/* Rows are either measured or follow the untimed-row rule.
 *
 * Measured: all-reduce, 2 ranks, sm_90, NVLink (2x H200 NV18, 2 processes, bf16, 20-op CUDA
 * graphs; perf/RESULTS.md, "2x H200 (NV18), earlier"). Lamport 2.87-3.22 us from 8 B to 32 KiB and 4.80 at
 * 256 KiB, one-shot 7.23-19.83 us from 512 KiB to 4 MiB, push two-shot 33.4 us at 8 MiB to
 * 3009 at 1 GiB, against NCCL's 5.70-8.31 / 9.93-34.28 / 46.5-3231: 0.43-0.93x of NCCL's time
 * at every size (eager 0.56-0.79x; registered windows, -R 2, 0.51-0.89x). H100 NVLink pairs
 * take this row too (same arch, same kind of link): a tuning run on 2x H100 NV18
 * (perf/results/tune_2xH100_NV18.txt) picked the same kernels at every size it measured, and
 * the comparison there ran 1.09-2.05x NCCL's best (bf16, graphs). Lamport runs to 512 KiB since
 * its slots grew with fewer ranks (1 MiB of payload per writer at 2): on 2x H100 it took 6.76-6.92
 * us at 512 KiB against the one-shot's 8.15-8.28 (bf16 and float, graphs; NCCL's best about
 * 10.0), and lost at 1 MiB (10.56-10.96 against 9.89-10.02); on 2x H200 the two tied at 512 KiB.
 *
 * Measured: all-gather and reduce-scatter, 2 ranks, sm_90, NVLink, from two symmcoll-tune runs on
 * 2x H200 NV18 (perf/results/: driver, NCCL 2.28.9, date). Small sizes
 * (tune_2xH200_NV18.txt, -b 8 -e 1G -f 4 -R 0 and -R 2): Lamport up to 512 KiB (3.3-5.1 us
 * against NCCL's 5.2-8.1 plain and 3.6-8.8 with windows), guards included: an NCCL step of no
 * width after a kernel that a call may be unable to use (Lamport without its staging region,
 * say) keeps that call from falling through to a kernel that lost at its size; Lamport also
 * takes the sizes below the file's first (32 B); count 0 is NCCL's anyway. Large sizes
 * (tune_2xH200_NV18_large.txt, -b 1M -e 1G -f 4 -R 0,2, after the zero-copy all-gather learned
 * to feed every rank's store from one load): push all-gather and pull reduce-scatter from 1 MiB
 * to 1 GiB, plain and with windows, 1.07-2.06x NCCL's time (1 GiB: all-gather 1543 us, 1475 in
 * windows, against NCCL's 1658; reduce-scatter 1817, 1620 in windows, against 2040); the copy
 * engine lost to the push at every size. Above 1 GiB the same kernels run (rounds in one launch
 * through staging, one pass in place), so the rows go on. Other element sizes of reduce-scatter
 * take the untimed row below. The all-reduce rows of that file are not taken: the row above
 * runs the two-shot at every size from 4 MiB and is 1.07-1.16x NCCL's best from 64 MiB to 1 GiB
 * in the comparison run beside that tuning. On 2x H100 NV18 (tune_2xH100_NV18.txt) the same
 * kernels won at every size but one: with windows at 2 MiB NCCL beat the zero-copy pull by 1%,
 * and windowed calls below 16 MiB now go through staging (tuner.c, SYMMCOLL_ZERO_COPY_MIN_BYTES),
 * 10.3 us there. The comparison on that pair: 1.04-1.73x (all-gather) and 1.18-1.72x
 * (reduce-scatter) NCCL's best on plain buffers, bf16, graphs. Lamport all-gather and
 * reduce-scatter run to 1 MiB on the pair since its kernels loop over two ranks there: on 2x H100,
 * graphs, plain buffers, bf16 and float, it took 6.20-6.47 us (all-gather) and 6.80-6.94
 * (reduce-scatter) at 1 MiB against the push's 7.28-7.44 and the pull's 7.16-7.21, and lost at
 * 2 MiB (9.75-11.62 against 9.01-9.08; 9.76-12.31 against 8.93-10.43); symmcoll-tune on that
 * pair, plain and windows, picks the same (tune_2xH100_NV18_1M.txt; with windows the float
 * reduce-scatter tied at 2 MiB, 9.82 us each, kept at 1 MiB); the H200 pair, which takes these
 * rows too, was not measured at 1 MiB since. Windowed all-gathers above
 * 512 MiB take the copy engine (since its own part moves beside the peer copies): on 2x H100 NV18,
 * bf16 graphs -R 2, it took 1391 us at 1 GiB against the push's 1478 (386 against 363 GB/s)
 * but 765 against 743 at 512 MiB and lost at every smaller size (16 MiB-256 MiB).
 *
 * Measured: all three collectives, 4 ranks, sm_90, NVLink, from symmcoll-tune runs on 4x H200
 * (every pair NV18; perf/results/tune_4xH200_NV18.txt: -P 4 -b 8 -e 1G -f 4, bf16 plain and with
 * windows, float plain for all-reduce and reduce-scatter). Plain buffers: Lamport all-reduce to
 * 128 KiB (3.4-6.1 us against NCCL's 8.0-11.1), one-shot to 512 KiB, two-shot to 2 MiB (NCCL's
 * rings win from 8 MiB: 60 against 64 us, 2302 against 2670 at 512 MiB); Lamport all-gather and
 * reduce-scatter to 512 KiB (3.6-6.3 us against 6.7-10.4), push all-gather to 32 MiB (88.6
 * against 97.9 us; NCCL from 128 MiB), pull reduce-scatter of 2-byte elements to 512 MiB (1253
 * against 1293 us) and of 4-byte ones to 32 MiB (at 128 MiB and above within 3% of NCCL).
 * Windows, against NCCL's symmetric kernels: all-reduce Lamport to 128 KiB, one-shot to 512 KiB,
 * two-shot to 2 MiB and from 32 MiB on (NCCL at 8 MiB: 63.1 against 63.6 us; since replaced
 * from 4 MiB by NCCL's rings through the windows' aliases, below); all-gather
 * Lamport to 512 KiB and push from 2 to 8 MiB (within 3% from 32 MiB); reduce-scatter Lamport to
 * 512 KiB and pull from there on (1220 against 1886 us at 512 MiB). The tuning
 * run's windowed pull was zero copy and lost to NCCL at 2 MiB (13.80 against 13.67 us); since
 * windowed calls below 16 MiB run it through staging (tuner.c), the pull of 1-8 MiB is the plain
 * buffers' kernel, measured in the same run at 11.16 (2 MiB) and 26.74 us (8 MiB) and in the
 * comparison at 8.57 / 11.29 / 16.70 us (1 / 2 / 4 MiB) against NCCL's symmetric kernels'
 * 13.67, 41.64 and 9.56 / 14.35 / 29.55: so the row pulls from 512 KiB on.
 * Only bf16 was measured with windows: other element sizes take the untimed rows there. NCCL
 * steps of no width are guards (above). H100 4-GPU nodes take these rows too: a comparison and
 * a tuning run on 4x H100 NV18 (perf/results/tune_4xH100_NV18.txt, perf/RESULTS.md "4x H100")
 * changed three windowed rows, each the same way on both machines: the two-shot all-reduce and
 * the pull reduce-scatter go on above 512 MiB (at 512 MiB 2672 against NCCL's symmetric 3011 us
 * and 1217 against 1882 on H100, 2662 / 3041 and 1220 / 1886 on H200; past the sweep's end the
 * table had forwarded, and NCCL's symmetric kernels took 5980 and 3755 us at 1 GiB); the
 * reduce-scatter runs Lamport below 2 KiB too (H100 3.5-3.6 us against NCCL's 4.1-4.2; H200
 * 4.19 against 4.26, a tie the tuner's 3% rule gave to NCCL); the all-gather forwards to 2 MiB
 * (the push lost at 1 MiB on both: 9.76 against 9.24 us on H100, 9.69 / 8.80 on H200; at 2 MiB
 * 12.47 / 13.02 and 11.92 / 11.81). Where the plain rows lose on H100 it is to NCCL's symmetric
 * kernels, which plain buffers cannot use (all-reduce 2 MiB, all-gather 1 and 16-64 MiB).
 * These steps come from the Lamport kernel bounded by 8; since 53374c9 it is bounded by 4 at
 * 3-4 ranks, 0.2-0.47 us faster per call (4x H100, perf/RESULTS.md run K12), not tuned again.
 * Windows at 4 ranks, large calls: NCCL's symmetric kernels, which it runs on windows, lose to
 * its own rings on plain buffers there, so the windowed rows end in `ncclplain` (the real NCCL
 * given the windows' aliases, which it takes for plain memory). 4x H200, graphs, bf16
 * (perf/results/compare_4xH200_graph_bf16.md; NCCL plain / NCCL -R 2 / ours -R 2, us): all-reduce
 * 4 MiB 41.85 / 41.17 / 41.53 (a tie: NCCL stays), 8 MiB 60.77 / 64.10 / 64.65, 16 MiB 98.31 /
 * 112.78 / 113.97, 32 MiB 169.78 / 210.57 / 194.28 (our zero-copy two-shot, which the row ran
 * from 32 MiB), 128 MiB 590.48 / 783.93 / 711.62, 1 GiB 4528.73 / 6120.35 / 5279.15; all-gather
 * 256 MiB 601.78 / 597.94 / 598.49 (windows still win: NCCL stays), 512 MiB 1168.26 / 1198.42 /
 * 1204.95, 1 GiB 2300.93 / 2416.03 / 2422.55. 4x H100 agrees (perf/RESULTS.md, "4x H100, CUDA
 * graphs, bf16, K8"): all-reduce 32-256 MiB 169.72-1192.41 plain against 207.72-1511.51 with
 * windows and 196.75-1349.98 for our two-shot. Timed through `ncclplain` afterwards (4x H200,
 * perf/RESULTS.md run M4, one run each; NCCL plain / ours -R 2, us): all-reduce 8 MiB 60.74 /
 * 60.67, 128 MiB 589.24 / 588.78, 1 GiB 4515.74 / 4519.31; all-gather 512 MiB 1161.25 / 1163.01,
 * 1 GiB 2286.24 / 2292.66: NCCL's plain time, 0.99-1.00x at every size the rows give it.
 *
 * Untimed (3 and 5-8 ranks, other archs, types the measured rows lack): only the Lamport
 * kernels, and only where the win over NCCL's latency floor is certain by a wide margin. NCCL's floor on
 * NVLink (perf/RESULTS.md, "2x H200 (NV18), earlier"; 2 processes): all-reduce 5.7-7.1 us in graphs and
 * 9.3-11 eager up to 64 KiB; all-gather and reduce-scatter 5.0-6.3 in graphs and 6.9-10.6
 * eager; more ranks only add steps to NCCL's rings and trees. A Lamport call is one launch plus one flight of its lines
 * to the peers: at 32 KiB the 2-rank all-reduce pushes 64 KiB (data plus flags) to its peer and
 * takes 3.22 us, 0.47x NCCL's 6.85. The bounds below keep every rank's push within that 64 KiB,
 * so the fixed part may grow by half (a switch hop, more flags to poll) and still finish under
 * NCCL's lowest floor (5.0 us, graphs):
 *   all-reduce pushes 2(n-1)B per rank: 32 KiB at 2 ranks, 8 KiB at 3-4 (<= 48 KiB pushed),
 *   4 KiB at 5-8 (<= 56 KiB);
 *   all-gather and reduce-scatter push 2(n-1)/n of the buffer B, and their kernels were never
 *   timed at all: half the budget, 16 KiB at every size of world (<= 28 KiB pushed).
 * Registered symmetric windows: NCCL's own symmetric kernels take 3.7 us at 1 KiB on the pair
 * (-R 2; perf/RESULTS.md, "All-reduce, symmetric windows"): no certain win, untimed rows
 * forward them. PCIe peers and unknown links have no rows: they forward.
 *
 * Multimem steps (experimental, never run on hardware) count only where multimem is available:
 * SYMMCOLL_MULTIMEM=1 with multicast mapped, or SYMMCOLL_MULTIMEM_EMULATE=1 (tests). */
static const struct symmTuneRow builtinRows[] = {
    /* coll ranks elem arch link reg steps */
    {AR, 2, 2, ANY, 90, NVLINK, ANY, 3,
     {{512 * KiB, SYMM_ALGO_LAMPORT}, {4 * MiB, SYMM_ALGO_ONESHOT}, {SIZE_MAX, SYMM_ALGO_TWOSHOT}}},
    {AR, 2, 2, ANY, ANY, NVLINK, 0, 1, {{32 * KiB, SYMM_ALGO_LAMPORT}}},
    {AR, 4, 4, ANY, 90, NVLINK, 0, 4,
     {{128 * KiB, SYMM_ALGO_LAMPORT}, {512 * KiB, SYMM_ALGO_ONESHOT}, {512 * KiB, SYMM_ALGO_NCCL},
      {2 * MiB, SYMM_ALGO_TWOSHOT}}},
    {AR, 4, 4, 2, 90, NVLINK, 1, 6,
     {{128 * KiB, SYMM_ALGO_LAMPORT}, {128 * KiB, SYMM_ALGO_NCCL}, {512 * KiB, SYMM_ALGO_ONESHOT},
      {2 * MiB, SYMM_ALGO_TWOSHOT}, {4 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_NCCLPLAIN}}},
    {AG, 4, 4, ANY, 90, NVLINK, 0, 2, {{512 * KiB, SYMM_ALGO_LAMPORT}, {32 * MiB, SYMM_ALGO_PUSH}}},
    {AG, 4, 4, ANY, 90, NVLINK, 1, 5,
     {{512 * KiB, SYMM_ALGO_LAMPORT}, {2 * MiB, SYMM_ALGO_NCCL}, {8 * MiB, SYMM_ALGO_PUSH},
      {256 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_NCCLPLAIN}}},
    {RS, 4, 4, 2, 90, NVLINK, 0, 3,
     {{512 * KiB, SYMM_ALGO_LAMPORT}, {512 * KiB, SYMM_ALGO_NCCL}, {512 * MiB, SYMM_ALGO_PULL}}},
    {RS, 4, 4, 4, 90, NVLINK, 0, 3,
     {{512 * KiB, SYMM_ALGO_LAMPORT}, {512 * KiB, SYMM_ALGO_NCCL}, {32 * MiB, SYMM_ALGO_PULL}}},
    {RS, 4, 4, 2, 90, NVLINK, 1, 3,
     {{512 * KiB, SYMM_ALGO_LAMPORT}, {512 * KiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_PULL}}},
    {AR, 3, 4, ANY, ANY, NVLINK, 0, 2, {{8 * KiB, SYMM_ALGO_LAMPORT}, {1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {AR, 5, 8, ANY, ANY, NVLINK, 0, 2, {{4 * KiB, SYMM_ALGO_LAMPORT}, {1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {AR, 3, 8, ANY, ANY, NVLINK, 1, 1, {{1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {AG, 2, 2, ANY, 90, NVLINK, 0, 3,
     {{1 * MiB, SYMM_ALGO_LAMPORT}, {1 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_PUSH}}},
    {AG, 2, 2, ANY, 90, NVLINK, 1, 5,
     {{1 * MiB, SYMM_ALGO_LAMPORT}, {1 * MiB, SYMM_ALGO_NCCL}, {512 * MiB, SYMM_ALGO_PUSH},
      {512 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_COPYENGINE}}},
    {RS, 2, 2, 2, 90, NVLINK, ANY, 3,
     {{1 * MiB, SYMM_ALGO_LAMPORT}, {1 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_PULL}}},
    {RS, 2, 2, 4, 90, NVLINK, ANY, 3,
     {{1 * MiB, SYMM_ALGO_LAMPORT}, {1 * MiB, SYMM_ALGO_NCCL}, {SIZE_MAX, SYMM_ALGO_PULL}}},
    {AG, 2, 8, ANY, ANY, NVLINK, 0, 2, {{16 * KiB, SYMM_ALGO_LAMPORT}, {1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {AG, 2, 8, ANY, ANY, NVLINK, 1, 1, {{1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {RS, 2, 8, ANY, ANY, NVLINK, 0, 2, {{16 * KiB, SYMM_ALGO_LAMPORT}, {1 * GiB, SYMM_ALGO_MULTIMEM}}},
    {RS, 2, 8, ANY, ANY, NVLINK, 1, 1, {{1 * GiB, SYMM_ALGO_MULTIMEM}}},
};

const struct symmTuneRow* symmTuneBuiltinRows(int* nrows) {
  *nrows = (int)(sizeof(builtinRows) / sizeof(builtinRows[0]));
  return builtinRows;
}

int symmTuneCollHasAlgo(enum symmColl coll, enum symmAlgo algo) {
  static const unsigned algos[SYMM_NCOLLS] = {
      [SYMM_COLL_ALLREDUCE] = 1u << SYMM_ALGO_LAMPORT | 1u << SYMM_ALGO_ONESHOT |
                              1u << SYMM_ALGO_TWOSHOT | 1u << SYMM_ALGO_MULTIMEM,
      [SYMM_COLL_ALLGATHER] = 1u << SYMM_ALGO_LAMPORT | 1u << SYMM_ALGO_PUSH |
                              1u << SYMM_ALGO_COPYENGINE | 1u << SYMM_ALGO_MULTIMEM,
      [SYMM_COLL_REDUCESCATTER] = 1u << SYMM_ALGO_LAMPORT | 1u << SYMM_ALGO_PULL |
                                  1u << SYMM_ALGO_MULTIMEM,
  };
  if ((unsigned)coll >= SYMM_NCOLLS || (unsigned)algo >= SYMM_NALGOS) return 0;
  return symmAlgoForwards(algo) || (algos[coll] >> algo & 1u);
}

static int keyMatches(int key, int value) { return key == SYMM_TUNE_ANY || key == value; }

static int rowMatches(const struct symmTuneRow* row, const struct symmTuneInput* in, int link,
                      int elemSize) {
  return row->coll == in->coll && in->nranks >= row->minRanks && in->nranks <= row->maxRanks &&
         keyMatches(row->elemSize, elemSize) && keyMatches(row->arch, in->arch) &&
         keyMatches(row->link, link) && keyMatches(row->registered, in->registered != 0);
}

const struct symmTuneRow* symmTuneFindRow(const struct symmTuneFile* file,
                                          const struct symmTuneInput* in) {
  /* Several ranks on one GPU (the tests' bootstrap) follow the NVLink rows; an unknown link
   * matches only rows that accept any link (none built in). */
  const int link = in->link == SYMM_LINK_SAME_GPU ? SYMM_LINK_NVLINK : in->link;
  const int elemSize = (int)symmTypeSize(in->datatype);
  if (file != NULL)
    for (int i = 0; i < file->nrows; i++)
      if (rowMatches(&file->rows[i], in, link, elemSize)) return &file->rows[i];
  for (size_t i = 0; i < sizeof(builtinRows) / sizeof(builtinRows[0]); i++)
    if (rowMatches(&builtinRows[i], in, link, elemSize)) return &builtinRows[i];
  return NULL;
}

enum symmAlgo symmTuneRowPick(const struct symmTuneRow* row, size_t bytes, unsigned avail) {
  if (row == NULL) return SYMM_ALGO_NCCL;
  for (int s = 0; s < row->nsteps; s++)
    if (bytes <= row->steps[s].upTo && (avail >> row->steps[s].algo & 1u)) return row->steps[s].algo;
  return SYMM_ALGO_NCCL;
}
