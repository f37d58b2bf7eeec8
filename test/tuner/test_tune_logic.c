/* SPDX-License-Identifier: Apache-2.0 */
/* symmcoll-tune's crossover logic on synthetic timings: the steps it writes, the margin, gaps
 * between measured sizes, guards, and (on random timings) that the written row never runs an
 * algorithm of ours at a size where it did not beat NCCL, whatever is available at run time. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tune.h"

#define KiB ((size_t)1 << 10)
#define L SYMM_ALGO_LAMPORT
#define O SYMM_ALGO_ONESHOT
#define T SYMM_ALGO_TWOSHOT
#define N SYMM_ALGO_NCCL
#define NP SYMM_ALGO_NCCLPLAIN

static int build(const struct tuneTimes* t, double margin, struct symmTuneStep* steps, int max) {
  enum symmAlgo choice[64];
  tuneChoose(t, margin, choice);
  return tuneSteps(t, margin, choice, steps, max);
}

#define CHECK_STEP(s, bound, a)      \
  do {                               \
    CHECK_EQ_INT((s).upTo, (bound)); \
    CHECK_EQ_INT((s).algo, (a));     \
  } while (0)

static void testExamples(void) {
  struct symmTuneStep s[SYMM_TUNE_MAX_STEPS];
  const size_t sz[] = {1 * KiB, 2 * KiB, 4 * KiB, 8 * KiB, 16 * KiB};
  /* Fastest winner per size; a 2% lead is no win at a 3% margin. */
  {
    const double nccl[] = {10, 10, 10, 10}, lam[] = {5, 5, 9.8, -1}, one[] = {6, 6, 6, 6};
    struct tuneTimes t = {.n = 4, .sizes = sz, .nccl = nccl};
    t.ours[L] = lam;
    t.ours[O] = one;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 2);
    CHECK_STEP(s[0], 2 * KiB, L);
    CHECK_STEP(s[1], 8 * KiB, O);
  }
  /* NCCL's run keeps the gap up to the next measured size; ours ends at its last size. */
  {
    const double nccl[] = {10, 10, 10, 10, 10}, lam[] = {5, 5, -1, -1, -1},
                 two[] = {12, 12, 12, 9, 9};
    struct tuneTimes t = {.n = 5, .sizes = sz, .nccl = nccl};
    t.ours[L] = lam;
    t.ours[T] = two;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 2 * KiB, L);
    CHECK_STEP(s[1], 8 * KiB - 1, N);
    CHECK_STEP(s[2], 16 * KiB, T);
  }
  /* Guard: the two-shot lost at 1 KiB, so if Lamport cannot run there, NCCL must. */
  {
    const double nccl[] = {10, 10, 10}, lam[] = {5, 5, -1}, two[] = {11, 9, 9};
    struct tuneTimes t = {.n = 3, .sizes = sz, .nccl = nccl};
    t.ours[L] = lam;
    t.ours[T] = two;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 2 * KiB, L);
    CHECK_STEP(s[1], 2 * KiB, N);
    CHECK_STEP(s[2], 4 * KiB, T);
    struct symmTuneRow row = {.nsteps = 3};
    memcpy(row.steps, s, sizeof(row.steps));
    CHECK_EQ_INT(symmTuneRowPick(&row, 1 * KiB, 1u << N | 1u << T), N);
    CHECK_EQ_INT(symmTuneRowPick(&row, 3 * KiB, 1u << N | 1u << T), T);
    CHECK_EQ_INT(symmTuneRowPick(&row, 4 * KiB + 1, 0xffu), N);
  }
  /* Windows: NCCL given their aliases (ncclplain) is a candidate like ours; where it lost, a
   * guard before it as before any step. */
  {
    const double nccl[] = {10, 10, 10, 10}, lam[] = {5, 5, -1, -1}, plain[] = {12, 12, 8, 8};
    struct tuneTimes t = {.n = 4, .sizes = sz, .nccl = nccl};
    t.ours[L] = lam;
    t.ours[NP] = plain;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 2 * KiB, L);
    CHECK_STEP(s[1], 2 * KiB, N);
    CHECK_STEP(s[2], 8 * KiB, NP);
  }
  /* No guard after a run of ncclplain: it runs every call NCCL runs, so the step after it never
   * takes its sizes (a one-shot run there would need one: the two-shot lost at 1-2 KiB). */
  {
    const double nccl[] = {10, 10, 10, 10}, first[] = {8, 8, 12, 12}, two[] = {11, 11, 8, 8};
    struct tuneTimes t = {.n = 4, .sizes = sz, .nccl = nccl};
    t.ours[NP] = first;
    t.ours[T] = two;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 2);
    CHECK_STEP(s[0], 2 * KiB, NP);
    CHECK_STEP(s[1], 8 * KiB, T);
    t.ours[NP] = NULL;
    t.ours[O] = first;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 2 * KiB, O);
    CHECK_STEP(s[1], 2 * KiB, N);
    CHECK_STEP(s[2], 8 * KiB, T);
  }
  /* The margin: 9.75 against 10 wins at 2%, not at 3%. */
  {
    const double nccl[] = {10}, one[] = {9.75};
    struct tuneTimes t = {.n = 1, .sizes = sz, .nccl = nccl};
    t.ours[O] = one;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 0);
    CHECK_EQ_INT(build(&t, 0.02, s, SYMM_TUNE_MAX_STEPS), 1);
    CHECK_STEP(s[0], 1 * KiB, O);
  }
  /* No NCCL time at a size (its run failed there): no claim there. */
  {
    const double nccl[] = {10, -1, 10}, one[] = {5, 5, 5};
    struct tuneTimes t = {.n = 3, .sizes = sz, .nccl = nccl};
    t.ours[O] = one;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 1 * KiB, O);
    CHECK_STEP(s[1], 4 * KiB - 1, N);
    CHECK_STEP(s[2], 4 * KiB, O);
  }
  /* Nothing of ours measured. */
  {
    const double nccl[] = {10, 10};
    struct tuneTimes t = {.n = 2, .sizes = sz, .nccl = nccl};
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 0);
  }
  /* Sizes of 0 bytes (count 0, a no-op) decide nothing: neither a step of their own nor an
   * NCCL step up to the first size that moved data, nor a guard (4 ranks, 2026-11-26:
   * "pull<=0 lamport<=512K" and "nccl<=127 lamport<=512K" came from 0.04 against 0.05 us). */
  {
    const size_t z[] = {0, 0, 128, 512, 2048};
    const double nccl[] = {0.05, 0.05, 7, 7, 17}, lam[] = {0.06, 0.06, 4, 4, -1},
                 pull[] = {0.04, 0.04, 7.3, 7.3, 11};
    struct tuneTimes t = {.n = 5, .sizes = z, .nccl = nccl};
    t.ours[L] = lam;
    t.ours[SYMM_ALGO_PULL] = pull;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 512, L);
    CHECK_STEP(s[1], 512, N); /* pull lost at 128 and 512: a guard, not made by the no-ops */
    CHECK_STEP(s[2], 2048, SYMM_ALGO_PULL);
    const double ncclWins0[] = {0.03, 0.03, 7, 7, 17};
    t.nccl = ncclWins0;
    CHECK_EQ_INT(build(&t, 0.03, s, SYMM_TUNE_MAX_STEPS), 3);
    CHECK_STEP(s[0], 512, L);
    const size_t allZero[] = {0, 0};
    struct tuneTimes none = {.n = 2, .sizes = allZero, .nccl = nccl};
    none.ours[SYMM_ALGO_PULL] = pull;
    CHECK_EQ_INT(build(&none, 0.03, s, SYMM_TUNE_MAX_STEPS), 0);
  }
  double v[] = {3, 1, 2, 9};
  CHECK(tuneMedian(v, 3) == 2);
  double w[] = {4, 1, 3, 2};
  CHECK(tuneMedian(w, 4) == 2.5);
  CHECK(tuneMedian(w, 0) == 0);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* The row answers, at every measured size, in every gap and beyond the sweep, NCCL or an
 * algorithm that won at that size (in a gap: at the size above it), for every set of kernels
 * of ours the run time may have available; ncclplain, in half the runs, is always available. */
static void testRandom(void) {
  const enum symmAlgo algos[4] = {L, O, T, NP};
  for (int iter = 0; iter < 3000; iter++) {
    const size_t n = 1 + rnd(30);
    const int measured = iter % 2 ? 4 : 3; /* with windows: ncclplain too */
    size_t sizes[32];
    double nccl[32], t4[4][32];
    for (size_t i = 0; i < n; i++) {
      sizes[i] = (i ? sizes[i - 1] : 0) + 1 + rnd(1000);
      nccl[i] = rnd(20) == 0 ? -1 : 10;
      for (int a = 0; a < 4; a++) t4[a][i] = rnd(6) == 0 ? -1 : 5 + rnd(100) / 10.0;
    }
    struct tuneTimes t = {.n = n, .sizes = sizes, .nccl = nccl};
    for (int a = 0; a < measured; a++) t.ours[algos[a]] = t4[a];
    const double margin = rnd(2) ? 0.03 : 0.0;
    struct symmTuneRow row = {.coll = SYMM_COLL_ALLREDUCE};
    row.nsteps = build(&t, margin, row.steps, iter % 3 == 0 ? 4 : SYMM_TUNE_MAX_STEPS);
    CHECK(row.nsteps <= SYMM_TUNE_MAX_STEPS);
    for (unsigned mask = 0; mask < 8; mask++) {
      unsigned avail = 1u << N | 1u << NP;
      for (int a = 0; a < 3; a++)
        if (mask >> a & 1u) avail |= 1u << algos[a];
      for (size_t i = 0; i < n; i++) {
        const size_t probes[2] = {sizes[i], i ? sizes[i - 1] + 1 : 0}; /* the size, its gap */
        for (int p = 0; p < 2; p++) {
          const enum symmAlgo a = symmTuneRowPick(&row, probes[p], avail);
          if (a != N && !tuneWins(&t, a, i, margin)) {
            CHECK(!"ours where it did not win");
            fprintf(stderr, "  iter %d size %zu: %s\n", iter, probes[p], symmAlgoName(a));
          }
        }
      }
      CHECK_EQ_INT(symmTuneRowPick(&row, sizes[n - 1] + 1, avail), N);
    }
  }
}

int main(void) {
  testExamples();
  testRandom();
  return harnessReport("test_tune_logic");
}
