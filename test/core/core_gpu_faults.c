/* SPDX-License-Identifier: Apache-2.0 */
/* test_core_gpu's failures: a late rank, an injected kernel error, aborts from another thread
 * (during a stream of calls, while first calls build staging, while copy-engine all-gathers
 * wait), calls queued behind one that gave up, each with its limits on draining and what must
 * come back. */
#include "core_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a late rank: NCCL waits, so do we (no deadline, nobody forwards, no error) ---------- */
void lateRank(struct rank* r) {
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
void faultRank(struct rank* r) {
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

void ceAbortRank(struct rank* r) {
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

/* ---- calls queued behind a call that gave up -----------------------------------------------
 * Ranks 0..N-2 each issue a call A that waits for rank N-1 (which does not call yet), then, behind
 * a gate (a host function), GU_QUEUED more calls with poisoned outputs; a graph of one call,
 * captured by every rank before, is replayed on them after the abort. They abort while A waits: A
 * gives up and publishes no epoch. Then rank N-1, which does not abort, issues GU_PEER_CALLS
 * calls; its kernels signal the epochs A used and the next one (one-shot and Lamport: its first
 * call meets A, whose data had arrived before A gave up, and its second waits; two-shot: its first
 * call waits for A's middle barrier). Then the gates open.
 * Without the gave-up word (localState, sync.cuh) the first queued call starts with A's epoch,
 * which rank N-1 has signalled: its first wait passes at once, before any poll of the abort flag,
 * and it writes its output (one-shot: it finds rank N-1's start signal of its second call; Lamport:
 * rank N-1's lines of its first call and the other aborted rank's of A; two-shot: rank N-1's start
 * signal of its first call). The next queued call then meets rank N-1's second call, whose output
 * comes out wrong, silently. So this test fails without the fix at the first queued call's
 * output, and (very likely) at the graph's and at rank N-1's second call, which completes. With
 * it, every queued call and the replay leave before they store anything: every output keeps its
 * poison, and rank N-1's second call is still waiting when the others are done, as it would in
 * NCCL; rank N-1 then aborts too, which ends it. Bounded: the gates open after at most 60 s, the
 * streams must drain within 10 s. */
#define GU_COUNT ((size_t)4096)        /* floats per call */
#define GU_QUEUED 4                    /* calls queued behind A on an aborting rank */
#define GU_PEER_CALLS (GU_QUEUED + 2)  /* calls of rank N-1, which does not abort */
#define GU_GRAPH_SLOT (GU_PEER_CALLS + 1) /* output slots: A 0, queued 1..GU_QUEUED, graph */
#define GU_POISON 0xA5

static int gaveUpGate[8];

/* Holds its stream until the test opens the gate; at most 60 s, so that a broken run fails rather
 * than holding the stream forever. No CUDA call in here (a host function must not make any). */
static void CUDART_CB gaveUpGateWait(void* arg) {
  const int* open = arg;
  const double t0 = nowMs();
  while (!__atomic_load_n(open, __ATOMIC_ACQUIRE) && nowMs() - t0 < 60000) sleepMs(1);
}

static float* gaveUpOut(struct rank* r, int slot) { return r->out + (size_t)slot * GU_COUNT; }

/* Floats of an output slot that lost their poison (s1 idle). */
static int gaveUpWritten(struct rank* r, int slot) {
  CUDA_OK(cudaMemcpyAsync(r->host, gaveUpOut(r, slot), GU_COUNT * sizeof(float),
                          cudaMemcpyDeviceToHost, r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s1));
  const unsigned char* bytes = (const unsigned char*)r->host;
  int written = 0;
  for (size_t i = 0; i < GU_COUNT; i++) {
    int poisoned = 1;
    for (size_t b = 0; b < sizeof(float); b++)
      poisoned &= bytes[i * sizeof(float) + b] == GU_POISON;
    written += !poisoned;
  }
  return written;
}

void gaveUpRank(struct rank* r) {
  const int aborts = r->rank != nranks - 1;
  __atomic_store_n(&gaveUpGate[r->rank], 0, __ATOMIC_RELEASE);
  for (int k = 0; k < 2; k++) checkedAllReduce(r, GU_COUNT, k); /* staging built, in step */
  fill(r, r->in, GU_COUNT, 5, r->s1);
  CUDA_OK(cudaMemsetAsync(r->out, GU_POISON, (GU_GRAPH_SLOT + 1) * GU_COUNT * sizeof(float),
                          r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s1));
  /* The graph, captured by every rank (ranks capture the same calls) while nothing failed; uploaded
   * now, so that nothing waits on the device while the gates hold the streams. */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(r->s2, cudaStreamCaptureModeThreadLocal));
  TCHECK_EQ_INT(allReduce(r, r->in, gaveUpOut(r, GU_GRAPH_SLOT), GU_COUNT, r->s2), ncclSuccess);
  CUDA_OK(cudaStreamEndCapture(r->s2, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphUpload(exec, r->s2));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  const uint64_t before = ours(r->comm);
  pthread_barrier_wait(&barrier);
  double abortMs = 0;
  if (aborts) {
    /* A waits for rank N-1; the gate holds the queued calls until rank N-1 has signalled. */
    TCHECK_EQ_INT(allReduce(r, r->in, gaveUpOut(r, 0), GU_COUNT, r->s1), ncclSuccess);
    CUDA_OK(cudaLaunchHostFunc(r->s1, gaveUpGateWait, &gaveUpGate[r->rank]));
    for (int j = 1; j <= GU_QUEUED; j++)
      TCHECK_EQ_INT(allReduce(r, r->in, gaveUpOut(r, j), GU_COUNT, r->s1), ncclSuccess);
    TCHECK_EQ_INT(ours(r->comm), before + 1 + GU_QUEUED); /* every one ours */
    sleepMs(100);
    TCHECK_EQ_INT(cudaStreamQuery(r->s1), cudaErrorNotReady); /* A waits */
    (void)cudaGetLastError();
    const double t0 = nowMs();
    /* Its teardown waits up to 2 s for the gated calls, then leaves them to the releaser. */
    TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
    abortMs = nowMs() - t0;
    r->comm = NULL;
  }
  pthread_barrier_wait(&barrier); /* every abort returned: A gave up */
  cudaEvent_t done[GU_PEER_CALLS];
  if (!aborts) {
    for (int j = 0; j < GU_PEER_CALLS; j++) {
      CUDA_OK(cudaEventCreateWithFlags(&done[j], cudaEventDisableTiming));
      TCHECK_EQ_INT(allReduce(r, r->in, gaveUpOut(r, j), GU_COUNT, r->s1), ncclSuccess);
      CUDA_OK(cudaEventRecord(done[j], r->s1));
    }
    sleepMs(300); /* its kernels signal all they can */
  }
  pthread_barrier_wait(&barrier);
  if (aborts) {
    __atomic_store_n(&gaveUpGate[r->rank], 1, __ATOMIC_RELEASE);
    const double drained = drainMs(r->s1, nowMs(), 30000);
    TCHECK(drained >= 0 && drained < 10000);
    /* The graph replayed after the abort (its reference keeps our memory). */
    const double t1 = nowMs();
    CUDA_OK(cudaGraphLaunch(exec, r->s1));
    const double replayed = drainMs(r->s1, t1, 30000);
    TCHECK(replayed >= 0 && replayed < 10000);
    int written[GU_QUEUED + 2];
    written[0] = gaveUpWritten(r, 0);
    for (int j = 1; j <= GU_QUEUED; j++) written[j] = gaveUpWritten(r, j);
    written[GU_QUEUED + 1] = gaveUpWritten(r, GU_GRAPH_SLOT);
    for (int j = 0; j < GU_QUEUED + 2; j++) {
      TCHECK_EQ_INT(written[j], 0);
      if (written[j] != 0)
        fprintf(stderr, "rank %d: %s %d wrote %d of its %zu outputs\n", r->rank,
                j == 0 ? "the call that gave up" : j <= GU_QUEUED ? "queued call" : "graph replay",
                j, written[j], GU_COUNT);
    }
    if (r->rank == 0)
      printf("gave-up: abort took %.0f ms; %d queued calls drained %.1f ms after the gate opened, "
             "the replay %.1f ms\n", abortMs, GU_QUEUED, drained, replayed);
  }
  pthread_barrier_wait(&barrier); /* the aborted ranks are done */
  if (!aborts) {
    /* Nothing met its second call (one-shot, Lamport: its first met A; two-shot: it waits). */
    const cudaError_t second = cudaEventQuery(done[1]);
    TCHECK_EQ_INT(second, cudaErrorNotReady);
    if (second != cudaErrorNotReady)
      fprintf(stderr, "rank %d, which did not abort: its second call completed\n", r->rank);
    (void)cudaGetLastError();
    /* It would wait forever, as with NCCL: its abort ends it. */
    const double t0 = nowMs();
    TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
    r->comm = NULL;
    const double ms = drainMs(r->s1, t0, 30000);
    TCHECK(ms >= 0 && ms < 10000);
    for (int j = 0; j < GU_PEER_CALLS; j++) CUDA_OK(cudaEventDestroy(done[j]));
  }
  pthread_barrier_wait(&barrier);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
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

void abortSetupRank(struct rank* r) {
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

void* abortSetupHelper(void* arg) {
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

/* Abort cycles: each a fresh world; fds, mappings, GPU memory and entries back where they were. */
void runAbortCycles(void) {
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
