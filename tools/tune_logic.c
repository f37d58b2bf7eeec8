/* SPDX-License-Identifier: Apache-2.0 */
/* symmcoll-tune's decisions: which algorithm wins each measured size, and the row steps that
 * say so without claiming anything between or beyond the measurements that they do not show. */
#include <stdlib.h>

#include "tune.h"

static int cmpDouble(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

double tuneMedian(double* v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof(double), cmpDouble);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int tuneWins(const struct tuneTimes* t, enum symmAlgo algo, size_t i, double margin) {
  if (algo == SYMM_ALGO_NCCL || (unsigned)algo >= SYMM_NALGOS || t->ours[algo] == NULL) return 0;
  const double ours = t->ours[algo][i], nccl = t->nccl[i];
  return ours > 0 && nccl > 0 && ours <= (1.0 - margin) * nccl;
}

/* A size of 0 bytes times a call that moves nothing (the library hands count 0 to NCCL before
 * any choice): no algorithm wins or loses there, so it neither picks a step nor guards one. */
static int movesData(const struct tuneTimes* t, size_t i) { return t->sizes[i] > 0; }

void tuneChoose(const struct tuneTimes* t, double margin, enum symmAlgo* choice) {
  for (size_t i = 0; i < t->n; i++) {
    enum symmAlgo best = SYMM_ALGO_NCCL;
    for (int a = SYMM_ALGO_NCCL + 1; a < SYMM_NALGOS; a++)
      if (tuneWins(t, (enum symmAlgo)a, i, margin) &&
          (best == SYMM_ALGO_NCCL || t->ours[a][i] < t->ours[best][i]))
        best = (enum symmAlgo)a;
    choice[i] = best;
  }
  /* Sizes that move nothing: their winner is noise between no-ops and would only add a step
   * (pull<=0, or an NCCL step up to the next size). They take the choice of the first size that
   * moved data. */
  size_t firstData = 0;
  while (firstData < t->n && !movesData(t, firstData)) firstData++;
  for (size_t i = 0; i < firstData; i++)
    choice[i] = firstData < t->n ? choice[firstData] : SYMM_ALGO_NCCL;
}

/* Runs of equal choices: run r covers sizes [first[r], last[r]]. */
struct runs {
  size_t count;
  size_t* first;
  size_t* last;
};

static int push(struct symmTuneStep* steps, int n, int maxSteps, size_t upTo, enum symmAlgo a) {
  if (n < maxSteps) steps[n] = (struct symmTuneStep){.upTo = upTo, .algo = a};
  return n + 1;
}

int tuneSteps(const struct tuneTimes* t, double margin, const enum symmAlgo* choice,
              struct symmTuneStep* steps, int maxSteps) {
  if (t->n == 0) return 0;
  struct runs r = {0, calloc(t->n, sizeof(size_t)), calloc(t->n, sizeof(size_t))};
  if (r.first == NULL || r.last == NULL) {
    free(r.first);
    free(r.last);
    return 0; /* no steps: NCCL everywhere, the safe answer */
  }
  for (size_t i = 0; i < t->n; i++) {
    if (i == 0 || choice[i] != choice[i - 1]) r.first[r.count++] = i;
    r.last[r.count - 1] = i;
  }
  int n = 0;
  for (size_t k = 0; k < r.count; k++) {
    const enum symmAlgo a = choice[r.first[k]];
    const int lastRun = k + 1 == r.count;
    if (a == SYMM_ALGO_NCCL) {
      if (!lastRun) n = push(steps, n, maxSteps, t->sizes[r.first[k + 1]] - 1, SYMM_ALGO_NCCL);
      continue;
    }
    n = push(steps, n, maxSteps, t->sizes[r.last[k]], a);
    /* If `a` cannot run a call of this run's sizes, the later steps up to the next NCCL run are
     * tried in turn: each of their algorithms must have won at every size of this run. The
     * real NCCL given windows' aliases (ncclplain) runs every call NCCL runs: no guard. */
    int guard = 0;
    for (size_t j = k + 1; j < r.count && !guard && !symmAlgoForwards(a); j++) {
      const enum symmAlgo b = choice[r.first[j]];
      if (b == SYMM_ALGO_NCCL) break;
      for (size_t i = r.first[k]; i <= r.last[k] && !guard; i++)
        guard = movesData(t, i) && !tuneWins(t, b, i, margin);
    }
    if (guard) n = push(steps, n, maxSteps, t->sizes[r.last[k]], SYMM_ALGO_NCCL);
  }
  free(r.first);
  free(r.last);
  return n < maxSteps ? n : maxSteps;
}
