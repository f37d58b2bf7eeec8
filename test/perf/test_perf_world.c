/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in launcher (-P) and the rank world: forked processes x threads meet in barriers,
 * reduce (sum, min, max, first), broadcast and gather correctly; a failing child is reported
 * and its siblings are stopped instead of waiting forever. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "harness.h"
#include "world.h"

enum { PROCS = 3, THREADS = 2, ROUNDS = 50 };

struct worker {
  struct perfWorld* w;
  int thread, bad;
};

static void* work(void* arg) {
  struct worker* k = arg;
  struct perfWorld* w = k->w;
  int n = PROCS * THREADS;
  for (int round = 0; round < ROUNDS; round++) {
    double mine = w->proc * 10 + k->thread + round;
    double sum = mine, mn = mine, mx = mine, first = mine;
    if (perfAllreduce(w, k->thread, &sum, PERF_RED_SUM) != 0) k->bad++;
    if (perfAllreduce(w, k->thread, &mn, PERF_RED_MIN) != 0) k->bad++;
    if (perfAllreduce(w, k->thread, &mx, PERF_RED_MAX) != 0) k->bad++;
    if (perfAllreduce(w, k->thread, &first, PERF_RED_FIRST) != 0) k->bad++;
    /* sum over p, t of (10p + t + round) */
    double want = 10.0 * THREADS * (PROCS * (PROCS - 1) / 2) + PROCS * (THREADS * (THREADS - 1) / 2) + n * round;
    if (sum != want) k->bad++;
    if (mn != round) k->bad++;
    if (mx != 10.0 * (PROCS - 1) + (THREADS - 1) + round) k->bad++;
    if (first != round) k->bad++; /* thread 0 of process 0 */
    if (perfBarrier(w, k->thread) != 0) k->bad++;
  }
  return NULL;
}

/* Runs in each child: the exit code says how many things went wrong (0: all good). */
static int child(struct perfWorld* w) {
  struct worker k[THREADS];
  pthread_t tid[THREADS];
  for (int t = 0; t < THREADS; t++) {
    k[t] = (struct worker){.w = w, .thread = t, .bad = 0};
    if (t) pthread_create(&tid[t], NULL, work, &k[t]);
  }
  work(&k[0]);
  int bad = k[0].bad;
  for (int t = 1; t < THREADS; t++) {
    pthread_join(tid[t], NULL);
    bad += k[t].bad;
  }
  /* broadcast from process 0, gather at process 0 */
  char id[128];
  memset(id, w->proc == 0 ? 'x' : 0, sizeof(id));
  if (w->ops->bcast(w->impl, id, sizeof(id)) != 0) bad++;
  for (size_t i = 0; i < sizeof(id); i++)
    if (id[i] != 'x') {
      bad++;
      break;
    }
  int mine = 100 + w->proc, all[PROCS] = {0};
  if (w->ops->gather(w->impl, &mine, all, sizeof(int)) != 0) bad++;
  if (w->proc == 0)
    for (int p = 0; p < PROCS; p++)
      if (all[p] != 100 + p) bad++;
  if (w->nProcs != PROCS || w->localRank != w->proc) bad++;
  perfWorldFinalize(w);
  return bad > 100 ? 100 : bad;
}

int main(void) {
  struct perfWorld w;
  int isParent = 0, code = -1;
  fflush(stdout);
  CHECK_EQ_INT(perfWorldInitForked(&w, THREADS, PROCS, &isParent, &code), 0);
  if (!isParent) _exit(child(&w));
  CHECK_EQ_INT(code, 0);

  /* one child fails early (before a barrier); the launcher stops the others and reports it */
  int rc = perfWorldInitForked(&w, 1, PROCS, &isParent, &code);
  if (!isParent) {
    if (w.proc == 1) _exit(PERF_EXIT_FAILURE);
    perfBarrier(&w, 0); /* would wait forever for process 1 */
    _exit(0);
  }
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(code, PERF_EXIT_FAILURE);

  /* bad sizes are refused without forking */
  CHECK(perfWorldInitForked(&w, 1, 0, &isParent, &code) != 0);
  CHECK(perfWorldInitForked(&w, 1, 1000, &isParent, &code) != 0);

  /* one process, several threads */
  CHECK_EQ_INT(perfWorldInitSingle(&w, 1), 0);
  double v = 5;
  CHECK_EQ_INT(perfAllreduce(&w, 0, &v, PERF_RED_SUM), 0);
  CHECK(v == 5);
  perfWorldAbort(&w);
  CHECK(perfWorldAborted(&w));
  CHECK(perfBarrier(&w, 0) != 0); /* an aborted world does not wait */
  perfWorldFinalize(&w);
  return harnessReport("test_perf_world");
}
