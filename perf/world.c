/* SPDX-License-Identifier: Apache-2.0 */
/* Barriers and reductions over the perf run's threads and processes: one process, processes
 * forked by the built-in launcher (shared anonymous memory), or MPI. */
#define _GNU_SOURCE
#include "world.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef PERF_HAVE_MPI
#include <mpi.h>
#endif

#include "common.h"

static double combine(double a, double b, int mode) {
  switch (mode) {
    case PERF_RED_MIN: return b < a ? b : a;
    case PERF_RED_MAX: return b > a ? b : a;
    case PERF_RED_FIRST: return a;
    default: return a + b;
  }
}

/* ---- one process ---------------------------------------------------------------------- */
static int singleBarrier(void* impl) { (void)impl; return 0; }
static int singleAllreduce(void* impl, double* v, int mode) { (void)impl; (void)v; (void)mode; return 0; }
static int singleBcast(void* impl, void* d, size_t n) { (void)impl; (void)d; (void)n; return 0; }
static int singleGather(void* impl, const void* mine, void* all, size_t n) {
  (void)impl;
  memcpy(all, mine, n);
  return 0;
}
static void singleFinalize(void* impl) { (void)impl; }
static const struct perfProcOps singleOps = {.name = "single",
                                             .barrier = singleBarrier,
                                             .allreduce = singleAllreduce,
                                             .bcast = singleBcast,
                                             .gather = singleGather,
                                             .finalize = singleFinalize};

static int initThreads(struct perfWorld* w, int nThreads) {
  memset(w, 0, sizeof(*w));
  w->nThreads = nThreads;
  w->nProcs = 1;
  if (pthread_mutex_init(&w->lock, NULL) != 0) return -1;
  if (pthread_cond_init(&w->cond, NULL) != 0) {
    pthread_mutex_destroy(&w->lock);
    return -1;
  }
  return 0;
}

int perfWorldInitSingle(struct perfWorld* w, int nThreads) {
  if (initThreads(w, nThreads) != 0) return -1;
  w->ops = &singleOps;
  return 0;
}

/* ---- processes forked by -P: shared anonymous memory ------------------------------------ */
#define PERF_SHM_MAX_PROCS 64
#define PERF_SHM_SLOT 16384

struct perfShm {
  pthread_barrier_t barrier;
  int nProcs;
  double values[PERF_SHM_MAX_PROCS];
  unsigned char data[PERF_SHM_MAX_PROCS][PERF_SHM_SLOT];
};
struct perfShmImpl {
  struct perfShm* shm;
  int proc;
};

static int shmBarrier(void* impl) {
  struct perfShmImpl* s = impl;
  int rc = pthread_barrier_wait(&s->shm->barrier);
  return rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : -1;
}
static int shmAllreduce(void* impl, double* v, int mode) {
  struct perfShmImpl* s = impl;
  s->shm->values[s->proc] = *v;
  if (shmBarrier(impl)) return -1;
  double acc = s->shm->values[0];
  for (int p = 1; p < s->shm->nProcs; p++) acc = combine(acc, s->shm->values[p], mode);
  *v = acc; /* every process combines in the same order: identical results */
  return shmBarrier(impl);
}
static int shmBcast(void* impl, void* data, size_t n) {
  struct perfShmImpl* s = impl;
  if (n > PERF_SHM_SLOT) return -1;
  if (s->proc == 0) memcpy(s->shm->data[0], data, n);
  if (shmBarrier(impl)) return -1;
  if (s->proc != 0) memcpy(data, s->shm->data[0], n);
  return shmBarrier(impl);
}
static int shmGather(void* impl, const void* mine, void* all, size_t n) {
  struct perfShmImpl* s = impl;
  if (n > PERF_SHM_SLOT) return -1;
  memcpy(s->shm->data[s->proc], mine, n);
  if (shmBarrier(impl)) return -1;
  if (s->proc == 0)
    for (int p = 0; p < s->shm->nProcs; p++) memcpy((char*)all + (size_t)p * n, s->shm->data[p], n);
  return shmBarrier(impl);
}
static void shmFinalize(void* impl) {
  struct perfShmImpl* s = impl;
  munmap(s->shm, sizeof(*s->shm));
  free(s);
}
static const struct perfProcOps shmOps = {.name = "fork",
                                          .barrier = shmBarrier,
                                          .allreduce = shmAllreduce,
                                          .bcast = shmBcast,
                                          .gather = shmGather,
                                          .finalize = shmFinalize};

/* Waits for all children; on the first failure, stops the others (they would wait forever in a
 * barrier for the dead one). Returns the worst exit code. */
static int reapChildren(const pid_t* pids, int n) {
  int remaining = n, worst = 0, killed = 0;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "perf launcher: waitpid failed: %s\n", strerror(errno));
      return PERF_EXIT_FAILURE;
    }
    int idx = -1;
    for (int i = 0; i < n; i++)
      if (pids[i] == pid) idx = i;
    if (idx < 0) continue;
    remaining--;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : PERF_EXIT_FAILURE;
    if (WIFSIGNALED(status) && !killed)
      fprintf(stderr, "perf launcher: process %d (pid %d) killed by signal %d\n", idx, (int)pid, WTERMSIG(status));
    if (code != 0 && worst == 0) worst = code;
    if (code != 0 && !killed && code != PERF_EXIT_WRONG) {
      if (remaining > 0) fprintf(stderr, "perf launcher: process %d failed (exit %d), stopping the others\n", idx, code);
      for (int i = 0; i < n; i++)
        if (i != idx) kill(pids[i], SIGTERM); /* only our own children */
      killed = 1;
    }
  }
  return worst;
}

int perfWorldInitForked(struct perfWorld* w, int nThreads, int nProcs, int* isParent, int* exitCode) {
  *isParent = 0;
  *exitCode = 0;
  if (nProcs < 1 || nProcs > PERF_SHM_MAX_PROCS) {
    fprintf(stderr, "perf launcher: -P must be between 1 and %d\n", PERF_SHM_MAX_PROCS);
    return -1;
  }
  struct perfShm* shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) {
    fprintf(stderr, "perf launcher: mmap of shared memory failed: %s\n", strerror(errno));
    return -1;
  }
  pthread_barrierattr_t attr;
  int ok = pthread_barrierattr_init(&attr) == 0;
  ok = ok && pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) == 0;
  ok = ok && pthread_barrier_init(&shm->barrier, &attr, (unsigned)nProcs) == 0;
  pthread_barrierattr_destroy(&attr);
  if (!ok) {
    fprintf(stderr, "perf launcher: cannot create a process-shared barrier\n");
    goto unmap_shm;
  }
  shm->nProcs = nProcs;

  pid_t* pids = calloc((size_t)nProcs, sizeof(pid_t));
  if (pids == NULL) goto destroy_barrier;
  fflush(stdout);
  fflush(stderr);
  for (int p = 0; p < nProcs; p++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "perf launcher: fork failed: %s\n", strerror(errno));
      for (int i = 0; i < p; i++) kill(pids[i], SIGTERM);
      (void)reapChildren(pids, p);
      free(pids);
      goto unmap_shm; /* killed children may still count as barrier waiters */
    }
    if (pid == 0) { /* child: becomes rank group p */
      free(pids);
      struct perfShmImpl* impl = malloc(sizeof(*impl));
      if (impl == NULL || initThreads(w, nThreads) != 0) _exit(PERF_EXIT_FAILURE);
      impl->shm = shm;
      impl->proc = p;
      w->ops = &shmOps;
      w->impl = impl;
      w->nProcs = nProcs;
      w->proc = p;
      w->localRank = p;
      return 0;
    }
    pids[p] = pid;
  }
  *isParent = 1;
  *exitCode = reapChildren(pids, nProcs);
  free(pids);
  /* No pthread_barrier_destroy: it would wait for the waiters of children we had to kill. The
   * barrier holds no resources beyond the mapping. */
  munmap(shm, sizeof(*shm));
  return 0;

destroy_barrier:
  pthread_barrier_destroy(&shm->barrier);
unmap_shm:
  munmap(shm, sizeof(*shm));
  return -1;
}

/* ---- MPI ------------------------------------------------------------------------------ */
#ifdef PERF_HAVE_MPI
struct perfMpiImpl {
  MPI_Comm comm;
};
static int mpiBarrier(void* impl) { return MPI_Barrier(((struct perfMpiImpl*)impl)->comm) == MPI_SUCCESS ? 0 : -1; }
static int mpiAllreduce(void* impl, double* v, int mode) {
  MPI_Comm comm = ((struct perfMpiImpl*)impl)->comm;
  if (mode == PERF_RED_FIRST) return MPI_Bcast(v, 1, MPI_DOUBLE, 0, comm) == MPI_SUCCESS ? 0 : -1;
  MPI_Op op = mode == PERF_RED_MIN ? MPI_MIN : mode == PERF_RED_MAX ? MPI_MAX : MPI_SUM;
  return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, op, comm) == MPI_SUCCESS ? 0 : -1;
}
static int mpiBcast(void* impl, void* data, size_t n) {
  return MPI_Bcast(data, (int)n, MPI_BYTE, 0, ((struct perfMpiImpl*)impl)->comm) == MPI_SUCCESS ? 0 : -1;
}
static int mpiGather(void* impl, const void* mine, void* all, size_t n) {
  return MPI_Gather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, 0, ((struct perfMpiImpl*)impl)->comm) ==
                 MPI_SUCCESS
             ? 0
             : -1;
}
static void mpiFinalize(void* impl) {
  free(impl);
  MPI_Finalize();
}
static const struct perfProcOps mpiOps = {.name = "mpi",
                                          .barrier = mpiBarrier,
                                          .allreduce = mpiAllreduce,
                                          .bcast = mpiBcast,
                                          .gather = mpiGather,
                                          .finalize = mpiFinalize};

int perfWorldInitMpi(struct perfWorld* w, int nThreads, int* argc, char*** argv) {
  int provided = 0;
  /* One thread at a time talks to MPI (the last to reach a rendezvous). */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "MPI_Init_thread failed\n");
    return -1;
  }
  struct perfMpiImpl* impl = malloc(sizeof(*impl));
  if (impl == NULL || initThreads(w, nThreads) != 0) {
    free(impl);
    MPI_Finalize();
    return -1;
  }
  impl->comm = MPI_COMM_WORLD;
  MPI_Comm_size(MPI_COMM_WORLD, &w->nProcs);
  MPI_Comm_rank(MPI_COMM_WORLD, &w->proc);
  /* Local rank: our index among the processes sharing this node. */
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->proc, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &w->localRank);
    MPI_Comm_free(&node);
  }
  w->ops = &mpiOps;
  w->impl = impl;
  return 0;
}
#else
int perfWorldInitMpi(struct perfWorld* w, int nThreads, int* argc, char*** argv) {
  (void)w;
  (void)nThreads;
  (void)argc;
  (void)argv;
  fprintf(stderr, "this build has no MPI support (meson setup -Dmpi=enabled)\n");
  return -1;
}
#endif

void perfWorldFinalize(struct perfWorld* w) {
  if (w->ops) w->ops->finalize(w->impl);
  pthread_cond_destroy(&w->cond);
  pthread_mutex_destroy(&w->lock);
}

/* ---- threads x processes -------------------------------------------------------------- */
void perfWorldAbort(struct perfWorld* w) {
  pthread_mutex_lock(&w->lock);
  w->aborted = 1;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

int perfWorldAborted(struct perfWorld* w) {
  pthread_mutex_lock(&w->lock);
  int a = w->aborted;
  pthread_mutex_unlock(&w->lock);
  return a;
}

/* All threads arrive; the last one runs `crossProcess` (if any) before releasing the others. */
static int threadRendezvous(struct perfWorld* w, int (*crossProcess)(struct perfWorld*)) {
  int rc = 0;
  pthread_mutex_lock(&w->lock);
  unsigned gen = w->generation;
  if (++w->arrived == w->nThreads) {
    if (!w->aborted && crossProcess) {
      pthread_mutex_unlock(&w->lock); /* may block on other processes */
      rc = crossProcess(w);
      pthread_mutex_lock(&w->lock);
      if (rc) w->aborted = 1;
    }
    w->arrived = 0;
    w->generation++;
    pthread_cond_broadcast(&w->cond);
  } else {
    while (gen == w->generation && !w->aborted) pthread_cond_wait(&w->cond, &w->lock);
  }
  if (w->aborted) rc = -1;
  pthread_mutex_unlock(&w->lock);
  return rc;
}

static int crossBarrier(struct perfWorld* w) { return w->ops->barrier(w->impl); }

int perfBarrier(struct perfWorld* w, int thread) {
  (void)thread;
  return threadRendezvous(w, w->nProcs > 1 ? crossBarrier : NULL);
}

static int reduceMode; /* only touched by the last-arriving thread, under the rendezvous */
static int crossAllreduce(struct perfWorld* w) {
  double v = w->acc;
  int rc = w->nProcs > 1 ? w->ops->allreduce(w->impl, &v, reduceMode) : 0;
  w->result = v;
  w->accSet = 0;
  return rc;
}

int perfAllreduce(struct perfWorld* w, int thread, double* value, int mode) {
  pthread_mutex_lock(&w->lock);
  if (mode == PERF_RED_FIRST) {
    if (thread == 0) w->acc = *value;
  } else if (!w->accSet) {
    w->acc = *value;
    w->accSet = 1;
  } else {
    w->acc = combine(w->acc, *value, mode);
  }
  reduceMode = mode;
  pthread_mutex_unlock(&w->lock);
  if (threadRendezvous(w, crossAllreduce) != 0) return -1;
  pthread_mutex_lock(&w->lock);
  *value = w->result;
  pthread_mutex_unlock(&w->lock);
  /* a second rendezvous, so nobody starts the next reduction before all have read this one */
  return threadRendezvous(w, NULL);
}
