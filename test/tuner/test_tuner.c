/* SPDX-License-Identifier: Apache-2.0 */
/* Tuner decisions: availability, the measured and untimed rows at their edges, PCIe and unknown
 * links, algorithms the route excludes, multimem opt-in, overrides, logging, staging size, and
 * same inputs -> same choice whatever the order or thread. Tuning files: test_tuner_file.c; the
 * route's rules (CTA policy, fp8 below sm_90): test/core/test_route.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#include "algos.h"
#include "harness.h"
#include "tuner_test_util.h"

static const char* logPath;

static void testNamesAndKernels(void) {
  for (int a = 0; a < SYMM_NALGOS; a++) CHECK_EQ_INT(symmAlgoParse(symmAlgoName((enum symmAlgo)a)), a);
  CHECK_EQ_INT(symmAlgoParse("auto"), -1);
  CHECK_EQ_INT(symmAlgoParse(NULL), -1);
  CHECK_EQ_INT(symmAlgoParse("TwoShot"), SYMM_ALGO_TWOSHOT);
  CHECK_EQ_INT(symmAlgoParse("fastest"), -2);
  CHECK_EQ_INT(symmAlgoParse("ncclplain"), SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_INT(symmAlgoParse("NcclPlain"), SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_STR(symmAlgoName(SYMM_ALGO_NCCLPLAIN), "ncclplain");
  /* The two choices that forward, and nothing else. */
  for (int a = 0; a < SYMM_NALGOS; a++)
    CHECK_EQ_INT(symmAlgoForwards((enum symmAlgo)a),
                 a == SYMM_ALGO_NCCL || a == SYMM_ALGO_NCCLPLAIN);
  /* All-reduce: one-shot, two-shot and Lamport for every type and op; multimem only where the
   * instruction exists. */
  for (int dt = 0; dt < ncclNumTypes; dt++)
    for (int op = 0; op < ncclNumOps; op++) {
      CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_ONESHOT, (ncclDataType_t)dt, (ncclRedOp_t)op));
      CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_TWOSHOT, (ncclDataType_t)dt, (ncclRedOp_t)op));
      CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_LAMPORT, (ncclDataType_t)dt, (ncclRedOp_t)op));
    }
  CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclBfloat16, ncclSum));
  CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclBfloat16, ncclAvg));
  CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclFloat32, ncclSum));
  CHECK(symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclInt64, ncclMax));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclFloat32, ncclMax));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclFloat32, ncclProd));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclFloat64, ncclSum));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_MULTIMEM, ncclInt8, ncclSum));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_ONESHOT, (ncclDataType_t)ncclNumTypes, ncclSum));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_ONESHOT, ncclFloat32, (ncclRedOp_t)ncclNumOps));
  CHECK(!symmAlgoExists(SYMM_COLL_ALLREDUCE, SYMM_ALGO_NCCL, ncclFloat32, ncclSum));
  for (int c = 0; c < SYMM_NCOLLS; c++) /* the real NCCL's, no kernel of ours */
    CHECK(!symmAlgoExists((enum symmColl)c, SYMM_ALGO_NCCLPLAIN, ncclBfloat16, ncclSum));
  /* Which algorithms a collective has (what a tuning file may name). */
  CHECK(symmTuneCollHasAlgo(SYMM_COLL_ALLREDUCE, SYMM_ALGO_TWOSHOT));
  CHECK(!symmTuneCollHasAlgo(SYMM_COLL_ALLREDUCE, SYMM_ALGO_PUSH));
  CHECK(symmTuneCollHasAlgo(SYMM_COLL_ALLGATHER, SYMM_ALGO_COPYENGINE));
  CHECK(!symmTuneCollHasAlgo(SYMM_COLL_ALLGATHER, SYMM_ALGO_PULL));
  CHECK(symmTuneCollHasAlgo(SYMM_COLL_REDUCESCATTER, SYMM_ALGO_PULL));
  CHECK(!symmTuneCollHasAlgo(SYMM_COLL_REDUCESCATTER, SYMM_ALGO_COPYENGINE));
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    CHECK(symmTuneCollHasAlgo((enum symmColl)c, SYMM_ALGO_NCCL));
    CHECK(symmTuneCollHasAlgo((enum symmColl)c, SYMM_ALGO_NCCLPLAIN));
  }
}

static void testAvailability(void) {
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 4096);
  /* NCCL, and NCCL given windows' aliases: wherever the real NCCL runs the call. */
  const unsigned fwd = B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_NCCLPLAIN);
  const unsigned base = fwd | B(SYMM_ALGO_LAMPORT) | B(SYMM_ALGO_ONESHOT) | B(SYMM_ALGO_TWOSHOT);
  CHECK_EQ_INT(symmTunerAvailable(&in), base);
  /* Multicast mapped is not enough: multimem needs SYMMCOLL_MULTIMEM=1 too. */
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerAvailable(&in), base);
  CHECK_EQ_INT(symmTunerMultimemRequested(), 0);
  tunerSetEnv("SYMMCOLL_MULTIMEM", "1");
  CHECK_EQ_INT(symmTunerMultimemRequested(), 1);
  CHECK_EQ_INT(symmTunerAvailable(&in), base | B(SYMM_ALGO_MULTIMEM));
  in.multicastReady = 0; /* asked for, but multicast is off (an off-switch or no support) */
  CHECK_EQ_INT(symmTunerAvailable(&in), base);
  tunerSetEnv("SYMMCOLL_MULTIMEM", "2"); /* out of range: default 0 */
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerAvailable(&in), base);
  tunerCleanEnv();
  /* Emulation needs no multicast. */
  tunerSetEnv("SYMMCOLL_MULTIMEM_EMULATE", "1");
  in.multicastReady = 0;
  CHECK_EQ_INT(symmTunerAvailable(&in), base | B(SYMM_ALGO_MULTIMEM));
  in.op = ncclProd; /* no multimem kernel */
  CHECK_EQ_INT(symmTunerAvailable(&in), base);
  tunerCleanEnv();
  in = tin(SYMM_COLL_ALLREDUCE, 1, ncclFloat32, ncclSum, 4096);
  CHECK_EQ_INT(symmTunerAvailable(&in), fwd);
  in.nranks = SYMM_MAX_RANKS + 1;
  CHECK_EQ_INT(symmTunerAvailable(&in), fwd);
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 3), 4096); /* PreMulSum */
  CHECK_EQ_INT(symmTunerAvailable(&in), fwd);
  in = tin(SYMM_COLL_ALLREDUCE, 2, (ncclDataType_t)ncclNumTypes, ncclSum, 4096);
  CHECK_EQ_INT(symmTunerAvailable(&in), fwd);
  in.coll = (enum symmColl)SYMM_NCOLLS; /* no collective: NCCL's answer alone */
  CHECK_EQ_INT(symmTunerAvailable(&in), B(SYMM_ALGO_NCCL));
  /* Every collective, size and registration; only the route's rules take it away. */
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    for (size_t bytes = 8; bytes <= GiB; bytes *= 64) {
      in = tin((enum symmColl)c, 4, ncclFloat64, ncclProd, bytes);
      in.registered = (int)(bytes & 1);
      CHECK(symmTunerAvailable(&in) & B(SYMM_ALGO_NCCLPLAIN));
      in.excluded = B(SYMM_ALGO_NCCLPLAIN);
      CHECK(!(symmTunerAvailable(&in) & B(SYMM_ALGO_NCCLPLAIN)));
    }
  }
  /* Lamport: up to its largest message, and only with room for its region in staging. */
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclFloat64, ncclMax, symmLamportMaxBytes(2));
  CHECK(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT));
  in.bytes = symmLamportMaxBytes(2) + 8;
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT)));
  /* Two slot classes (the kernels' template constant): 1 MiB of payload per writer for a pair,
   * 256 KiB for any other world. */
  CHECK(symmLamportMaxBytes(2) == (size_t)1 << 20);
  for (int n = 3; n <= 8; n++) CHECK(symmLamportMaxBytes(n) == (size_t)256 << 10);
  in = tin(SYMM_COLL_ALLGATHER, 4, ncclFloat32, ncclSum, 4 * symmLamportMaxBytes(4));
  CHECK(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT));
  in.bytes += 4 * 16;
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT)));
  in = tin(SYMM_COLL_ALLREDUCE, 8, ncclFloat32, ncclSum, symmLamportMaxBytes(8) + 16);
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT)));
  in.bytes = 1024;
  in.stagingBytes = 1 << 20;
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT)));
  /* fp8 has kernels for every collective (which arch may run them is the route's rule). */
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    in = tin((enum symmColl)c, 2, ncclFloat8e4m3, ncclSum, 4096);
    CHECK(symmTunerAvailable(&in) & B(SYMM_ALGO_LAMPORT));
  }
  /* All-gather and reduce-scatter: only what has kernels (symmAlgoExists), from their lists. */
  for (int c = SYMM_COLL_ALLGATHER; c <= SYMM_COLL_REDUCESCATTER; c++) {
    in = tin((enum symmColl)c, 4, ncclBfloat16, ncclSum, 4096);
    const unsigned avail = symmTunerAvailable(&in);
    CHECK(avail & B(SYMM_ALGO_NCCL));
    for (int a = 1; a < SYMM_NALGOS; a++)
      if ((avail & B(a)) && !symmAlgoForwards((enum symmAlgo)a))
        CHECK(symmTuneCollHasAlgo((enum symmColl)c, (enum symmAlgo)a) &&
              symmAlgoExists((enum symmColl)c, (enum symmAlgo)a, ncclBfloat16, ncclSum));
  }
}

/* What the route's rules exclude (src/route.c) is never available and never picked, forced or
 * not; NCCL always stays. */
static void testExcluded(void) {
  const unsigned onlyCe = ~(B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_COPYENGINE));
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    for (size_t bytes = 8; bytes <= GiB; bytes *= 8) {
      struct symmTuneInput in = tin((enum symmColl)c, 2, ncclBfloat16, ncclSum, bytes);
      const unsigned all = symmTunerAvailable(&in);
      in.excluded = onlyCe;
      const unsigned avail = symmTunerAvailable(&in);
      CHECK_EQ_INT(avail, all & ~onlyCe);
      if (c != SYMM_COLL_ALLGATHER) CHECK_EQ_INT(avail, B(SYMM_ALGO_NCCL));
      CHECK(avail & B(symmTunerPick(&in)));
      in.excluded = ~0u;
      CHECK_EQ_INT(symmTunerAvailable(&in), B(SYMM_ALGO_NCCL));
    }
  }
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "oneshot");
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 1024);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
  in.excluded = onlyCe;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  CHECK_EQ_INT(symmTunerForced(&in, symmTunerAvailable(&in)), -1);
  /* fp8 reductions on mixed architectures leave out ours only: both forwarding choices stay. */
  in.excluded = ~SYMM_ALGOS_FORWARDED;
  CHECK_EQ_INT(symmTunerAvailable(&in), SYMM_ALGOS_FORWARDED);
  tunerCleanEnv();
  /* The row machinery takes the copy engine where a row names it and it is available. */
  struct symmTuneRow row = {.coll = SYMM_COLL_ALLGATHER, .nsteps = 2,
                            .steps = {{64 * KiB, SYMM_ALGO_LAMPORT}, {SIZE_MAX, SYMM_ALGO_COPYENGINE}}};
  const unsigned zeroAvail = B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_COPYENGINE);
  CHECK_EQ_INT(symmTuneRowPick(&row, 1024, zeroAvail), SYMM_ALGO_COPYENGINE);
  CHECK_EQ_INT(symmTuneRowPick(&row, 1024, zeroAvail | B(SYMM_ALGO_LAMPORT)), SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(symmTuneRowPick(&row, 1024, B(SYMM_ALGO_NCCL)), SYMM_ALGO_NCCL);
}

/* 2 ranks, sm_90, NVLink: measured. Lamport to 512 KiB, one-shot to 4 MiB, two-shot above,
 * registered or not, every type; H100 pairs (sm_90) and ranks sharing a GPU alike. */
static void testMeasuredRow(void) {
  for (int link = SYMM_LINK_NVLINK; link <= SYMM_LINK_SAME_GPU; link += 2) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      for (int reg = 0; reg <= 1; reg++) {
        const size_t es = symmTypeSize((ncclDataType_t)dt);
        struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, (ncclDataType_t)dt, ncclSum, es);
        in.link = link;
        in.registered = reg;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
        in.bytes = 512 * KiB;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
        in.bytes = 512 * KiB + es;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
        in.bytes = 4 * MiB;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
        in.bytes = 4 * MiB + es;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
        in.bytes = (size_t)1 << 40;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
        /* Multicast never changes it (no multimem step in this row). */
        in.multicastReady = 1;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
      }
    }
  }
  /* Without room for the Lamport region, one-shot takes the small sizes. */
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 1024);
  in.stagingBytes = 1 << 20;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
}

/* Rows nobody timed: Lamport only, to 32 KiB (2 ranks), 8 KiB (3-4), 4 KiB (5-8); all-gather and
 * reduce-scatter 16 KiB; registered calls, larger sizes, PCIe and unknown links forward. */
static void testUntimedRows(void) {
  static const size_t arBound[SYMM_MAX_RANKS + 1] = {0, 0, 32 * KiB, 8 * KiB, 8 * KiB,
                                                     4 * KiB, 4 * KiB, 4 * KiB, 4 * KiB};
  for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      const size_t es = symmTypeSize((ncclDataType_t)dt);
      struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, n, (ncclDataType_t)dt, ncclSum, es);
      /* another arch, mixed (0), or sm_90 (2 and 4 ranks have measured sm_90 rows, below) */
      in.arch = n == 2 || n == 4 ? 80 : (n % 2 ? 0 : 90);
      in.multicastReady = 1; /* not asked for: no effect */
      /* (fp8 reductions below sm_90: excluded by the route, test/core/test_route.c) */
      const enum symmAlgo small = SYMM_ALGO_LAMPORT;
      CHECK_EQ_INT(symmTunerPick(&in), small);
      in.bytes = arBound[n];
      CHECK_EQ_INT(symmTunerPick(&in), small);
      in.bytes = arBound[n] + es;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
      in.bytes = (size_t)1 << 40;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
      in.bytes = es;
      in.registered = 1;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
      in.registered = 0;
      in.stagingBytes = 1 << 20; /* no Lamport: no other small-message algorithm of ours */
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
    }
  }
  /* All-gather and reduce-scatter rows, through the row machinery (their kernels may not exist). */
  const unsigned all = B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_LAMPORT) | B(SYMM_ALGO_PUSH) |
                       B(SYMM_ALGO_PULL) | B(SYMM_ALGO_COPYENGINE);
  for (int c = SYMM_COLL_ALLGATHER; c <= SYMM_COLL_REDUCESCATTER; c++) {
    for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
      for (int arch = 0; arch <= 100; arch += 10) {
        if ((n == 2 || n == 4) && arch == 90) continue; /* measured rows */
        struct symmTuneInput in = tin((enum symmColl)c, n, ncclFloat32, ncclSum, 16 * KiB);
        in.arch = arch;
        const struct symmTuneRow* row = symmTuneFindRow(NULL, &in);
        CHECK(row != NULL);
        CHECK_EQ_INT(symmTuneRowPick(row, 16, all), SYMM_ALGO_LAMPORT);
        CHECK_EQ_INT(symmTuneRowPick(row, 16 * KiB, all), SYMM_ALGO_LAMPORT);
        CHECK_EQ_INT(symmTuneRowPick(row, 16 * KiB + 1, all), SYMM_ALGO_NCCL);
        CHECK_EQ_INT(symmTuneRowPick(row, 16 * KiB + 1, all | B(SYMM_ALGO_MULTIMEM)), SYMM_ALGO_MULTIMEM);
        CHECK_EQ_INT(symmTuneRowPick(row, GiB + 1, all | B(SYMM_ALGO_MULTIMEM)), SYMM_ALGO_NCCL);
        in.registered = 1;
        row = symmTuneFindRow(NULL, &in);
        CHECK_EQ_INT(symmTuneRowPick(row, 16, all), SYMM_ALGO_NCCL);
      }
    }
  }
  /* Measured on 2 ranks, sm_90: Lamport to 1 MiB, then push / pull at every larger size,
   * plain and with windows, but the copy engine for windowed all-gathers above 512 MiB.
   * Reduce-scatter rows exist for 2- and 4-byte elements only (other sizes take the untimed
   * row). */
  for (int c = SYMM_COLL_ALLGATHER; c <= SYMM_COLL_REDUCESCATTER; c++) {
    const enum symmAlgo big = c == SYMM_COLL_ALLGATHER ? SYMM_ALGO_PUSH : SYMM_ALGO_PULL;
    for (int reg = 0; reg <= 1; reg++) {
      for (int dt = 0; dt < 3; dt++) {
        const ncclDataType_t type = dt == 0 ? ncclBfloat16 : dt == 1 ? ncclFloat32 : ncclFloat64;
        struct symmTuneInput in = tin((enum symmColl)c, 2, type, ncclSum, 0);
        in.registered = reg;
        const struct symmTuneRow* row = symmTuneFindRow(NULL, &in);
        CHECK(row != NULL);
        if (row == NULL) continue;
        if (dt == 2 && c == SYMM_COLL_REDUCESCATTER) { /* untimed row */
          CHECK_EQ_INT(symmTuneRowPick(row, 16 * KiB + 1, all), SYMM_ALGO_NCCL);
          continue;
        }
        CHECK_EQ_INT(symmTuneRowPick(row, 16, all), SYMM_ALGO_LAMPORT);
        CHECK_EQ_INT(symmTuneRowPick(row, 512 * KiB, all), SYMM_ALGO_LAMPORT);
        CHECK_EQ_INT(symmTuneRowPick(row, 1 * MiB, all), SYMM_ALGO_LAMPORT);
        CHECK_EQ_INT(symmTuneRowPick(row, 1 * MiB + 1, all), big);
        CHECK_EQ_INT(symmTuneRowPick(row, 128 * MiB, all), big);
        CHECK_EQ_INT(symmTuneRowPick(row, 512 * MiB, all), big);
        /* Windowed all-gathers above 512 MiB: the copy engine (zero copy). */
        const enum symmAlgo huge = c == SYMM_COLL_ALLGATHER && reg ? SYMM_ALGO_COPYENGINE : big;
        CHECK_EQ_INT(symmTuneRowPick(row, 512 * MiB + 1, all), huge);
        CHECK_EQ_INT(symmTuneRowPick(row, GiB, all), huge);
        CHECK_EQ_INT(symmTuneRowPick(row, 64 * GiB + 1, all), huge);
        /* A kernel that cannot run a call hands it to NCCL, never to the next kernel, which
         * lost at those sizes (the guards). */
        CHECK_EQ_INT(symmTuneRowPick(row, 2 * MiB, all & ~B(big)), SYMM_ALGO_NCCL);
        CHECK_EQ_INT(symmTuneRowPick(row, 4 * KiB, all & ~B(SYMM_ALGO_LAMPORT)), SYMM_ALGO_NCCL);
      }
    }
  }
  /* PCIe peers and unknown links forward at every size, measured arch or not; an override still
   * forces (a user's explicit choice). */
  for (int link = SYMM_LINK_UNKNOWN; link <= SYMM_LINK_PCIE; link += 2) {
    for (int c = 0; c < SYMM_NCOLLS; c++) {
      for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
        for (size_t bytes = 8; bytes <= GiB; bytes *= 4) {
          struct symmTuneInput in = tin((enum symmColl)c, n, ncclBfloat16, ncclSum, bytes);
          in.link = link;
          CHECK(symmTuneFindRow(NULL, &in) == NULL);
          CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
        }
      }
    }
  }
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "oneshot");
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 1024);
  in.link = SYMM_LINK_PCIE;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
  tunerCleanEnv();
}

/* Measured on 4 ranks, sm_90, NVLink (src/tuner/tune_table.c): each step's last size and the
 * first past it, plain and registered, and the guards. */
static enum symmAlgo pick4(enum symmColl coll, ncclDataType_t type, int registered, size_t bytes) {
  struct symmTuneInput in = tin(coll, 4, type, ncclSum, bytes);
  in.registered = registered;
  return symmTunerPick(&in);
}

/* Each case: {bytes, the algorithm expected}. */
static void checkPicks4(enum symmColl coll, ncclDataType_t type, int registered,
                        const size_t (*cases)[2], size_t ncases) {
  for (size_t i = 0; i < ncases; i++)
    CHECK_EQ_INT(pick4(coll, type, registered, cases[i][0]), (int)cases[i][1]);
}
#define CHECK_PICKS4(coll, type, registered, cases) \
  checkPicks4(coll, type, registered, cases, sizeof(cases) / sizeof(cases[0]))

static void testMeasuredFourRanks(void) {
  const enum symmAlgo L = SYMM_ALGO_LAMPORT, O = SYMM_ALGO_ONESHOT, T = SYMM_ALGO_TWOSHOT,
                      N = SYMM_ALGO_NCCL, P = SYMM_ALGO_PUSH, U = SYMM_ALGO_PULL,
                      NP = SYMM_ALGO_NCCLPLAIN;
  const enum symmColl ar = SYMM_COLL_ALLREDUCE, ag = SYMM_COLL_ALLGATHER,
                      rs = SYMM_COLL_REDUCESCATTER;
  for (int dt = 0; dt < 2; dt++) {
    const ncclDataType_t type = dt == 0 ? ncclBfloat16 : ncclFloat32;
    const size_t es = symmTypeSize(type);
    const size_t arPlain[][2] = {{es, L}, {128 * KiB, L}, {128 * KiB + es, O}, {512 * KiB, O},
                                 {512 * KiB + es, T}, {2 * MiB, T}, {2 * MiB + es, N},
                                 {8 * MiB, N}, {GiB, N}};
    CHECK_PICKS4(ar, type, 0, arPlain);
    const size_t agPlain[][2] = {{64, L}, {512 * KiB, L}, {512 * KiB + 4, P}, {32 * MiB, P},
                                 {32 * MiB + 4, N}, {512 * MiB, N}, {GiB, N}};
    CHECK_PICKS4(ag, type, 0, agPlain);
    const size_t pullTop = dt == 0 ? 512 * MiB : 32 * MiB; /* 4-byte elements: to 32 MiB */
    const size_t rsPlain[][2] = {{512 * KiB, L}, {512 * KiB + 4 * es, U}, {pullTop, U},
                                 {pullTop + 4 * es, N}};
    CHECK_PICKS4(rs, type, 0, rsPlain);
  }
  /* Windows (bf16 measured; other types take the untimed registered rows: NCCL). From 4 MiB
   * (all-reduce) and 256 MiB (all-gather) NCCL runs its rings through the windows' aliases
   * (ncclplain), which beat its symmetric kernels there. */
  const size_t arReg[][2] = {{2, L}, {128 * KiB, L}, {128 * KiB + 2, O}, {512 * KiB + 2, T},
                             {2 * MiB, T}, {2 * MiB + 2, N}, {4 * MiB, N}, {4 * MiB + 2, NP},
                             {8 * MiB, NP}, {32 * MiB - 2, NP}, {32 * MiB, NP}, {512 * MiB, NP},
                             {GiB, NP}, {2 * GiB, NP}};
  CHECK_PICKS4(ar, ncclBfloat16, 1, arReg);
  CHECK_EQ_INT(pick4(ar, ncclFloat32, 1, 64 * MiB), N);
  CHECK_EQ_INT(pick4(ar, ncclFloat16, 1, GiB), NP); /* the row is the 2-byte elements' */
  const size_t agReg[][2] = {{64, L}, {512 * KiB, L}, {512 * KiB + 4, N}, {2 * MiB, N},
                             {2 * MiB + 4, P}, {8 * MiB, P}, {8 * MiB + 4, N}, {256 * MiB, N},
                             {256 * MiB + 4, NP}, {512 * MiB, NP}, {GiB, NP}, {4 * GiB, NP}};
  CHECK_PICKS4(ag, ncclBfloat16, 1, agReg);
  CHECK_PICKS4(ag, ncclFloat32, 1, agReg); /* all-gather rows take any element size */
  /* Where NCCL's rings cannot be given aliases (not available: a test's mask), NCCL itself. */
  {
    struct symmTuneInput w = tin(ar, 4, ncclBfloat16, ncclSum, 8 * MiB);
    w.registered = 1;
    const struct symmTuneRow* r = symmTuneFindRow(NULL, &w);
    CHECK(r != NULL);
    CHECK_EQ_INT(symmTuneRowPick(r, 8 * MiB, B(N) | B(T)), N);
    CHECK_EQ_INT(symmTuneRowPick(r, 8 * MiB, B(N) | B(T) | B(NP)), NP);
  }
  const size_t rsReg[][2] = {{8, L}, {2 * KiB - 8, L}, {2 * KiB, L}, {512 * KiB, L},
                             {512 * KiB + 8, U}, {8 * MiB - 8, U}, {8 * MiB, U}, {512 * MiB, U},
                             {512 * MiB + 8, U}, {2 * GiB, U}};
  CHECK_PICKS4(rs, ncclBfloat16, 1, rsReg);
  CHECK_EQ_INT(pick4(rs, ncclFloat32, 1, 64 * MiB), N);
  /* Guards: a kernel that cannot run a call hands it to NCCL where the next kernel lost. */
  const unsigned all = B(N) | B(L) | B(O) | B(T);
  struct symmTuneInput in = tin(ar, 4, ncclBfloat16, ncclSum, 0);
  const struct symmTuneRow* row = symmTuneFindRow(NULL, &in);
  CHECK(row != NULL);
  CHECK_EQ_INT(symmTuneRowPick(row, 1 * KiB, all & ~B(L)), O); /* one-shot beat NCCL there */
  CHECK_EQ_INT(symmTuneRowPick(row, 256 * KiB, all & ~B(O)), N);
  in.registered = 1;
  row = symmTuneFindRow(NULL, &in);
  CHECK(row != NULL);
  CHECK_EQ_INT(symmTuneRowPick(row, 1 * KiB, all & ~B(L)), N); /* NCCL's symmetric kernels won */
  in = tin(ag, 4, ncclBfloat16, ncclSum, 0);
  in.registered = 1;
  row = symmTuneFindRow(NULL, &in);
  CHECK(row != NULL);
  CHECK_EQ_INT(symmTuneRowPick(row, 4 * KiB, B(N) | B(P)), N);
  in = tin(rs, 4, ncclBfloat16, ncclSum, 0);
  in.registered = 1;
  row = symmTuneFindRow(NULL, &in);
  CHECK(row != NULL);
  CHECK_EQ_INT(symmTuneRowPick(row, 4 * KiB, B(N) | B(U)), N); /* pull lost at Lamport's sizes */
  /* 3 and 5 ranks keep the untimed rows. */
  in = tin(ar, 3, ncclBfloat16, ncclSum, 8 * KiB + 2);
  CHECK_EQ_INT(symmTunerPick(&in), N);
}

/* Multimem runs only when SYMMCOLL_MULTIMEM=1 asks for it and multicast is mapped, or under
 * emulation (tests). */
static void testMultimem(void) {
  /* 3 ranks: an untimed row with a multimem step (4 ranks on sm_90 have a measured row). */
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 3, ncclBfloat16, ncclSum, 64 * KiB);
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  tunerSetEnv("SYMMCOLL_MULTIMEM", "1");
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_MULTIMEM);
  in.bytes = 4 * KiB; /* Lamport's range comes first */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  in.bytes = GiB + 2;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in.bytes = 64 * KiB;
  in.registered = 1;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_MULTIMEM);
  in.registered = 0;
  in.multicastReady = 0; /* an off-switch won: the transport mapped nothing */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in.op = ncclProd;
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  tunerCleanEnv();
  tunerSetEnv("SYMMCOLL_MULTIMEM_EMULATE", "1");
  in.op = ncclSum;
  in.multicastReady = 0;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_MULTIMEM);
  in.nranks = 2; /* the measured row has no multimem step */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  in.bytes = 8 * MiB;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  tunerCleanEnv();
}

static void testOverrides(void) {
  tunerLogTo(logPath, "WARN");
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "twoshot");
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclFloat32, ncclSum, 8);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  in.bytes = (size_t)1 << 40;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  in.nranks = 6; /* forced beats the untimed rule */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  in.nranks = 2;
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "nccl");
  in.bytes = 8;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  /* Unavailable: the table decides, with one WARN however many calls. */
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "multimem");
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  in.bytes = 8 * MiB;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "SYMMCOLL_ALLREDUCE_ALGO=multimem"), 1);
  tunerSetEnv("SYMMCOLL_MULTIMEM_EMULATE", "1");
  in.bytes = 8;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_MULTIMEM);
  in.op = ncclProd; /* no multimem kernel for prod */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "lamport");
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclInt8, ncclMin, 20000);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  in.bytes = 8 * MiB; /* too big for Lamport: table */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "bogus");
  in.bytes = 1024;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "SYMMCOLL_ALLREDUCE_ALGO=bogus"), 1);
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "AUTO");
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  tunerCleanEnv();
  /* Per collective: each knob acts on its own collective only; another collective's algorithm
   * is unavailable (one WARN). */
  tunerSetEnv("SYMMCOLL_ALLGATHER_ALGO", "twoshot");
  tunerSetEnv("SYMMCOLL_REDUCESCATTER_ALGO", "nccl");
  in = tin(SYMM_COLL_ALLGATHER, 2, ncclBfloat16, ncclSum, 1024);
  const enum symmAlgo table = symmTuneRowPick(symmTuneFindRow(NULL, &in), in.bytes, symmTunerAvailable(&in));
  CHECK_EQ_INT(symmTunerPick(&in), table);
  CHECK_EQ_INT(symmTunerPick(&in), table);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "SYMMCOLL_ALLGATHER_ALGO=twoshot"), 1);
  in.coll = SYMM_COLL_REDUCESCATTER;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in.coll = SYMM_COLL_ALLREDUCE;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  tunerCleanEnv();
  /* INFO: each distinct choice once. */
  tunerLogTo(logPath, "INFO");
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 3000);
  for (int i = 0; i < 5; i++) (void)symmTunerPick(&in);
  CHECK_EQ_INT(tunerCountLines(logPath, "allreduce 3000 bytes", "lamport"), 1);
  in.bytes = 3 * MiB;
  for (int i = 0; i < 5; i++) (void)symmTunerPick(&in);
  CHECK_EQ_INT(tunerCountLines(logPath, "allreduce 3145728 bytes", "oneshot"), 1);
  CHECK_EQ_INT(tunerCountLines(logPath, "INFO", "allreduce"), 2);
  tunerLogTo(logPath, "WARN");
}

/* ncclplain through each collective's override: every size, world, registration and link, and
 * logged like any forced choice. It never runs a kernel of ours, so nothing reads in place. */
static void testNcclPlainOverride(void) {
  static const char* const knobs[SYMM_NCOLLS] = {
      "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO"};
  tunerLogTo(logPath, "INFO");
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    tunerSetEnv(knobs[c], "ncclplain");
    for (int n = 2; n <= SYMM_MAX_RANKS; n += 2)
      for (int reg = 0; reg <= 1; reg++)
        for (int link = SYMM_LINK_NVLINK; link <= SYMM_LINK_PCIE; link++)
          for (size_t bytes = 8; bytes <= 4 * GiB; bytes *= 512) {
            struct symmTuneInput in = tin((enum symmColl)c, n, ncclBfloat16, ncclSum, bytes);
            in.registered = reg;
            in.link = link;
            CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCLPLAIN);
            CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_NCCLPLAIN), 0);
            CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_NCCLPLAIN), 0);
          }
    char forced[64];
    snprintf(forced, sizeof(forced), "ncclplain (%s)", knobs[c]);
    CHECK(tunerCountLines(logPath, "INFO", forced) > 0);
    /* The other collectives keep their table. */
    struct symmTuneInput other = tin((enum symmColl)((c + 1) % SYMM_NCOLLS), 2, ncclBfloat16,
                                     ncclSum, 1024);
    CHECK_EQ_INT(symmTunerPick(&other), SYMM_ALGO_LAMPORT);
    tunerCleanEnv();
    tunerLogTo(logPath, "INFO");
  }
  tunerLogTo(logPath, "WARN");
}

static void testZeroCopy(void) {
  /* All-reduce: two-shot only, up to 4 MiB unless the knob says otherwise. */
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 4 * MiB);
  in.registered = 1;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 1);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_ONESHOT), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_NCCL), 0);
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  in.bytes = 4 * MiB + 2;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  in.registered = 0;
  in.bytes = 1024;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_TWOSHOT), 1);
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_ONESHOT), 0);
  tunerSetEnv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "1073741824");
  in.registered = 1;
  in.bytes = GiB;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 1);
  tunerSetEnv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "-1");
  in.bytes = 8;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  in.registered = 0;
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  tunerCleanEnv();
  /* Above 4 MiB the two-shot writes registered outputs in place instead, from 8 MiB unless the
   * knob says otherwise; ncclCommRegister descriptors stay an input matter. */
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 8 * MiB);
  in.registered = 1;
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(8 * MiB), 1);
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(8 * MiB - 1), 0);
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(4 * MiB), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 1);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_ONESHOT), 0);
  in.registered = 0;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  in.registered = 1;
  in.bytes = 8 * MiB - 16;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  tunerSetEnv("SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES", "0");
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 1);
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(4 * MiB + 1), 1);
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(4 * MiB), 0); /* read in place there */
  tunerSetEnv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "-1");
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(8), 1);
  tunerSetEnv("SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES", "-1");
  CHECK_EQ_INT(symmTunerAllReduceWritesOutputs(GiB), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_TWOSHOT), 0);
  tunerCleanEnv();
  /* All-gather writes registered outputs in place, reduce-scatter reads registered inputs, from
   * 16 MiB on unless the knob says otherwise; the copy engine at every size. */
  in = tin(SYMM_COLL_ALLGATHER, 4, ncclBfloat16, ncclSum, 64 * MiB);
  in.registered = 1;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PUSH), 1);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_LAMPORT), 0);
  CHECK_EQ_INT(symmTunerUserZeroCopy(&in, SYMM_ALGO_PUSH), 0);
  in.bytes = 16 * MiB - 1;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PUSH), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_COPYENGINE), 1);
  in.coll = SYMM_COLL_REDUCESCATTER;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PULL), 0);
  in.bytes = 16 * MiB;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PULL), 1);
  in.registered = 0;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PULL), 0);
  in.registered = 1;
  tunerSetEnv("SYMMCOLL_ZERO_COPY_MIN_BYTES", "0");
  in.bytes = 8;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PULL), 1);
  tunerSetEnv("SYMMCOLL_ZERO_COPY_MIN_BYTES", "-1");
  in.bytes = GiB;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PULL), 0);
  in.coll = SYMM_COLL_ALLGATHER;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_PUSH), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_ALGO_COPYENGINE), 1);
  tunerCleanEnv();
}

static void testLargestStaged(void) {
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 0);
  CHECK_EQ_INT(symmTunerLargestStaged(&in), SIZE_MAX); /* measured: two-shot at every size */
  in.arch = 80;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 32 * KiB);
  for (int n = 3; n <= SYMM_MAX_RANKS; n++) {
    in.nranks = n; /* all-gather and reduce-scatter's 16 KiB beat all-reduce's 8 / 4 KiB */
    CHECK_EQ_INT(symmTunerLargestStaged(&in), 16 * KiB);
  }
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 16 * KiB);
  tunerSetEnv("SYMMCOLL_MULTIMEM", "1");
  CHECK_EQ_INT(symmTunerLargestStaged(&in), GiB);
  tunerCleanEnv();
  in.multicastReady = 0;
  tunerSetEnv("SYMMCOLL_MULTIMEM_EMULATE", "1");
  CHECK_EQ_INT(symmTunerLargestStaged(&in), GiB);
  tunerCleanEnv();
  in.link = SYMM_LINK_PCIE;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 0);
  tunerSetEnv("SYMMCOLL_REDUCESCATTER_ALGO", "pull"); /* forced: any size may run it */
  CHECK_EQ_INT(symmTunerLargestStaged(&in), SIZE_MAX);
  tunerSetEnv("SYMMCOLL_REDUCESCATTER_ALGO", "nccl");
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 0);
  tunerSetEnv("SYMMCOLL_REDUCESCATTER_ALGO", "ncclplain"); /* the real NCCL: no staging */
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 0);
  tunerCleanEnv();
  /* Forcing ncclplain for every collective asks no staging: the 4-rank rows' own steps decide
   * (the reduce-scatter's pull at every size), and their ncclplain steps need none either. */
  in = tin(SYMM_COLL_ALLREDUCE, 4, ncclBfloat16, ncclSum, 0);
  tunerSetEnv("SYMMCOLL_REDUCESCATTER_ALGO", "ncclplain");
  tunerSetEnv("SYMMCOLL_ALLGATHER_ALGO", "ncclplain");
  tunerSetEnv("SYMMCOLL_ALLREDUCE_ALGO", "ncclplain");
  CHECK_EQ_INT(symmTunerLargestStaged(&in), SIZE_MAX); /* the rows' pull, not the overrides */
  in.excluded = B(SYMM_ALGO_PULL);
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 32 * MiB); /* the plain all-gather row's push */
  tunerCleanEnv();
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 0);
  in.excluded = ~(B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_LAMPORT));
  /* With only Lamport allowed: the largest Lamport step of the rows, 1 MiB on 2-rank sm_90 (the
   * all-gather's and reduce-scatter's). */
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 1 * MiB);
  in.excluded = ~(B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_COPYENGINE));
  /* No plain row names the copy engine; the windowed all-gather row's runs it zero copy. */
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 0);
  in.arch = 80;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), 0);
  in.arch = 90;
  in.link = SYMM_LINK_SAME_GPU;
  in.excluded = 0;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), SIZE_MAX);
  /* Whatever the table picks for a staged algorithm fits in it. */
  for (int n = 2; n <= SYMM_MAX_RANKS; n++)
    for (int c = 0; c < SYMM_NCOLLS; c++)
      for (size_t bytes = 1; bytes <= GiB; bytes *= 2) {
        struct symmTuneInput x = tin((enum symmColl)c, n, ncclFloat32, ncclSum, bytes);
        x.arch = n == 2 ? 90 : 80;
        if (!symmAlgoForwards(symmTunerPick(&x))) CHECK(bytes <= symmTunerLargestStaged(&x));
      }
}

/* Same inputs, same answer, whatever was asked before and on whichever thread (ranks share no
 * state: each thread walks the cases in its own order). */
#define NCASES 512
static enum symmAlgo reference[NCASES];

static struct symmTuneInput caseInput(int i) {
  struct symmTuneInput x = tin((enum symmColl)(i % SYMM_NCOLLS), 2 + (i / 3) % 7,
                               (ncclDataType_t)(i % ncclNumTypes), (ncclRedOp_t)(i % ncclNumOps),
                               ((size_t)1 << (i % 34)) + (size_t)(i % 5));
  x.multicastReady = i & 1;
  x.registered = (i >> 1) & 1;
  x.link = 1 + (i >> 2) % 3;
  x.arch = (i >> 3) % 3 == 0 ? 90 : (i >> 3) % 3 == 1 ? 80 : 0;
  x.excluded = (i >> 5) % 5 == 0 ? ~(B(SYMM_ALGO_NCCL) | B(SYMM_ALGO_COPYENGINE)) : 0u;
  x.stagingBytes = (i >> 4) % 4 == 0 ? ((size_t)1 << 20) : ((size_t)64 << 20);
  return x;
}

static void* rankThread(void* arg) {
  const int stride = (int)(intptr_t)arg; /* odd: visits every case, in another order */
  intptr_t bad = 0;
  for (int k = 0; k < NCASES; k++) {
    const int i = (int)(((long)k * stride + stride) % NCASES);
    struct symmTuneInput x = caseInput(i);
    const enum symmAlgo a = symmTunerPick(&x);
    if (a != reference[i] || !(symmTunerAvailable(&x) & B(a))) bad++;
  }
  return (void*)bad;
}

static void testSameDecisions(void) {
  tunerSetEnv("SYMMCOLL_MULTIMEM_EMULATE", "1"); /* every kind of row step in play */
  for (int i = 0; i < NCASES; i++) {
    struct symmTuneInput x = caseInput(i);
    reference[i] = symmTunerPick(&x);
  }
  for (int i = NCASES - 1; i >= 0; i--) {
    struct symmTuneInput x = caseInput(i);
    CHECK_EQ_INT(symmTunerPick(&x), reference[i]);
  }
  pthread_t th[8];
  for (int t = 0; t < 8; t++)
    CHECK_EQ_INT(pthread_create(&th[t], NULL, rankThread, (void*)(intptr_t)(2 * t + 1)), 0);
  for (int t = 0; t < 8; t++) {
    void* bad = NULL;
    pthread_join(th[t], &bad);
    CHECK_EQ_INT((intptr_t)bad, 0);
  }
  tunerCleanEnv();
}

int main(void) {
  /* Logging first: src/core/knobs.c logs under its lock, which deadlocks if the first param read
   * (with the variable set) also has to initialise logging. */
  (void)symmLogLevel();
  char path[] = "/tmp/test_tuner_log_XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  logPath = path;
  tunerCleanEnv();
  testNamesAndKernels();
  testAvailability();
  testExcluded();
  testMeasuredRow();
  testUntimedRows();
  testMeasuredFourRanks();
  testMultimem();
  testOverrides();
  testNcclPlainOverride();
  testZeroCopy();
  testLargestStaged();
  testSameDecisions();
  unlink(path);
  return harnessReport("test_tuner");
}
