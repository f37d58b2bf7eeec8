/* SPDX-License-Identifier: Apache-2.0 */
/* GPU tests of the host path through the test bootstrap (ranks are threads; SYMMCOLL_NCCL_LIB
 * names test/bootstrap/libnccl.so.2): a late rank, an injected kernel error, two streams with
 * eager calls and graph replays (streams-eager: no graph, its calls issued eagerly), abort from
 * a watchdog thread, groups, non-blocking communicators and their splits, a shrink with
 * NCCL_SHRINK_ABORT, an agreed knob that differs, a mixed soak, and repeated identical calls.
 * Exits 77 without a GPU.
 *   test_core_gpu late N DELAY_MS | fault N | streams[-eager] N ITERS | abort N CYCLES |
 *                 abort-setup[-norevoke] N | group N | split N | shrink N (N >= 3) |
 *                 nonblocking N | mismatch N | soak N CALLS | cta-zero N | ce-abort N |
 *                 cta-efficiency N | max-ctas N | repeat N CALLS */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algos.h"
#include "comm.h"
#include "debug.h"
#include "forward.h"
#include "harness.h"
#include "watchdog.h"
#include "nccl_api.h"
#include "param.h"
#include "transport.h"
#include "vmm.h"

#define TCHECK(cond) HARNESS_TCHECK(cond)
#define TCHECK_EQ_INT(a, b) HARNESS_TCHECK_EQ_INT(a, b)
#define CUDA_OK(x) TCHECK_EQ_INT((x), cudaSuccess)

static int ndev, nranks;
static long param; /* the mode's number: delay, iterations, cycles, calls */
static ncclUniqueId uid;
static pthread_barrier_t barrier;

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleepMs(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
  nanosleep(&ts, NULL);
}

struct rank {
  int rank;
  ncclComm_t comm;
  cudaStream_t s1, s2;
  float *in, *out, *host;
};

/* A counter of comm's entry (the offset of a uint64_t field of struct symmComm), 0 when the
 * communicator is not ours. */
static uint64_t entryCounter(ncclComm_t comm, size_t field) {
  struct symmComm* c = symmCommFind(comm);
  return c != NULL ? __atomic_load_n((uint64_t*)((char*)c + field), __ATOMIC_RELAXED) : 0;
}
/* Launches of ours on `comm` so far; of those, replays of a recorded launch and zero copy. */
#define ours(comm) entryCounter(comm, offsetof(struct symmComm, launches))
#define replays(comm) entryCounter(comm, offsetof(struct symmComm, replays))
#define zeroCopies(comm) entryCounter(comm, offsetof(struct symmComm, zeroCopyLaunches))

/* Non-blocking calls: wait out ncclInProgress. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t res) {
  for (double t0 = nowMs(); res == ncclInProgress && nowMs() - t0 < 600000;) {
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclSystemError;
    res = state;
    if (res == ncclInProgress) sched_yield();
  }
  return res;
}

#define MAX_COUNT (1u << 20)
static float pattern(int rank, size_t i, int salt) { return (float)((rank + 1) * (int)((i + (size_t)salt) % 13 + 1)); }
/* The sum of pattern() over n ranks. */
static float expectedOf(size_t i, int salt, int n) {
  return (float)(n * (n + 1) / 2 * (int)((i + (size_t)salt) % 13 + 1));
}
static float expected(size_t i, int salt) { return expectedOf(i, salt, nranks); }

static void fill(struct rank* r, float* dev, size_t count, int salt, cudaStream_t s) {
  for (size_t i = 0; i < count; i++) r->host[i] = pattern(r->rank, i, salt);
  CUDA_OK(cudaMemcpyAsync(dev, r->host, count * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

/* Wrong elements among `count` floats at dev (synchronized): expected(i, salt) for a sum,
 * else pattern(root, i, salt) for a broadcast from `root`. */
static int wrongAt(struct rank* r, const float* dev, size_t count, int salt, int root) {
  CUDA_OK(cudaMemcpy(r->host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += r->host[i] != (root < 0 ? expected(i, salt) : pattern(root, i, salt));
  return wrong;
}

/* Wrong elements of an all-reduce output (stream synchronized). */
static int wrongSum(struct rank* r, const float* dev, size_t count, int salt, cudaStream_t s) {
  CUDA_OK(cudaStreamSynchronize(s));
  return wrongAt(r, dev, count, salt, -1);
}

static ncclResult_t allReduce(struct rank* r, const float* in, float* out, size_t count, cudaStream_t s) {
  return ncclAllReduce(in, out, count, ncclFloat32, ncclSum, r->comm, s);
}

/* One all-gather of `each` floats per rank on stream s, checked (stream synchronized). */
static void checkedAllGather(struct rank* r, size_t each, int salt, cudaStream_t s) {
  fill(r, r->in, each, salt, s);
  TCHECK_EQ_INT(ncclAllGather(r->in, r->out, each, ncclFloat32, r->comm, s), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(s));
  int wrong = 0;
  for (int q = 0; q < nranks; q++) wrong += wrongAt(r, r->out + (size_t)q * each, each, salt, q);
  TCHECK_EQ_INT(wrong, 0);
}

/* One checked all-reduce on stream s1. */
static void checkedAllReduce(struct rank* r, size_t count, int salt) {
  fill(r, r->in, count, salt, r->s1);
  TCHECK_EQ_INT(settle(r->comm, allReduce(r, r->in, r->out, count, r->s1)), ncclSuccess);
  TCHECK_EQ_INT(wrongSum(r, r->out, count, salt, r->s1), 0);
}

static int ctaPolicy, maxCTAs;
static int openRank(struct rank* r, int blocking) {
  CUDA_OK(cudaSetDevice(r->rank % ndev));
  ncclResult_t res;
  if (blocking && (ctaPolicy != NCCL_CTA_POLICY_DEFAULT || maxCTAs != NCCL_CONFIG_UNDEF_INT)) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.CTAPolicy = ctaPolicy;
    config.maxCTAs = maxCTAs;
    res = ncclCommInitRankConfig(&r->comm, nranks, uid, r->rank, &config);
  } else if (blocking) {
    res = ncclCommInitRank(&r->comm, nranks, uid, r->rank);
  } else {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    res = ncclCommInitRankConfig(&r->comm, nranks, uid, r->rank, &config);
    /* Our setup runs in the background: ncclInProgress until it is done. */
    if (res == ncclInProgress || res == ncclSuccess) res = settle(r->comm, ncclInProgress);
  }
  TCHECK_EQ_INT(res, ncclSuccess);
  if (res != ncclSuccess) return 0;
  CUDA_OK(cudaStreamCreateWithFlags(&r->s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&r->s2, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&r->in, MAX_COUNT * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&r->out, MAX_COUNT * sizeof(float)));
  r->host = malloc(MAX_COUNT * sizeof(float));
  return r->host != NULL;
}

static void closeRank(struct rank* r, int destroy) {
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  pthread_barrier_wait(&barrier);
  if (destroy) TCHECK_EQ_INT(settle(r->comm, ncclCommDestroy(r->comm)), ncclSuccess);
  CUDA_OK(cudaStreamDestroy(r->s1));
  CUDA_OK(cudaStreamDestroy(r->s2));
  CUDA_OK(cudaFree(r->in));
  CUDA_OK(cudaFree(r->out));
  free(r->host);
}

/* ---- a late rank: NCCL waits, so do we (no deadline, nobody forwards, no error) ---------- */
static void lateRank(struct rank* r) {
  const int late = r->rank == nranks - 1;
  if (late) sleepMs((double)param); /* late at the first call given to us (staging) */
  for (int k = 0; k < 20; k++) {
    if (late && k == 10) sleepMs((double)param); /* late while peers' kernels wait */
    checkedAllReduce(r, 256u << (k % 5), k);
  }
  TCHECK_EQ_INT(ours(r->comm), 20);
  ncclResult_t state = ncclSystemError;
  TCHECK_EQ_INT(ncclCommGetAsyncError(r->comm, &state), ncclSuccess);
  TCHECK_EQ_INT(state, ncclSuccess);
}

/* ---- an injected kernel error on one rank (SYMMCOLL_TEST_FAIL_RANK/CALL) ------------------- */
static void faultRank(struct rank* r) {
  fill(r, r->in, 256, 0, r->s1);
  uint64_t succeeded = 0;
  for (int k = 0; k < 10; k++) {
    ncclResult_t res = allReduce(r, r->in, r->out, 256, r->s1);
    TCHECK(res == ncclSuccess || res == ncclRemoteError);
    if (k <= 3) TCHECK_EQ_INT(res, ncclSuccess);
    succeeded += res == ncclSuccess;
  }
  /* Every rank learns it through ncclCommGetAsyncError; none forwarded or launched after. */
  ncclResult_t state = ncclSuccess;
  for (double t0 = nowMs(); state == ncclSuccess && nowMs() - t0 < 10000;) {
    TCHECK_EQ_INT(ncclCommGetAsyncError(r->comm, &state), ncclSuccess);
    if (state == ncclSuccess) sleepMs(1);
  }
  TCHECK_EQ_INT(state, ncclRemoteError);
  /* Every call that was accepted launched ours (none forwarded), the host may have run ahead of
   * the failing kernel by a few calls. */
  const uint64_t launched = ours(r->comm);
  TCHECK_EQ_INT(launched, succeeded);
  TCHECK_EQ_INT(allReduce(r, r->in, r->out, 256, r->s1), ncclRemoteError);
  TCHECK_EQ_INT(ncclBroadcast(r->in, r->out, 256, ncclFloat32, 0, r->comm, r->s1), ncclRemoteError);
  TCHECK_EQ_INT(ours(r->comm), launched);
  pthread_barrier_wait(&barrier);
  /* Abort drains within 2 s; then a new communicator works. */
  const double t0 = nowMs();
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  const double took = nowMs() - t0;
  TCHECK(took < 2000);
  if (took >= 2000) fprintf(stderr, "rank %d: abort and drain took %.0f ms\n", r->rank, took);
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) TCHECK_EQ_INT(ncclGetUniqueId(&uid), ncclSuccess);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommInitRank(&r->comm, nranks, uid, r->rank), ncclSuccess);
  for (int k = 0; k < 3; k++) checkedAllReduce(r, 1024, k); /* below the failing call */
  TCHECK_EQ_INT(ours(r->comm), 3);
}

/* ---- two streams, eager calls and graph replays interleaved -------------------------------- */
#define EAGER_SLOTS 7
#define GRAPH_OPS 4
#define SLOT_COUNT 1024
/* 0 (streams-eager): nothing captured; the graph's calls are issued eagerly on s2 instead. */
static int streamsReplay = 1;

/* The GRAPH_OPS calls of the second stream: one replay, or the same calls issued eagerly. */
static void secondStreamCalls(struct rank* r, cudaGraphExec_t exec, float* gIn, float* gOut) {
  if (streamsReplay) {
    CUDA_OK(cudaGraphLaunch(exec, r->s2));
    return;
  }
  for (int j = 0; j < GRAPH_OPS; j++)
    TCHECK_EQ_INT(allReduce(r, gIn + j * SLOT_COUNT, gOut + j * SLOT_COUNT, SLOT_COUNT, r->s2),
                  ncclSuccess);
}

static void streamsRank(struct rank* r) {
  float* eIn = r->in;                            /* EAGER_SLOTS + GRAPH_OPS input slots */
  float* eOut = r->out;
  float* gIn = r->in + EAGER_SLOTS * SLOT_COUNT;
  float* gOut = r->out + EAGER_SLOTS * SLOT_COUNT;
  for (int k = 0; k < EAGER_SLOTS + GRAPH_OPS; k++) fill(r, r->in + k * SLOT_COUNT, SLOT_COUNT, k, r->s1);
  /* Staging first: a capture cannot build it. */
  TCHECK_EQ_INT(allReduce(r, eIn, eOut, SLOT_COUNT, r->s1), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (streamsReplay) {
    CUDA_OK(cudaStreamBeginCapture(r->s2, cudaStreamCaptureModeThreadLocal));
    for (int j = 0; j < GRAPH_OPS; j++)
      TCHECK_EQ_INT(allReduce(r, gIn + j * SLOT_COUNT, gOut + j * SLOT_COUNT, SLOT_COUNT, r->s2),
                    ncclSuccess);
    CUDA_OK(cudaStreamEndCapture(r->s2, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    /* Uploaded before the ranks replay at once: without it, cudaGraphLaunch sometimes blocked
     * every rank thread of the process in the driver (test/core/README.md, "Graph uploads"). */
    CUDA_OK(cudaGraphUpload(exec, r->s2));
    CUDA_OK(cudaStreamSynchronize(r->s2));
  }
  long done = 0, wrong = 0;
  for (long it = 0; done < param; it++) {
    const int slot = (int)(it % EAGER_SLOTS);
    TCHECK_EQ_INT(allReduce(r, eIn + slot * SLOT_COUNT, eOut + slot * SLOT_COUNT, SLOT_COUNT, r->s1),
                  ncclSuccess);
    done++;
    if (it % 3 == 1) {
      secondStreamCalls(r, exec, gIn, gOut);
      done += GRAPH_OPS;
    }
    if (it % 100 == 99 || done >= param) {
      CUDA_OK(cudaStreamSynchronize(r->s1));
      CUDA_OK(cudaStreamSynchronize(r->s2));
      for (int k = 0; k < EAGER_SLOTS; k++) wrong += wrongSum(r, eOut + k * SLOT_COUNT, SLOT_COUNT, k, r->s1);
      for (int j = 0; j < GRAPH_OPS; j++)
        wrong += wrongSum(r, gOut + j * SLOT_COUNT, SLOT_COUNT, EAGER_SLOTS + j, r->s2);
      /* Outputs back to garbage, so a call that did not run shows. */
      CUDA_OK(cudaMemsetAsync(eOut, 0xff, EAGER_SLOTS * SLOT_COUNT * sizeof(float), r->s1));
      CUDA_OK(cudaMemsetAsync(gOut, 0xff, GRAPH_OPS * SLOT_COUNT * sizeof(float), r->s2));
      CUDA_OK(cudaStreamSynchronize(r->s1));
      CUDA_OK(cudaStreamSynchronize(r->s2));
      /* Nobody launches again while a peer still copies its outputs back: a rank thread ahead
       * by two replays blocks in cudaGraphLaunch behind its first one, which waits on the GPU
       * for that peer, while holding the driver lock the peer's copy needs (ranks sharing one
       * process only; test/core/README.md, "Graph uploads"). */
      pthread_barrier_wait(&barrier);
      /* Every slot is written again before the next check only if it ran; eager slots cycle. */
      for (int k = 0; k < EAGER_SLOTS; k++)
        TCHECK_EQ_INT(allReduce(r, eIn + k * SLOT_COUNT, eOut + k * SLOT_COUNT, SLOT_COUNT, r->s1),
                      ncclSuccess);
      secondStreamCalls(r, exec, gIn, gOut);
      done += EAGER_SLOTS + GRAPH_OPS;
    }
  }
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  TCHECK_EQ_INT(wrong, 0);
  if (r->rank == 0) printf("streams: %ld calls per rank (eager and graph), %ld wrong\n", done, wrong);
  if (exec != NULL) CUDA_OK(cudaGraphExecDestroy(exec));
  if (graph != NULL) CUDA_OK(cudaGraphDestroy(graph));
}

/* ---- groups: simulate, then a normal call; a failing GroupEnd (bootstrap knob) ------------- */
typedef int (*failGroupEndsFn)(int count);
static void groupRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1); /* staging */
  const uint64_t before = ours(r->comm);
  CUDA_OK(cudaMemset(r->out, 0, 1024 * sizeof(float)));
  fill(r, r->in, 1024, 2, r->s1);
  TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  TCHECK_EQ_INT(ncclGroupSimulateEnd(&sim), ncclSuccess);
  TCHECK_EQ_INT(ours(r->comm), before);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, r->out, sizeof(float), cudaMemcpyDeviceToHost));
  TCHECK(r->host[0] == 0.0f); /* nothing ran */
  checkedAllReduce(r, 1024, 3); /* not deferred any more */
  TCHECK_EQ_INT(ours(r->comm), before + 1);
  /* A failing GroupEnd drops our operations; every rank then reports the failure. */
  failGroupEndsFn failGroupEnds = NULL;
  *(void**)&failGroupEnds = dlsym(symmReal.handle, "symmTestBootstrapFailGroupEnds");
  if (failGroupEnds == NULL) {
    if (r->rank == 0) printf("group: the bootstrap cannot fail ncclGroupEnd; that case is skipped\n");
    return;
  }
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) failGroupEnds(nranks);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
  TCHECK(ncclGroupEnd() != ncclSuccess);
  TCHECK_EQ_INT(ours(r->comm), before + 1);
  ncclResult_t state = ncclSuccess;
  for (double t0 = nowMs(); state == ncclSuccess && nowMs() - t0 < 10000;) {
    TCHECK_EQ_INT(ncclCommGetAsyncError(r->comm, &state), ncclSuccess);
    if (state == ncclSuccess) sleepMs(1);
  }
  TCHECK(state != ncclSuccess);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  r->comm = NULL;
}

/* ---- non-blocking: NCCL's group launches first, ours after it; never a blocking first call -- */
static void nonBlockingRank(struct rank* r) {
  /* The first call given to us forwards, staging follows in the background. */
  checkedAllReduce(r, 1024, 1);
  checkedAllReduce(r, 1024, 2);
  TCHECK(ours(r->comm) >= 1);
  for (int k = 0; k < 50; k++) {
    fill(r, r->in, 4096, k, r->s1);
    TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
    TCHECK_EQ_INT(ncclBroadcast(r->in, r->out + 4096, 4096, ncclFloat32, k % nranks, r->comm, r->s1),
                  ncclSuccess);
    ncclResult_t res = allReduce(r, r->in, r->out, 4096, r->s1);
    TCHECK(res == ncclSuccess || res == ncclInProgress);
    TCHECK_EQ_INT(settle(r->comm, ncclGroupEnd()), ncclSuccess);
    TCHECK_EQ_INT(wrongSum(r, r->out, 4096, k, r->s1), 0);
    TCHECK_EQ_INT(wrongAt(r, r->out + 4096, 4096, k, k % nranks), 0);
  }
}

/* ---- a child communicator of n ranks: checked all-reduces, ours ---------------------------- */
static void childCalls(struct rank* r, ncclComm_t child, int n) {
  struct rank c = *r;
  c.comm = child;
  TCHECK_EQ_INT(ncclCommUserRank(child, &c.rank), ncclSuccess);
  for (int k = 0; k < 8; k++) {
    const size_t count = (size_t)256 << (k % 5);
    fill(&c, c.in, count, k, c.s1);
    TCHECK_EQ_INT(settle(child, allReduce(&c, c.in, c.out, count, c.s1)), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(c.s1));
    CUDA_OK(cudaMemcpy(c.host, c.out, count * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += c.host[i] != expectedOf(i, k, n);
    TCHECK_EQ_INT(wrong, 0);
  }
  /* The first call given to our kernels may forward (non-blocking: staging follows it). */
  TCHECK(ours(child) >= 7);
}

/* ---- a non-blocking split: the child is ours on every rank -------------------------------------
 * The bootstrap's non-blocking split stores the child before it returns on the rank that
 * completes the rendezvous and later, from a thread, on the others (NCCL's init thread may be
 * either). Every rank must register the child once the parent is done, whatever it saw at the
 * return (before: only the quick rank did, and its setup waited for peers that never came). The
 * child's ranks are the parent's in reverse. */
static void splitRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1);
  ncclComm_t child = NULL;
  const ncclResult_t res = ncclCommSplit(r->comm, 0, nranks - 1 - r->rank, &child, NULL);
  TCHECK(res == ncclInProgress || res == ncclSuccess);
  /* The parent's state says when the split is done; the child is handed over by then. */
  TCHECK_EQ_INT(settle(r->comm, ncclInProgress), ncclSuccess);
  child = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
  TCHECK(child != NULL);
  if (child == NULL) return;
  TCHECK(symmCommFind(child) != NULL);
  TCHECK_EQ_INT(settle(child, ncclInProgress), ncclSuccess); /* its own setup, in the background */
  int childRank = -1;
  TCHECK_EQ_INT(ncclCommUserRank(child, &childRank), ncclSuccess);
  TCHECK_EQ_INT(childRank, nranks - 1 - r->rank);
  childCalls(r, child, nranks);
  checkedAllReduce(r, 2048, 2); /* the parent still works */
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(settle(child, ncclCommDestroy(child)), ncclSuccess);
}

/* ---- shrink with NCCL_SHRINK_ABORT while kernels of ours wait for a rank that stopped ---------
 * Rank N-1 stops taking part; the others' all-reduce of ours waits for it on the GPU. They
 * shrink it away with NCCL_SHRINK_ABORT: the call returns and their streams drain within 5 s
 * (before: our abort flag was never raised, the kernels spun forever); the parent's memory of
 * ours is gone (every later call forwards, on every survivor); the child works with our kernels.
 * Then every rank aborts the parent. */
static void shrinkRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1); /* staging, on every rank */
  const int gone = nranks - 1;
  pthread_barrier_wait(&barrier);
  if (r->rank != gone) {
    fill(r, r->in, 1024, 2, r->s1);
    TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
    sleepMs(300);
    TCHECK_EQ_INT(cudaStreamQuery(r->s1), cudaErrorNotReady); /* waiting for rank N-1 */
    (void)cudaGetLastError();
    const double t0 = nowMs();
    int exclude[1] = {gone};
    ncclComm_t child = NULL;
    TCHECK_EQ_INT(ncclCommShrink(r->comm, exclude, 1, &child, NULL, NCCL_SHRINK_ABORT), ncclSuccess);
    const double shrinkMs = nowMs() - t0;
    cudaError_t e = cudaErrorNotReady;
    while (e == cudaErrorNotReady && nowMs() - t0 < 10000) {
      e = cudaStreamQuery(r->s1);
      if (e == cudaErrorNotReady) sleepMs(1);
    }
    const double drainedMs = nowMs() - t0;
    TCHECK_EQ_INT(e, cudaSuccess);
    TCHECK(shrinkMs < 5000 && drainedMs < 5000);
    TCHECK(symmTransportPeers(symmCommFind(r->comm)) == NULL);
    if (r->rank == 0)
      printf("shrink: returned %.1f ms, stream drained %.1f ms after NCCL_SHRINK_ABORT began\n",
             shrinkMs, drainedMs);
    TCHECK(child != NULL);
    if (e == cudaSuccess && child != NULL) {
      childCalls(r, child, nranks - 1);
      TCHECK_EQ_INT(ncclCommDestroy(child), ncclSuccess);
    }
  }
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  r->comm = NULL;
}

/* ---- ncclConfig_t: CTA policy and grid bounds ------------------------------------------- */
static void ctaRank(struct rank* r) {
  for (int k = 0; k < 10; k++) checkedAllReduce(r, 256u << (k % 4), k);
  /* NCCL_CTA_POLICY_ZERO: no SM kernel of ours (there is no copy-engine all-reduce): every
   * all-reduce forwards, and every all-gather, whatever its size, runs on the copy engines;
   * otherwise ours, within the grid bounds. */
  if (ctaPolicy & NCCL_CTA_POLICY_ZERO) {
    TCHECK_EQ_INT(ours(r->comm), 0);
    static const size_t each[10] = {1, 3, 17, 255, 1000, 4099, 16384, 32771, 65537, 100000};
    for (int k = 0; k < 10; k++) checkedAllGather(r, each[k], k, r->s1);
    TCHECK_EQ_INT(ours(r->comm), 10);
  } else {
    TCHECK_EQ_INT(ours(r->comm), 10);
  }
}

/* ---- abort while copy-engine all-gathers wait for a rank that never calls -------------------
 * Stream waits cannot watch the abort flag: ncclCommAbort must release them, however many are
 * queued (CE_CALLS all-gathers of CE_ROUND_BYTES rounds: one release per round; many more fill
 * the driver's queue, and the issuing thread then blocks in cudaMemcpyAsync before it can
 * abort), and also those of a graph of copy-engine calls replayed after the abort. Every rank's stream drains; then a new communicator works. */
#define CE_CALLS 8
#define CE_EACH ((size_t)1 << 12) /* floats per rank: 4 rounds of 4 KiB per call */
#define CE_GRAPH_OPS 2

/* SYMMCOLL_CE_ROUND_BYTES for every rank (knobs are per process), set while all ranks wait. */
static void ceRoundBytes(const struct rank* r, const char* bytes) {
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) {
    if (bytes != NULL) setenv("SYMMCOLL_CE_ROUND_BYTES", bytes, 1);
    else unsetenv("SYMMCOLL_CE_ROUND_BYTES");
    symmParamResetAll();
  }
  pthread_barrier_wait(&barrier);
}

/* Polls `s` until it is idle or `limitMs` passed: the milliseconds it took, -1 if it never was. */
static double drainMs(cudaStream_t s, double t0, double limitMs) {
  cudaError_t e = cudaErrorNotReady;
  while (e == cudaErrorNotReady && nowMs() - t0 < limitMs) {
    e = cudaStreamQuery(s);
    if (e == cudaErrorNotReady) sleepMs(1);
  }
  TCHECK_EQ_INT(e, cudaSuccess);
  return e == cudaSuccess ? nowMs() - t0 : -1;
}

static void ceAbortRank(struct rank* r) {
  checkedAllGather(r, 4096, 1, r->s1);
  TCHECK_EQ_INT(ours(r->comm), 1);
  /* A graph of copy-engine all-gathers, captured now (staging exists), replayed after the abort. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(r->s2, cudaStreamCaptureModeThreadLocal));
  for (int j = 0; j < CE_GRAPH_OPS; j++)
    TCHECK_EQ_INT(ncclAllGather(r->in, r->out + (size_t)j * 4096 * nranks, 4096, ncclFloat32,
                                r->comm, r->s2), ncclSuccess);
  CUDA_OK(cudaStreamEndCapture(r->s2, &graph));
  TCHECK_EQ_INT(ours(r->comm), 1 + CE_GRAPH_OPS);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  /* Uploaded before ranks replay at once (test/core/README.md, "Graph uploads"). */
  CUDA_OK(cudaGraphUpload(exec, r->s2));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  ceRoundBytes(r, "4096");
  const int caller = r->rank != nranks - 1;
  if (caller)
    for (int k = 0; k < CE_CALLS; k++)
      TCHECK_EQ_INT(ncclAllGather(r->in, r->out, CE_EACH, ncclFloat32, r->comm, r->s1), ncclSuccess);
  sleepMs(300);
  if (caller) TCHECK_EQ_INT(cudaStreamQuery(r->s1), cudaErrorNotReady); /* stalled in a wait */
  (void)cudaGetLastError();
  pthread_barrier_wait(&barrier);
  const double t0 = nowMs();
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  r->comm = NULL;
  const double aborted = nowMs() - t0;
  const double ms = drainMs(r->s1, t0, 30000);
  TCHECK(ms >= 0 && ms < 10000);
  pthread_barrier_wait(&barrier);
  /* After the abort: the graph's waits for rank N-1 (which does not replay) are released too. */
  double replayMs = 0;
  if (caller) {
    const double t1 = nowMs();
    for (int k = 0; k < 3; k++) CUDA_OK(cudaGraphLaunch(exec, r->s2));
    replayMs = drainMs(r->s2, t1, 30000);
    TCHECK(replayMs >= 0 && replayMs < 10000);
  }
  pthread_barrier_wait(&barrier);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  ceRoundBytes(r, NULL);
  if (r->rank == 0)
    printf("ce-abort: %d queued all-gathers: abort returned in %.1f ms, stream drained %.1f ms "
           "after it began; 3 replays of a graph after the abort drained in %.1f ms\n",
           CE_CALLS, aborted, ms, replayMs);
}

/* ---- a setting differs between ranks: every rank forwards, right ---------------------------
 * SYMMCOLL_TEST_KNOB_SKEW_RANK's record reports another value of what SYMMCOLL_TEST_SKEW_WHAT
 * names (an agreed knob by default; maxCTAs, minCTAs, CTAPolicy, disable, maxRanks): ranks that
 * are threads of one process share their environment. */

/* One reduce-scatter of `each` floats per rank into a poisoned output, checked. */
static void checkedReduceScatter(struct rank* r, size_t each, int salt) {
  fill(r, r->in, each * (size_t)nranks, salt, r->s1);
  CUDA_OK(cudaMemsetAsync(r->out, 0xff, each * sizeof(float), r->s1));
  TCHECK_EQ_INT(ncclReduceScatter(r->in, r->out, each, ncclFloat32, ncclSum, r->comm, r->s1),
                ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, r->out, each * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (size_t i = 0; i < each; i++) wrong += r->host[i] != expected((size_t)r->rank * each + i, salt);
  TCHECK_EQ_INT(wrong, 0);
}

static void mismatchRank(struct rank* r) {
  struct symmComm* entry = symmCommFind(r->comm);
  TCHECK(entry != NULL && entry->setupDone && entry->transport == NULL);
  static const size_t counts[] = {1, 7, 1023, 4099, 65537, 1000003};
  for (int k = 0; k < 6; k++) {
    CUDA_OK(cudaMemsetAsync(r->out, 0xff, MAX_COUNT * sizeof(float), r->s1));
    checkedAllReduce(r, counts[k], k);
    const size_t each = counts[k] / (size_t)nranks > 0 ? counts[k] / (size_t)nranks : 1;
    CUDA_OK(cudaMemsetAsync(r->out, 0xff, MAX_COUNT * sizeof(float), r->s1));
    checkedAllGather(r, each, k, r->s1);
    checkedReduceScatter(r, each, k);
  }
  TCHECK_EQ_INT(ours(r->comm), 0);
}

/* ---- repeated identical calls: launched again as recorded, decided again after a change ---- */

/* SYMMCOLL_ALLREDUCE_ALGO for every rank (knobs are per process), set while all ranks wait. */
static void forceAlgo(const struct rank* r, const char* algo) {
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) {
    setenv("SYMMCOLL_ALLREDUCE_ALGO", algo, 1);
    symmParamResetAll();
  }
  pthread_barrier_wait(&barrier);
}

/* The same all-reduce call every time, on fresh inputs and a poisoned output, checked; all
 * ranks are done with it before anybody's next one. */
static void sameCall(struct rank* r, float* in, float* out, size_t count, int salt) {
  fill(r, in, count, salt, r->s1);
  if (out != in) CUDA_OK(cudaMemsetAsync(out, 0xff, count * sizeof(float), r->s1));
  TCHECK_EQ_INT(allReduce(r, in, out, count, r->s1), ncclSuccess);
  TCHECK_EQ_INT(wrongSum(r, out, count, salt, r->s1), 0);
  pthread_barrier_wait(&barrier);
}

/* Run with SYMMCOLL_ALLREDUCE_ALGO=lamport. Calls identical to an earlier one replay its launch;
 * a knob or a window that changes in between must make them decide again. */
static void repeatRank(struct rank* r) {
  const size_t count = 256; /* 1 KiB */
  for (int inPlace = 0; inPlace <= 1; inPlace++) {
    const uint64_t launched = ours(r->comm), replayed = replays(r->comm);
    for (long i = 0; i < param; i++) sameCall(r, r->in, inPlace ? r->in : r->out, count, (int)i);
    TCHECK_EQ_INT((long)(ours(r->comm) - launched), param);
    /* The first call builds staging, the next one is recorded, the rest replay. */
    TCHECK((long)(replays(r->comm) - replayed) >= param - 2);
  }
  /* A knob: forwarded, then ours again. */
  uint64_t launched = ours(r->comm);
  forceAlgo(r, "nccl");
  sameCall(r, r->in, r->out, count, 1);
  TCHECK_EQ_INT((int)(ours(r->comm) - launched), 0);
  forceAlgo(r, "lamport");
  sameCall(r, r->in, r->out, count, 2);
  TCHECK_EQ_INT((int)(ours(r->comm) - launched), 1);
  /* A window under the input: the two-shot reads it in place (up to 4 MiB), and stops when the
   * window goes. */
  forceAlgo(r, "twoshot");
  const size_t big = 65536;
  void* buf = NULL;
  ncclWindow_t win = NULL;
  TCHECK_EQ_INT(ncclMemAlloc(&buf, 2 * big * sizeof(float)), ncclSuccess);
  if (buf == NULL) return;
  float *in = buf, *out = in + big;
  const uint64_t zeroCopied = zeroCopies(r->comm);
  for (int i = 0; i < 2; i++) sameCall(r, in, out, big, 3 + i);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 0);
  TCHECK_EQ_INT(ncclCommWindowRegister(r->comm, buf, 2 * big * sizeof(float), &win,
                                       NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  for (int i = 0; i < 2; i++) sameCall(r, in, out, big, 5 + i);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 2);
  TCHECK_EQ_INT(ncclCommWindowDeregister(r->comm, win), ncclSuccess);
  sameCall(r, in, out, big, 7);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 2);
  TCHECK_EQ_INT(ncclMemFree(buf), ncclSuccess);
  forceAlgo(r, "lamport");
}

/* ---- soak: ours and forwarded calls, same and other streams -------------------------------- */

/* Elements per rank of the soak's all-gathers of about `count` in all (at least 1). */
static size_t perRank(size_t count) {
  return count / (size_t)nranks > 0 ? count / (size_t)nranks : 1;
}

/* Four calls issued on two streams with nothing synchronized in between: all-reduce (ours) on
 * s1, broadcast (forwarded; the test bootstrap runs it synchronously) on s2, all-gather on s1,
 * all-reduce on s2; then every output checked. Our ordering across streams must hold. */
static void soakBurst(struct rank* r, size_t count, int salt, int root) {
  fill(r, r->in, count, salt, r->s1);
  const size_t each = perRank(count);
  float *ar1 = r->out, *bc = ar1 + count, *ag = bc + count, *ar2 = ag + each * (size_t)nranks;
  TCHECK_EQ_INT(allReduce(r, r->in, ar1, count, r->s1), ncclSuccess);
  TCHECK_EQ_INT(ncclBroadcast(r->in, bc, count, ncclFloat32, root, r->comm, r->s2), ncclSuccess);
  TCHECK_EQ_INT(ncclAllGather(r->in, ag, each, ncclFloat32, r->comm, r->s1), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, ar2, count, r->s2), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  TCHECK_EQ_INT(wrongAt(r, ar1, count, salt, -1), 0);
  TCHECK_EQ_INT(wrongAt(r, bc, count, salt, root), 0);
  TCHECK_EQ_INT(wrongAt(r, ar2, count, salt, -1), 0);
  for (int q = 0; q < nranks; q++) TCHECK_EQ_INT(wrongAt(r, ag + (size_t)q * each, each, salt, q), 0);
}

static void soakRank(struct rank* r) {
  unsigned seed = 777; /* the same sequence on every rank */
  for (long k = 0; k < param; k++) {
    const unsigned pick = rand_r(&seed);
    const size_t count = (size_t)16 << (pick % 10);
    cudaStream_t s = (pick >> 8) & 1 ? r->s2 : r->s1;
    const int salt = (int)(k % 11);
    if (k % 16 == 15) {
      soakBurst(r, count, salt, (int)(k % nranks));
      continue;
    }
    fill(r, r->in, count, salt, s);
    switch ((pick >> 4) % 4) {
      case 0:
      case 1: /* usually ours */
        TCHECK_EQ_INT(allReduce(r, r->in, r->out, count, s), ncclSuccess);
        TCHECK_EQ_INT(wrongSum(r, r->out, count, salt, s), 0);
        break;
      case 2: { /* forwarded: broadcast */
        const int root = (int)(k % nranks);
        TCHECK_EQ_INT(ncclBroadcast(r->in, r->out, count, ncclFloat32, root, r->comm, s), ncclSuccess);
        CUDA_OK(cudaStreamSynchronize(s));
        TCHECK_EQ_INT(wrongAt(r, r->out, count, salt, root), 0);
        break;
      }
      default: /* all-gather: ours (the table's Lamport) or forwarded, by size */
        checkedAllGather(r, perRank(count), salt, s);
        break;
    }
  }
  TCHECK(ours(r->comm) > 0);
}

/* ---- abort from a watchdog thread during a stream of calls --------------------------------- */
struct abortShared {
  int stop;
  ncclComm_t comms[8];
  long calls[8];
};
static struct abortShared ab;

static void abortRank(struct rank* r) {
  ab.comms[r->rank] = r->comm;
  pthread_barrier_wait(&barrier);
  long k = 0;
  while (!__atomic_load_n(&ab.stop, __ATOMIC_ACQUIRE)) {
    ncclResult_t res = allReduce(r, r->in, r->out, 256, r->s1);
    TCHECK(res == ncclSuccess || res == ncclInvalidUsage || res == ncclRemoteError);
    if (++k % 50 == 0) (void)cudaStreamSynchronize(r->s1);
  }
  ab.calls[r->rank] += k;
  pthread_barrier_wait(&barrier); /* the watchdog aborts while we were in the loop */
  const double t0 = nowMs();
  (void)cudaStreamSynchronize(r->s1); /* our kernels exit on the abort flag */
  (void)cudaGetLastError();
  TCHECK(nowMs() - t0 < 2000);
  r->comm = NULL;
}

static void* watchdog(void* arg) {
  unsigned* seed = arg;
  pthread_barrier_wait(&barrier);
  sleepMs((double)(rand_r(seed) % 3000) / 1000.0);
  __atomic_store_n(&ab.stop, 1, __ATOMIC_RELEASE);
  for (int q = 0; q < nranks; q++) TCHECK_EQ_INT(ncclCommAbort(ab.comms[q]), ncclSuccess);
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier); /* the ranks' closeRank */
  return NULL;
}

/* ---- abort while first calls build staging and one rank never calls ------------------------ */
/* The first call's setup exchange waits inside the real NCCL (here the bootstrap, whose
 * collectives wait for every rank; the real NCCL connects to its peers on the host) for a rank
 * that never calls. An abort from another thread ends that wait: every caller returns and every
 * abort completes within seconds (before: the bootstrap's 300 s limit). abort-setup-norevoke:
 * the same without ncclCommRevoke (hidden from libsymmcoll), as with NCCL before 2.28. */
static double setupCallReturnedMs[8];

static void abortSetupRank(struct rank* r) {
  ab.comms[r->rank] = r->comm;
  pthread_barrier_wait(&barrier);
  if (r->rank != nranks - 1) {
    const ncclResult_t res = allReduce(r, r->in, r->out, 256, r->s1);
    TCHECK(res == ncclSuccess || res == ncclInvalidUsage || res == ncclRemoteError);
  }
  setupCallReturnedMs[r->rank] = nowMs();
  pthread_barrier_wait(&barrier); /* every abort returned */
  r->comm = NULL;
}

static void* abortSetupHelper(void* arg) {
  (void)arg;
  pthread_barrier_wait(&barrier);
  sleepMs(500); /* the callers are waiting in their first call's setup by now */
  const double t0 = nowMs();
  for (int q = 0; q < nranks; q++) TCHECK_EQ_INT(ncclCommAbort(ab.comms[q]), ncclSuccess);
  const double aborts = nowMs() - t0;
  pthread_barrier_wait(&barrier);
  double lastReturn = 0;
  for (int q = 0; q < nranks; q++)
    if (setupCallReturnedMs[q] - t0 > lastReturn) lastReturn = setupCallReturnedMs[q] - t0;
  printf("abort-setup: %d aborts took %.0f ms; the last first call returned %.0f ms after the "
         "first abort began\n", nranks, aborts, lastReturn);
  TCHECK(aborts < 5000);
  TCHECK(lastReturn < 5000);
  pthread_barrier_wait(&barrier); /* the ranks' closeRank */
  return NULL;
}

/* ---- driver --------------------------------------------------------------------------------- */
typedef void (*rankBody)(struct rank*);
static rankBody body;
static int blockingComms = 1;

/* The ranks of the running world, for the watchdog's report. */
static struct rank* liveRanks[9];

/* When a test hangs (SYMMCOLL_TEST_WATCHDOG_S): each rank's launches of ours and what its device
 * state says, read on a stream of its own (copies still run while kernels spin): the epoch and
 * block ticket, and the start/mid signal words its blocks 0 and 1 received from each writer.
 * Ranks whose epochs or signals disagree show who waits for whom. */
static void reportDeviceState(void) {
  for (int q = 0; q < nranks; q++) {
    struct rank* r = liveRanks[q];
    struct symmComm* c = r != NULL ? symmCommFind(r->comm) : NULL;
    const struct symmPeers* p = c != NULL ? symmTransportPeers(c) : NULL;
    if (p == NULL) continue;
    uint64_t state[2] = {0, 0}, sig[2][2][SYMM_MAX_RANKS];
    memset(sig, 0, sizeof(sig));
    const enum cudaMemcpyKind toHost = cudaMemcpyDeviceToHost;
    cudaStream_t s = NULL;
    int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMemcpyAsync(state, p->localState, sizeof(state), toHost, s) == cudaSuccess;
    for (int purpose = 0; purpose < 2 && ok; purpose++)
      for (int b = 0; b < 2 && ok; b++) {
        const uint64_t* words = p->signals[p->rank] + SYMM_PAD_SIGNAL_WORD(purpose, b, 0);
        const size_t bytes = (size_t)p->nranks * sizeof(uint64_t);
        ok = cudaMemcpyAsync(sig[purpose][b], words, bytes, toHost, s) == cudaSuccess;
      }
    ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
    fprintf(stderr, "rank %d: %llu launches of ours; device %s: epoch %llu, ticket %llu\n", q,
            (unsigned long long)__atomic_load_n(&c->launches, __ATOMIC_RELAXED),
            ok ? "state" : "state unreadable", (unsigned long long)state[0],
            (unsigned long long)state[1]);
    for (int purpose = 0; ok && purpose < 2; purpose++)
      for (int b = 0; b < 2; b++) {
        fprintf(stderr, "  %s signals, block %d, from writers 0..%d:", purpose ? "mid" : "start", b,
                p->nranks - 1);
        for (int w = 0; w < p->nranks; w++)
          fprintf(stderr, " %llu", (unsigned long long)sig[purpose][b][w]);
        fprintf(stderr, "\n");
      }
    if (s != NULL) (void)cudaStreamDestroy(s);
  }
}

static void* rankMain(void* arg) {
  struct rank r = {.rank = (int)(long)arg};
  if (openRank(&r, blockingComms)) {
    __atomic_store_n(&liveRanks[r.rank], &r, __ATOMIC_RELEASE);
    body(&r);
    __atomic_store_n(&liveRanks[r.rank], NULL, __ATOMIC_RELEASE);
    closeRank(&r, r.comm != NULL);
  }
  return NULL;
}

static void runWorld(rankBody b, int extraParties, void* (*extra)(void*), void* extraArg) {
  body = b;
  TCHECK_EQ_INT(ncclGetUniqueId(&uid), ncclSuccess);
  pthread_barrier_init(&barrier, NULL, (unsigned)(nranks + extraParties));
  pthread_t threads[9];
  for (long r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rankMain, (void*)r);
  if (extra != NULL) pthread_create(&threads[nranks], NULL, extra, extraArg);
  for (int r = 0; r < nranks + (extra != NULL); r++) pthread_join(threads[r], NULL);
  pthread_barrier_destroy(&barrier);
}

/* Abort cycles: each a fresh world; fds, mappings, GPU memory and entries back where they were. */
static void runAbortCycles(void) {
  size_t free0 = 0, total = 0, free1 = 0;
  int fds0 = -1;
  unsigned seed = 4242;
  for (long cycle = 0; cycle < param; cycle++) {
    ab.stop = 0;
    runWorld(abortRank, 1, watchdog, &seed);
    /* Baselines after the first cycle: CUDA and the bootstrap open what they keep for the
     * process's life then; later cycles must not add to it. */
    if (cycle == 0) {
      CUDA_OK(cudaMemGetInfo(&free0, &total));
      fds0 = harnessCountEntries("/proc/self/fd");
    }
  }
  CUDA_OK(cudaMemGetInfo(&free1, &total));
  long calls = 0;
  for (int q = 0; q < nranks; q++) calls += ab.calls[q];
  printf("abort: %ld cycles, %ld calls; free GPU memory %zu -> %zu MiB; fds %d -> %d\n", param,
         calls, free0 >> 20, free1 >> 20, fds0, harnessCountEntries("/proc/self/fd"));
  CHECK(free1 + ((size_t)256 << 20) >= free0); /* slack: the allocator's pools */
  CHECK(param < 2 || harnessCountEntries("/proc/self/fd") <= fds0 + 2);
  CHECK_EQ_INT(symmCommCount(), 0);
  CHECK_EQ_INT(symmRegistryCount(), 0);
}

int main(int argc, char** argv) {
  watchdogReport = reportDeviceState;
  watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
  harnessManyStreamsPerGpu();
  (void)symmLogLevel();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  if (argc < 3) {
    fprintf(stderr, "usage: test_core_gpu late|fault|streams|streams-eager|abort|abort-setup[-norevoke]|group|"
            "nonblocking|split|shrink|mismatch|soak|cta-zero|ce-abort|cta-efficiency|max-ctas|"
            "repeat N [number]\n");
    return 2;
  }
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("test_core_gpu: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
  maxCTAs = NCCL_CONFIG_UNDEF_INT;
  nranks = atoi(argv[2]);
  param = argc > 3 ? atol(argv[3]) : 0;
  if (nranks < 2 || nranks > 8) return 2;
  if (symmRealLoad() != ncclSuccess || dlsym(symmReal.handle, "symmTestBootstrapIsFake") == NULL) {
    fprintf(stderr, "test_core_gpu: SYMMCOLL_NCCL_LIB must name the test bootstrap\n");
    return 2;
  }
  const char* mode = argv[1];
  if (!strcmp(mode, "late")) runWorld(lateRank, 0, NULL, NULL);
  else if (!strcmp(mode, "fault")) runWorld(faultRank, 0, NULL, NULL);
  else if (!strcmp(mode, "streams")) runWorld(streamsRank, 0, NULL, NULL);
  else if (!strcmp(mode, "streams-eager")) {
    streamsReplay = 0;
    runWorld(streamsRank, 0, NULL, NULL);
  }
  else if (!strcmp(mode, "abort")) runAbortCycles();
  else if (!strcmp(mode, "abort-setup")) runWorld(abortSetupRank, 1, abortSetupHelper, NULL);
  else if (!strcmp(mode, "abort-setup-norevoke")) {
    /* As with a real NCCL older than 2.28: no ncclCommRevoke to end the blocked exchange. */
    symmReal.ncclCommRevoke = NULL;
    runWorld(abortSetupRank, 1, abortSetupHelper, NULL);
  }
  else if (!strcmp(mode, "group")) runWorld(groupRank, 0, NULL, NULL);
  else if (!strcmp(mode, "mismatch")) runWorld(mismatchRank, 0, NULL, NULL);
  else if (!strcmp(mode, "soak")) runWorld(soakRank, 0, NULL, NULL);
  else if (!strcmp(mode, "repeat")) runWorld(repeatRank, 0, NULL, NULL);
  else if (!strcmp(mode, "cta-zero")) {
    ctaPolicy = NCCL_CTA_POLICY_ZERO;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "ce-abort")) {
    ctaPolicy = NCCL_CTA_POLICY_ZERO;
    runWorld(ceAbortRank, 0, NULL, NULL);
    runWorld(ctaRank, 0, NULL, NULL); /* a new communicator works */
  } else if (!strcmp(mode, "cta-efficiency")) {
    ctaPolicy = NCCL_CTA_POLICY_EFFICIENCY;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "max-ctas")) {
    maxCTAs = 1;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "nonblocking")) {
    blockingComms = 0;
    runWorld(nonBlockingRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "split")) {
    blockingComms = 0;
    runWorld(splitRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "shrink")) {
    if (nranks < 3) return 2; /* the child needs two ranks for our kernels */
    runWorld(shrinkRank, 0, NULL, NULL);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  CHECK_EQ_INT(symmCommCount(), 0);
  return harnessReport("test_core_gpu");
}
