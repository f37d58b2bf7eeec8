/* SPDX-License-Identifier: Apache-2.0 */
/* symmcoll-tune: from measured times to a tuning-file row (pure logic, tested on the CPU). */
#ifndef PERF_TUNE_H
#define PERF_TUNE_H

#include <stddef.h>

#include "tune_table.h"

/* The medians of one sweep of one collective and element size: NCCL's time and each of our
 * algorithms' per size; a time <= 0 means not measured there (does not fit, failed, wrong). */
struct tuneTimes {
  size_t n;
  const size_t* sizes; /* ascending, bytes as nccl-tests reports them */
  const double* nccl;
  /* NULL: not measured at all; [SYMM_ALGO_NCCL] unused; [SYMM_ALGO_NCCLPLAIN]: the real NCCL
   * given windows' aliases (measured with windows only), a candidate like ours. */
  const double* ours[SYMM_NALGOS];
};

/* 1 when `algo` took at most (1 - margin) x NCCL's time at size i (NCCL measured there too). */
int tuneWins(const struct tuneTimes* t, enum symmAlgo algo, size_t i, double margin);

/* Per size, our fastest algorithm where it wins by the margin, else SYMM_ALGO_NCCL; sizes of 0
 * bytes (no-ops) take the choice of the first size that moved data. */
void tuneChoose(const struct tuneTimes* t, double margin, enum symmAlgo* choice);

/* The row's steps for those choices: each run of one algorithm of ours up to its last measured
 * size (the gap to the next size belongs to the next run unless that is NCCL's), NCCL for
 * NCCL's runs and above the largest size, and an `nccl<=` guard after a run wherever an
 * algorithm of a later step (which takes the run's sizes when the run's algorithm cannot run a
 * call) did not win at every size of the run; none after a run of ncclplain, which runs every
 * call. Returns the number of steps; more than maxSteps
 * are cut at maxSteps (what is cut forwards, which is always safe). */
int tuneSteps(const struct tuneTimes* t, double margin, const enum symmAlgo* choice,
              struct symmTuneStep* steps, int maxSteps);

/* Median of v[0..n) (sorts v); 0 when n == 0. */
double tuneMedian(double* v, size_t n);

#endif
