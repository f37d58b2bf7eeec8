/* SPDX-License-Identifier: Apache-2.0 */
/* The rank harness of the peer-memory GPU tests (test_peer_*.c): thread-safe checks, the rank
 * view, world barriers, the ways of creating ranks (threads, ncclCommInitAll, two processes,
 * non-blocking communicators) and main()'s runner (each binary passes peerMain a table of its
 * modes). Header-only, included once per test binary, so that each binary is one translation
 * unit and test/harness.h's counters count every check. */
#ifndef SYMMCOLL_TEST_PEER_COMMON_H
#define SYMMCOLL_TEST_PEER_COMMON_H

#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"
#include "eligibility.h"
#include "fdpass.h"
#include "forward.h"
#include "gpu_kernels.h"
#include "harness.h"
#include "watchdog.h"
#include "internal.h"
#include "multicast.h"
#include "param.h"
#include "procs.h"
#include "transport.h"


#define PEER_UNUSED __attribute__((unused))
#define MAX_LOCAL SYMM_MAX_RANKS
#define PING_ROUNDS 300
#define WAIT_NS (20ull * 1000 * 1000 * 1000)

/* ---- checks from several threads; counts from child processes ---------------------------- */

/* test/harness.h's thread-safe checks: the checked expression is evaluated before anything is
 * counted, as it is often a blocking call (cudaStreamSynchronize behind a spinning kernel,
 * ncclCommWindowRegister, a collective) that waits for another rank thread. checkLock keeps a
 * report of several lines in one piece. */
static pthread_mutex_t checkLock = PTHREAD_MUTEX_INITIALIZER;
#define TCHECK(cond) HARNESS_TCHECK(cond)
#define TCHECK_EQ_INT(a, b) HARNESS_TCHECK_EQ_INT(a, b)
#define CUDA_OK(call) TCHECK_EQ_INT((call), cudaSuccess)

static int ndev;
static PEER_UNUSED uint32_t runSeed;

/* ---- process resources ------------------------------------------------------------------- */

static PEER_UNUSED int countLines(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

/* Sockets of ours still listed by the kernel (abstract names show as "@symmcoll-..."). */
static PEER_UNUSED int ourSocketsListed(void) {
  FILE* f = fopen("/proc/net/unix", "r");
  if (f == NULL) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "symmcoll-")) n++;
  fclose(f);
  return n;
}

/* Waits up to 5 s for every handle server of ours (this and the other rank processes) to be
 * gone: a peer may still be finishing its setup when we look. Returns what is left. */
static PEER_UNUSED int ourSocketsLeft(void) {
  int left = ourSocketsListed();
  for (int i = 0; i < 100 && left != 0; i++) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    left = ourSocketsListed();
  }
  return left;
}

/* ---- the rank view every test works on ---------------------------------------------------- */

struct rankCtx {
  int rank, nranks, dev;
  ncclComm_t comm;
  struct symmComm* entry;
  const struct symmPeers* peers;
  cudaStream_t stream;
  struct verifyResult* vres; /* host-mapped, one per peer */
  struct pingResult* pres;   /* host-mapped */
  int* barrierWord;          /* device scratch of worldBarrier */
};

static PEER_UNUSED int usingBootstrap(void) {
  return symmRealLoad() == ncclSuccess && dlsym(symmReal.handle, "symmTestBootstrapIsFake") != NULL;
}

/* Non-blocking communicators (ncclConfig_t.blocking = 0) in runProcesses: created, polled until
 * ready (our setup runs in the background meanwhile), staged after their first all-reduce
 * (which the real NCCL runs). */
static PEER_UNUSED int nonBlockingComms;
static PEER_UNUSED void nonBlockingAllReduces(struct rankCtx* c);

/* Non-blocking communicators: waits until the last call's launch completed, at most 60 s (a
 * deadline in time, not in polls: a poll that the library answers itself takes tens of ns, and
 * the real NCCL's creation plus our setup exchange can take seconds on a fresh machine). */
#define READY_WAIT_S 60
static PEER_UNUSED ncclResult_t waitReady(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned polls = 1; state == ncclInProgress; polls++) {
    ncclResult_t res = ncclCommGetAsyncError(comm, &state);
    if (res != ncclSuccess) return res;
    if (polls % 1024 != 0) continue;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > READY_WAIT_S) {
      fprintf(stderr, "pid %d: communicator %p still ncclInProgress after %d s\n", (int)getpid(),
              (void*)comm, READY_WAIT_S);
      break;
    }
  }
  return state;
}

/* A call's result, waiting out ncclInProgress (non-blocking communicators). */
static PEER_UNUSED ncclResult_t settle(ncclComm_t comm, ncclResult_t res) {
  return res == ncclInProgress ? waitReady(comm) : res;
}

/* The same for calls NCCL may leave running in its own thread while it answers ncclSuccess (a
 * window registration on a non-blocking communicator, NCCL 2.28): the communicator is polled
 * until ready either way, as NCCL requires before its next call. */
static PEER_UNUSED ncclResult_t settleAlways(ncclComm_t comm, ncclResult_t res) {
  return res == ncclInProgress || (res == ncclSuccess && nonBlockingComms) ? waitReady(comm) : res;
}

/* Waits until every rank of the world got here with its stream drained. Uses the real NCCL
 * (SYMM_CALL_REAL), never our kernels: those could write the staging buffers under test. */
static PEER_UNUSED void worldBarrier(struct rankCtx* local, int n) {
  ncclResult_t res = ncclSuccess, r;
  /* No allocation or free here: those may synchronize a device on which a peer's kernel (of
   * another thread) already spins, waiting for a rank still inside this barrier. */
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    CUDA_OK(cudaStreamSynchronize(local[i].stream));
  }
  if (n > 1) SYMM_CALL_REAL(r, ncclGroupStart, ());
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    SYMM_CALL_REAL(r, ncclAllReduce, (local[i].barrierWord, local[i].barrierWord, 1, ncclInt32,
                                      ncclSum, local[i].comm, local[i].stream));
    if (n == 1) r = settle(local[i].comm, r);
    if (res == ncclSuccess) res = r;
  }
  if (n > 1) {
    SYMM_CALL_REAL(r, ncclGroupEnd, ());
    for (int i = 0; i < n && r == ncclInProgress; i++) r = settle(local[i].comm, r);
    if (res == ncclSuccess) res = r;
  }
  TCHECK_EQ_INT(res, ncclSuccess);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    CUDA_OK(cudaStreamSynchronize(local[i].stream));
  }
}

/* Fills in the symmetric view of a freshly created communicator; eligibility is REQUIRED. */
static PEER_UNUSED int attach(struct rankCtx* c) {
  c->entry = symmCommFind(c->comm);
  TCHECK(c->entry != NULL);
  if (c->entry == NULL) return 0;
  c->peers = symmTransportPeers(c->entry);
  if (c->peers == NULL) {
    pthread_mutex_lock(&checkLock);
    fprintf(stderr, "rank %d/%d: communicator is NOT eligible (transport NULL); run with "
            "SYMMCOLL_DEBUG=INFO for the reason\n", c->rank, c->nranks);
    TCHECK(c->peers != NULL);
    pthread_mutex_unlock(&checkLock);
    return 0;
  }
  CUDA_OK(cudaSetDevice(c->dev));
  CUDA_OK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaHostAlloc((void**)&c->vres, MAX_LOCAL * sizeof(*c->vres), cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc((void**)&c->pres, sizeof(*c->pres), cudaHostAllocMapped));
  CUDA_OK(cudaMalloc((void**)&c->barrierWord, sizeof(int)));
  CUDA_OK(cudaMemsetAsync(c->barrierWord, 0, sizeof(int), c->stream));
  CUDA_OK(cudaStreamSynchronize(c->stream));
  return c->stream != NULL && c->vres != NULL && c->pres != NULL && c->barrierWord != NULL;
}

static PEER_UNUSED void detach(struct rankCtx* c) {
  if (c->stream == NULL) return;
  CUDA_OK(cudaSetDevice(c->dev));
  CUDA_OK(cudaStreamDestroy(c->stream));
  CUDA_OK(cudaFreeHost(c->vres));
  CUDA_OK(cudaFreeHost(c->pres));
  CUDA_OK(cudaFree(c->barrierWord));
  c->stream = NULL;
}

static PEER_UNUSED void resetResults(struct rankCtx* c) {
  for (int p = 0; p < MAX_LOCAL; p++) {
    c->vres[p].mismatches = c->vres[p].nonzero = 0;
    c->vres[p].firstBad = ~0ull;
  }
  memset(c->pres, 0, sizeof(*c->pres));
}

/* ---- ways of creating ranks -------------------------------------------------------------- */

typedef void (*rankBody)(struct rankCtx* local, int n, void* arg);

struct threadArg {
  int rank, nranks;
  ncclUniqueId id;
  rankBody body;
  void* arg;
};

static PEER_UNUSED void* rankThread(void* p) {
  struct threadArg* a = p;
  struct rankCtx c = {.rank = a->rank, .nranks = a->nranks, .dev = a->rank % ndev};
  CUDA_OK(cudaSetDevice(c.dev));
  CUDA_OK(testPrewarmKernels());
  ncclResult_t res = ncclCommInitRank(&c.comm, a->nranks, a->id, a->rank);
  TCHECK_EQ_INT(res, ncclSuccess);
  if (res != ncclSuccess) return NULL;
  a->body(&c, 1, a->arg);
  TCHECK_EQ_INT(ncclCommDestroy(c.comm), ncclSuccess);
  return NULL;
}

/* Threads in this process, one rank each, rank r on device r % ndev. */
static PEER_UNUSED void runThreads(int nranks, rankBody body, void* arg) {
  struct threadArg args[MAX_LOCAL];
  pthread_t tids[MAX_LOCAL];
  ncclUniqueId id;
  TCHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct threadArg){.rank = r, .nranks = nranks, .id = id, .body = body, .arg = arg};
    TCHECK_EQ_INT(pthread_create(&tids[r], NULL, rankThread, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(tids[r], NULL);
}

/* One thread, every rank: ncclCommInitAll (nccl-tests -g style). */
static PEER_UNUSED void runInitAll(int nranks, rankBody body, void* arg) {
  ncclComm_t comms[MAX_LOCAL] = {0};
  struct rankCtx local[MAX_LOCAL];
  for (int d = 0; d < ndev; d++) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(testPrewarmKernels());
  }
  ncclResult_t res = ncclCommInitAll(comms, nranks, NULL);
  TCHECK_EQ_INT(res, ncclSuccess);
  if (res != ncclSuccess) return;
  for (int r = 0; r < nranks; r++) {
    local[r] = (struct rankCtx){.rank = r, .nranks = nranks, .comm = comms[r]};
    TCHECK_EQ_INT(ncclCommCuDevice(comms[r], &local[r].dev), ncclSuccess);
  }
  body(local, nranks, arg);
  for (int r = 0; r < nranks; r++) TCHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* Parent side of a two-process test: closes the pipes' other ends, adds each rank's check
 * counts to ours, reaps both (and, with requireCleanExit, checks that each exited 0). */
static PEER_UNUSED void collectRanks(int idPipe[2], int resultPipe[2], const pid_t pids[2], int requireCleanExit) {
  close(idPipe[0]);
  close(idPipe[1]);
  close(resultPipe[1]);
  for (int r = 0; r < 2; r++) {
    int counts[2];
    if (procsReadAll(resultPipe[0], counts, sizeof(counts)) == 0) {
      harnessChecks += counts[0];
      harnessFailures += counts[1];
    } else {
      CHECK(!"a rank process died before reporting");
    }
  }
  close(resultPipe[0]);
  for (int r = 0; r < 2; r++) {
    int status = 0;
    CHECK_EQ_INT(waitpid(pids[r], &status, 0), pids[r]);
    if (requireCleanExit) CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}


static PEER_UNUSED ncclResult_t initNonBlocking(struct rankCtx* c, ncclUniqueId id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t res = ncclCommInitRankConfig(&c->comm, c->nranks, id, c->rank, &config);
  if (res != ncclSuccess && res != ncclInProgress) return res;
  res = waitReady(c->comm);
  if (res != ncclSuccess) return res;
  /* Set up in the background (ncclInProgress until done), but staging waits for the first
   * call given to our kernels, which every rank issues alike (it forwards, then the staging
   * job runs while ncclCommGetAsyncError says ncclInProgress). */
  struct symmComm* entry = symmCommFind(c->comm);
  CHECK(entry != NULL && symmTransportPeers(entry) == NULL);
  CHECK(entry != NULL && symmTransportNeedsStaging(entry));
  int* word = NULL;
  int got = 0;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&word, sizeof(int)));
  const int one = 1;
  CUDA_OK(cudaMemcpyAsync(word, &one, sizeof(int), cudaMemcpyHostToDevice, stream));
  res = settle(c->comm, ncclAllReduce(word, word, 1, ncclInt32, ncclSum, c->comm, stream));
  CHECK_EQ_INT(res, ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(&got, word, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(got, c->nranks);
  CUDA_OK(cudaFree(word));
  CUDA_OK(cudaStreamDestroy(stream));
  CHECK(entry != NULL && symmTransportPeers(entry) != NULL);
  return res;
}

/* One in-place int32 sum of `n` elements on `comm`, checked on the host, with the device call
 * counter (localState[0]) proving it ran on our kernels, not the real NCCL. */
static PEER_UNUSED void checkOurAllReduce(ncclComm_t comm, const struct symmPeers* peers, int rank,
                              int nranks, int32_t* host, int32_t* dev, size_t n,
                              cudaStream_t stream) {
  for (size_t i = 0; i < n; i++) host[i] = (int32_t)(i * 7 % 100003) + rank;
  /* On `stream`: a pageable cudaMemcpy may return before its last bytes land, and a
   * non-blocking stream does not wait for the legacy one. */
  CUDA_OK(cudaMemcpyAsync(dev, host, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  uint32_t before = 0, after = 0;
  CUDA_OK(cudaMemcpy(&before, peers->localState, sizeof(before), cudaMemcpyDeviceToHost));
  CHECK_EQ_INT(settle(comm, ncclAllReduce(dev, dev, n, ncclInt32, ncclSum, comm, stream)),
               ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(&after, peers->localState, sizeof(after), cudaMemcpyDeviceToHost));
  CHECK(after != before);
  CUDA_OK(cudaMemcpy(host, dev, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += host[i] != (int32_t)(nranks * (i * 7 % 100003)) + nranks * (nranks - 1) / 2;
  CHECK_EQ_INT((int)bad, 0);
}

/* On a non-blocking communicator the real NCCL puts even a single call on the stream from its
 * own thread, after the call returned ncclInProgress: a broadcast we forward on `stream`, then an
 * all-reduce of ours on a second stream that reads the broadcast's last elements (written last)
 * must see them, every time. Our order mark after the forwarded call has to follow NCCL's kernel,
 * not the moment the call returned. */
static PEER_UNUSED void forwardedThenOurs(struct rankCtx* c, const struct symmPeers* peers,
                                          cudaStream_t stream) {
  const size_t big = (size_t)32 << 20, tail = 1000; /* 128 MiB of int32; 4000 bytes of ours */
  int32_t* buf = NULL;
  int32_t* sum = NULL;
  int32_t* host = malloc(tail * sizeof(int32_t));
  cudaStream_t second;
  CHECK(host != NULL);
  CUDA_OK(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&buf, big * sizeof(int32_t)));
  CUDA_OK(cudaMalloc((void**)&sum, tail * sizeof(int32_t)));
  int wrongRounds = 0;
  for (int round = 0; round < 20 && host != NULL; round++) {
    const int byte = 1 + round % 100;
    const int32_t value = (int32_t)(0x01010101u * (uint32_t)byte);
    /* Rank 0 holds the value, the others 0 until the broadcast lands. */
    CUDA_OK(cudaMemsetAsync(buf, c->rank == 0 ? byte : 0, big * sizeof(int32_t), stream));
    CUDA_OK(cudaMemsetAsync(sum, 0xff, tail * sizeof(int32_t), second));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaStreamSynchronize(second));
    uint32_t before = 0, after = 0;
    CUDA_OK(cudaMemcpy(&before, peers->localState, sizeof(before), cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(settle(c->comm, ncclBroadcast(buf, buf, big, ncclInt32, 0, c->comm, stream)),
                 ncclSuccess);
    CHECK_EQ_INT(settle(c->comm, ncclAllReduce(buf + big - tail, sum, tail, ncclInt32, ncclSum,
                                               c->comm, second)),
                 ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(second));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(&after, peers->localState, sizeof(after), cudaMemcpyDeviceToHost));
    CHECK(after != before); /* the all-reduce was ours */
    CUDA_OK(cudaMemcpy(host, sum, tail * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < tail; i++) bad += host[i] != (int32_t)((uint32_t)value * (uint32_t)c->nranks);
    wrongRounds += bad != 0;
  }
  CHECK_EQ_INT(wrongRounds, 0);
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaFree(sum));
  CUDA_OK(cudaStreamDestroy(second));
  free(host);
}

/* After the peer test (which wants untouched staging and signals): our kernels run on the
 * non-blocking communicator, each forced algorithm once (checkOurAllReduce). */
static PEER_UNUSED void nonBlockingAllReduces(struct rankCtx* c) {
  struct symmComm* entry = symmCommFind(c->comm);
  const struct symmPeers* peers = entry != NULL ? symmTransportPeers(entry) : NULL;
  CHECK(peers != NULL);
  if (peers == NULL) return;
  ncclResult_t res;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  /* The phases before wrote patterns into staging and counters into the signal pads, which our
   * kernels own: back to the state setup leaves them in (zeroed but for the pad's constant,
   * symm_peers.h), on every rank before any. */
  static const uint64_t padOne = 1;
  CUDA_OK(cudaMemset(peers->buffers[c->rank], 0, peers->bufferBytes));
  CUDA_OK(cudaMemset(peers->signals[c->rank], 0, peers->signalBytes));
  CUDA_OK(cudaMemcpy(peers->signals[c->rank] + SYMM_PAD_ONE_WORD, &padOne, sizeof(padOne),
                     cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(peers->localState, 0, peers->localStateBytes));
  CUDA_OK(cudaDeviceSynchronize());
  worldBarrier(c, 1);
  static const char* const algos[] = {"lamport", "oneshot", "twoshot"};
  const size_t count = (1u << 20) + 3;
  int32_t* host = malloc(count * sizeof(int32_t));
  int32_t* dev = NULL;
  CHECK(host != NULL);
  CUDA_OK(cudaMalloc((void**)&dev, count * sizeof(int32_t)));
  for (int k = 0; k < 3 && host != NULL; k++) {
    setenv("SYMMCOLL_ALLREDUCE_ALGO", algos[k], 1);
    symmParamResetAll();
    const size_t n = k == 0 ? 1000 : count; /* Lamport: small messages only */
    checkOurAllReduce(c->comm, peers, c->rank, c->nranks, host, dev, n, stream);
  }
  unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
  symmParamResetAll();
  forwardedThenOurs(c, peers, stream);
  /* A split without a config inherits "non-blocking": set up at its first all-reduce too. */
  ncclComm_t child = NULL;
  const ncclResult_t split = ncclCommSplit(c->comm, 0, c->rank, &child, NULL);
  res = settle(c->comm, split);
  /* The library hands the child over once the parent says it is done; wait a little longer
   * than that, and say what was seen when it does not come. */
  int polls = 0;
  for (; res == ncclSuccess && polls < 200000 && __atomic_load_n(&child, __ATOMIC_ACQUIRE) == NULL; polls++)
    usleep(10);
  if (child == NULL || polls > 0)
    fprintf(stderr, "rank %d: ncclCommSplit returned %d, parent settled to %d, child %p after %d "
            "more polls\n", c->rank, (int)split, (int)res, (void*)child, polls);
  if (res == ncclSuccess && child != NULL) res = waitReady(child);
  CHECK_EQ_INT(res, ncclSuccess);
  CHECK(child != NULL);
  if (res == ncclSuccess && child != NULL) {
    /* Recorded at the split when its handle was there as the call returned (then set up in the
     * background and staged after its first call given to our kernels), else unknown to us
     * for good: it forwards, with right results either way. */
    struct symmComm* childEntry = symmCommFind(child);
    CHECK(childEntry == NULL || (!childEntry->config.blocking && symmTransportPeers(childEntry) == NULL));
    for (int i = 0; i < 1000; i++) host[i] = (int32_t)i + c->rank;
    CUDA_OK(cudaMemcpyAsync(dev, host, 1000 * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    res = settle(child, ncclAllReduce(dev, dev, 1000, ncclInt32, ncclSum, child, stream));
    CHECK_EQ_INT(res, ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host, dev, 1000 * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < 1000; i++) wrong += host[i] != c->nranks * i + c->nranks * (c->nranks - 1) / 2;
    CHECK_EQ_INT(wrong, 0);
    childEntry = symmCommFind(child);
    const struct symmPeers* childPeers = childEntry != NULL ? symmTransportPeers(childEntry) : NULL;
    CHECK(childEntry == NULL || childPeers != NULL);
    if (childPeers != NULL) /* the next one runs on our kernels */
      checkOurAllReduce(child, childPeers, c->rank, c->nranks, host, dev, 1000, stream);
    CHECK_EQ_INT(settle(child, ncclCommDestroy(child)), ncclSuccess);
  }
  CUDA_OK(cudaFree(dev));
  free(host);
  CUDA_OK(cudaStreamDestroy(stream));
}

/* runProcesses' hooks, in each rank process: before it creates its communicator (a setting
 * that differs between ranks, such as an environment variable set on one rank only; a spy), and
 * after it destroyed it. ranksExitClean: each rank process must exit 0. */
static PEER_UNUSED void (*beforeRankInit)(int rank);
static PEER_UNUSED void (*afterRankDestroy)(int rank);
static PEER_UNUSED int ranksExitClean = 1;

/* In rank process r of two: rank 0 makes the id and pipes it to rank 1, which reads it; each
 * closes its ends of the pipe. 1 when this rank has the id. */
static PEER_UNUSED int rankProcessId(int r, int idPipe[2], ncclUniqueId* id) {
  int ok;
  if (r == 0) {
    close(idPipe[0]);
    ok = ncclGetUniqueId(id) == ncclSuccess && procsWriteAll(idPipe[1], id, sizeof(*id)) == 0;
    close(idPipe[1]);
  } else {
    close(idPipe[1]);
    ok = procsReadAll(idPipe[0], id, sizeof(*id)) == 0;
    close(idPipe[0]);
  }
  return ok;
}

/* Two processes, one GPU each, the real NCCL: rank 0 makes the id and pipes it to rank 1. Each
 * child sends back its check counts. The parent never touches CUDA. */
static PEER_UNUSED void runProcesses(rankBody body, void* arg) {
  int idPipe[2], resultPipe[2];
  if (pipe(idPipe) != 0 || pipe(resultPipe) != 0) {
    CHECK(0);
    return;
  }
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      CHECK(0);
      return;
    }
    if (pids[r] == 0) {
      close(resultPipe[0]);
      if (beforeRankInit != NULL) beforeRankInit(r);
      ncclUniqueId id;
      const int ok = rankProcessId(r, idPipe, &id);
      CHECK(ok);
      if (ok) {
        struct rankCtx c = {.rank = r, .nranks = 2, .dev = r};
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(testPrewarmKernels());
        ncclResult_t res = nonBlockingComms ? initNonBlocking(&c, id)
                                            : ncclCommInitRank(&c.comm, 2, id, r);
        CHECK_EQ_INT(res, ncclSuccess);
        CHECK_EQ_INT(usingBootstrap(), 0);
        if (res == ncclSuccess) {
          body(&c, 1, arg);
          CHECK_EQ_INT(ncclCommDestroy(c.comm), ncclSuccess);
        }
      }
      if (afterRankDestroy != NULL) afterRankDestroy(r);
      int counts[2] = {harnessChecks, harnessFailures};
      (void)procsWriteAll(resultPipe[1], counts, sizeof(counts));
      close(resultPipe[1]);
      _exit(0);
    }
  }
  collectRanks(idPipe, resultPipe, pids, ranksExitClean);
}

/* ---- main(): one runner, each test binary a table of modes --------------------------------- */

/* Where a mode's ranks live, which says what the runner checks before it runs them. */
enum peerRanks {
  PEER_FORKED,    /* rank processes (runProcesses): this process only forks and counts */
  PEER_REAL,      /* rank threads of this process over the real NCCL */
  PEER_BOOTSTRAP, /* rank threads of this process over the test bootstrap */
};

struct peerMode {
  const char* name; /* argv[1] */
  int gpus;         /* fewer: exit 77 with one line */
  enum peerRanks ranks;
  int (*run)(const char* arg); /* arg: argv[2] or NULL; returns 0, or -1 when arg is wrong */
};

struct peerTest {
  const char* name;  /* "peer_mem": the binary test_peer_mem, reports "peer_mem MODE [ARG]" */
  const char* usage; /* the arguments, for the usage line */
  /* The rank processes arm their own watchdog and have a GPU each: this process arms none and
   * leaves CUDA_DEVICE_MAX_CONNECTIONS alone. */
  int ranksOwnWatchdog;
  const struct peerMode* modes;
  int nmodes;
};

static PEER_UNUSED int peerUsage(const struct peerTest* t) {
  fprintf(stderr, "usage: test_%s %s\n", t->name, t->usage);
  return 2;
}

/* The whole main() of a test binary: the mode, multicast forbidden (set, never unset), logging
 * before parameters, enough GPUs (else exit 77), the intended NCCL (bootstrap or real) where
 * this process is a rank, then the mode and the report. */
static PEER_UNUSED int peerMain(const struct peerTest* t, int argc, char** argv) {
  if (!t->ranksOwnWatchdog) {
    watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
    harnessManyStreamsPerGpu();
  }
  const struct peerMode* m = NULL;
  for (int i = 0; argc > 1 && i < t->nmodes; i++)
    if (strcmp(argv[1], t->modes[i].name) == 0) m = &t->modes[i];
  if (m == NULL) return peerUsage(t);
  const char* arg = argc > 2 ? argv[2] : NULL;
  char name[96];
  snprintf(name, sizeof(name), "%s %s%s%s", t->name, m->name, arg ? " " : "", arg ? arg : "");
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  (void)symmLogLevel(); /* logging initialised before parameters are re-read (knobs.c's lock) */
  symmParamResetAll();
  ndev = procsCountGpus();
  if (ndev < m->gpus) {
    printf("test_%s %s: needs %d GPU(s), found %d: skipped\n", t->name, m->name, m->gpus, ndev);
    return TEST_SKIP_CODE;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  runSeed = (uint32_t)ts.tv_nsec ^ (uint32_t)getpid();
  if (m->ranks != PEER_FORKED) {
    /* This process is a rank (or several): the NCCL it forwards to must be the intended one. */
    const int wantBootstrap = m->ranks == PEER_BOOTSTRAP;
    CHECK_EQ_INT(symmRealLoad(), ncclSuccess);
    CHECK_EQ_INT(usingBootstrap(), wantBootstrap);
    if (usingBootstrap() != wantBootstrap) {
      fprintf(stderr, "SYMMCOLL_NCCL_LIB must name %s\n", wantBootstrap ? "the test bootstrap" : "a real NCCL");
      return harnessReport(name);
    }
  }
  if (m->run(arg) != 0) return peerUsage(t);
  return harnessReport(name);
}

#endif
