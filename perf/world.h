/* SPDX-License-Identifier: Apache-2.0 */
/* The ranks of a perf run: threads of this process, and processes (forked by -P, or MPI). One
 * barrier and one all-reduce over all of them, plus the few exchanges the driver needs. */
#ifndef PERF_WORLD_H
#define PERF_WORLD_H

#include <pthread.h>
#include <stddef.h>

/* How processes talk; one const table per launch mode. */
struct perfProcOps {
  const char* name;
  int (*barrier)(void* impl);
  /* In place over processes; mode: enum perfReduceMode. Same result on every process. */
  int (*allreduce)(void* impl, double* value, int mode);
  int (*bcast)(void* impl, void* data, size_t bytes); /* from process 0 */
  /* Process 0 receives every process's `bytes` (rank order) into `all`. */
  int (*gather)(void* impl, const void* mine, void* all, size_t bytes);
  void (*finalize)(void* impl);
};

enum perfReduceMode { PERF_RED_SUM = 0, PERF_RED_MIN, PERF_RED_MAX, PERF_RED_FIRST };

struct perfWorld {
  int nProcs, proc, localRank;
  int nThreads;
  const struct perfProcOps* ops;
  void* impl;
  /* thread-level barrier and reduction */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int arrived;
  unsigned generation;
  int aborted; /* a thread failed: barriers return an error instead of waiting forever */
  double acc, result;
  int accSet;
};

/* A world of one process. */
int perfWorldInitSingle(struct perfWorld* w, int nThreads);
/* Forks nProcs children sharing memory; returns in each child (proc set) with 0, and in the
 * parent only after all children ended, with *isParent = 1 and *exitCode their worst status. */
int perfWorldInitForked(struct perfWorld* w, int nThreads, int nProcs, int* isParent, int* exitCode);
/* MPI (only in builds with PERF_HAVE_MPI; otherwise returns an error). */
int perfWorldInitMpi(struct perfWorld* w, int nThreads, int* argc, char*** argv);
void perfWorldFinalize(struct perfWorld* w);

/* Every thread of every process calls these, in the same order. */
int perfBarrier(struct perfWorld* w, int thread);
int perfAllreduce(struct perfWorld* w, int thread, double* value, int mode);
/* Marks the world failed (wakes threads waiting in perfBarrier). */
void perfWorldAbort(struct perfWorld* w);
int perfWorldAborted(struct perfWorld* w);

#endif
