/* SPDX-License-Identifier: Apache-2.0 */
/* GPU all-reduce correctness: every algorithm x dtype x op x size x placement, graphs, soak, abort.
 *
 * Two ways to reach the kernels:
 *   --mode direct  the test builds peer memory itself (cudaMalloc + peer access in one process,
 *                  cudaIpc handles between forked processes) and calls symmCollLaunch with
 *                  the algorithm forced: tests the kernels without src/transport.
 *   --mode nccl    through ncclAllReduce on real communicators (SYMMCOLL_ALLREDUCE_ALGO forced),
 *                  also comparing with the real NCCL's result (algo=nccl) on the same data.
 * Ranks: --ranks N in one process driven by one thread (ncclCommInitAll + groups in nccl mode,
 * like nccl-tests -g), --procs N (fork, one rank per process), --threads (nccl mode: N threads
 * each calling ncclCommInitRank; with SYMMCOLL_NCCL_LIB at the test bootstrap for N > GPUs).
 * Ranks are placed on GPU rank % ngpus. Prints "test_allreduce: N checks, M failed". */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "algos.h"
#include "ar_helpers.h"
#include "comm.h"
#include "debug.h"
#include "forward.h"
#include "harness.h"
#include "watchdog.h"
#include "procs.h"
#include "nccl_api.h"
#include "param.h"
#include "symm_peers.h"
#include "transport.h"
#include "tuner.h"

/* ------------------------------------------------------------------------------------------ */
/* Options */

enum { MODE_DIRECT, MODE_NCCL };
static struct {
  int mode, ranks, procs, threads, quick, real, abortTest, compareNccl, verbose;
  long soak, replays;
  size_t stagingBytes, maxBytes;
  uint64_t seed;
  unsigned algoMask; /* bits of enum symmAlgo */
} opt = {MODE_DIRECT, 2, 0, 0, 0, 0, 1, 1, 0, 20000, 1000, 64u << 20, 256u << 20, 12345,
         (1u << SYMM_ALGO_ONESHOT) | (1u << SYMM_ALGO_TWOSHOT) | (1u << SYMM_ALGO_MULTIMEM) |
             (1u << SYMM_ALGO_LAMPORT)};

static pthread_mutex_t checkLock = PTHREAD_MUTEX_INITIALIZER;
/* Thread-safe CHECK for threads mode. `cond` is evaluated BEFORE the lock is taken: it is often
 * a blocking call (syncAll, a collective) that waits for another rank thread, and that thread
 * must not be stuck behind the lock meanwhile (its next CHECK would wait for our sync, which
 * waits for its kernel: a stall until the kernels time out, then skewed epochs). */
#define TCHECK(cond, ...)                                      \
  do {                                                         \
    const int tcheckOk_ = (cond) ? 1 : 0;                      \
    pthread_mutex_lock(&checkLock);                            \
    harnessChecks++;                                           \
    if (!tcheckOk_) {                                          \
      harnessFailures++;                                       \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
    }                                                          \
    pthread_mutex_unlock(&checkLock);                          \
  } while (0)

#define CUDA_OR_DIE(cmd)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (cmd);                                                               \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)
#define NCCL_OR_DIE(cmd)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (cmd);                                                              \
    if (r_ != ncclSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cmd, ncclGetErrorString(r_)); \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Ranks and the memory the direct mode builds */

#define SIGNAL_BYTES (64u << 10)
#define STATE_BYTES (64u << 10)
#define USER_REG_TABLE_OFFSET 4096

struct rankCtx {
  int rank, dev;
  cudaStream_t stream, side;
  ncclComm_t comm;
  struct symmPeers peers; /* direct mode */
  void *staging, *signalsMem, *stateMem;
  uint32_t *abortHost, *errorHost;
  char *sendMem, *recvMem; /* maxBytes + 256 each */
  unsigned long long* devMismatch;
};

struct driver {
  int nlocal;
  struct rankCtx* local[SYMM_MAX_RANKS];
  int isLeader; /* the one that prints and sets the environment */
};

static int nranksWorld, ngpus;
static pthread_barrier_t threadBarrier;

static void driverBarrier(void) {
  if (opt.threads) pthread_barrier_wait(&threadBarrier);
}

/* Forces the algorithm of the nccl mode (environment + param reset), in step on every thread. */
static void setAlgoEnv(const struct driver* d, const char* name) {
  driverBarrier();
  if (d->isLeader || !opt.threads) {
    setenv("SYMMCOLL_ALLREDUCE_ALGO", name, 1);
    symmParamResetAll();
  }
  driverBarrier();
}

static void allocRankMemory(struct rankCtx* c) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
  CUDA_OR_DIE(cudaMalloc((void**)&c->sendMem, opt.maxBytes + 256));
  CUDA_OR_DIE(cudaMalloc((void**)&c->recvMem, opt.maxBytes + 256));
  CUDA_OR_DIE(cudaMalloc((void**)&c->devMismatch, sizeof(unsigned long long)));
  /* Every kernel loaded before any spins (the library does this itself at communicator setup;
   * the direct mode has no communicator). */
  CUDA_OR_DIE(arLoadKernels());
  if (symmAlgosLoadKernels(c->dev) != ncclSuccess) {
    fprintf(stderr, "rank %d: the all-reduce kernels do not load on device %d\n", c->rank, c->dev);
    exit(2);
  }
  CUDA_OR_DIE(cudaMemset(c->devMismatch, 0, sizeof(unsigned long long)));
  if (opt.mode != MODE_DIRECT) return;
  CUDA_OR_DIE(cudaMalloc(&c->staging, opt.stagingBytes));
  CUDA_OR_DIE(cudaMalloc(&c->signalsMem, SIGNAL_BYTES));
  CUDA_OR_DIE(cudaMemset(c->signalsMem, 0, SIGNAL_BYTES));
  CUDA_OR_DIE(cudaMalloc(&c->stateMem, STATE_BYTES));
  CUDA_OR_DIE(cudaMemset(c->stateMem, 0, STATE_BYTES));
  CUDA_OR_DIE(cudaHostAlloc((void**)&c->abortHost, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  c->errorHost = c->abortHost + 1;
  c->abortHost[0] = c->errorHost[0] = 0;
  memset(&c->peers, 0, sizeof(c->peers));
  c->peers.rank = c->rank;
  c->peers.nranks = nranksWorld;
  c->peers.ranksPerDevice = (nranksWorld + ngpus - 1) / ngpus; /* as the transport computes it */
  c->peers.bufferBytes = opt.stagingBytes;
  c->peers.signalBytes = SIGNAL_BYTES;
  c->peers.localState = c->stateMem;
  c->peers.localStateBytes = STATE_BYTES;
  uint32_t *abortDev, *errorDev;
  CUDA_OR_DIE(cudaHostGetDevicePointer((void**)&abortDev, c->abortHost, 0));
  errorDev = abortDev + 1;
  c->peers.abortFlag = abortDev;
  c->peers.errorFlag = errorDev;
}

/* One process, every rank: peers see each other's cudaMalloc memory directly. */
static void connectDirectLocal(struct rankCtx* ctx, int n) {
  for (int a = 0; a < n; a++) {
    CUDA_OR_DIE(cudaSetDevice(ctx[a].dev));
    for (int b = 0; b < n; b++) {
      if (ctx[b].dev != ctx[a].dev) {
        cudaError_t e = cudaDeviceEnablePeerAccess(ctx[b].dev, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
        else CUDA_OR_DIE(e);
      }
      ctx[a].peers.buffers[b] = ctx[b].staging;
      ctx[a].peers.signals[b] = ctx[b].signalsMem;
    }
  }
  /* ncclCommRegister zero-copy as the kernel sees it: in one process every rank's memory is
   * already reachable, so each rank's table says writer w registered its send buffer in slot 0
   * and its receive buffer (in-place inputs) in slot 1. */
  for (int a = 0; a < n; a++) {
    uint64_t table[SYMM_MAX_RANKS * SYMM_USER_REG_SLOTS];
    memset(table, 0, sizeof(table));
    for (int w = 0; w < n; w++) {
      table[w * SYMM_USER_REG_SLOTS + 0] = (uint64_t)(uintptr_t)ctx[w].sendMem;
      table[w * SYMM_USER_REG_SLOTS + 1] = (uint64_t)(uintptr_t)ctx[w].recvMem;
    }
    char* at = (char*)ctx[a].stateMem + USER_REG_TABLE_OFFSET;
    CUDA_OR_DIE(cudaSetDevice(ctx[a].dev));
    CUDA_OR_DIE(cudaMemcpy(at, table, sizeof(table), cudaMemcpyHostToDevice));
    ctx[a].peers.userRegTable = (const uint64_t*)at;
  }
}

/* Forked processes: every child sends a blob up a pipe; the parent sends all blobs to all. */
static int upPipe[SYMM_MAX_RANKS][2], downPipe[SYMM_MAX_RANKS][2];
static void writeAll(int fd, const void* p, size_t n) {
  if (procsWriteAll(fd, p, n) != 0) { perror("write"); exit(2); }
}
static void readAll(int fd, void* p, size_t n) {
  if (procsReadAll(fd, p, n) != 0) { fprintf(stderr, "pipe closed early\n"); exit(2); }
}

struct blob {
  cudaIpcMemHandle_t staging, signals;
  ncclUniqueId id;
};

static void exchange(int rank, const struct blob* mine, struct blob* all) {
  writeAll(upPipe[rank][1], mine, sizeof(*mine));
  readAll(downPipe[rank][0], all, sizeof(*all) * (size_t)nranksWorld);
}

static void relayBlobs(void) {
  struct blob all[SYMM_MAX_RANKS];
  for (int r = 0; r < nranksWorld; r++) readAll(upPipe[r][0], &all[r], sizeof(all[r]));
  for (int r = 0; r < nranksWorld; r++)
    writeAll(downPipe[r][1], all, sizeof(all[0]) * (size_t)nranksWorld);
}

static void connectDirectIpc(struct rankCtx* c) {
  struct blob mine, all[SYMM_MAX_RANKS];
  memset(&mine, 0, sizeof(mine));
  CUDA_OR_DIE(cudaIpcGetMemHandle(&mine.staging, c->staging));
  CUDA_OR_DIE(cudaIpcGetMemHandle(&mine.signals, c->signalsMem));
  exchange(c->rank, &mine, all);
  for (int r = 0; r < nranksWorld; r++) {
    if (r == c->rank) {
      c->peers.buffers[r] = c->staging;
      c->peers.signals[r] = c->signalsMem;
      continue;
    }
    CUDA_OR_DIE(cudaIpcOpenMemHandle(&c->peers.buffers[r], all[r].staging,
                                     cudaIpcMemLazyEnablePeerAccess));
    CUDA_OR_DIE(cudaIpcOpenMemHandle((void**)&c->peers.signals[r], all[r].signals,
                                     cudaIpcMemLazyEnablePeerAccess));
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Issuing one all-reduce on every local rank */

struct arCall {
  enum symmAlgo algo; /* direct mode; nccl mode uses the environment */
  ncclDataType_t dtype;
  ncclRedOp_t op;
  size_t count;
  size_t sendOff[SYMM_MAX_RANKS], recvOff[SYMM_MAX_RANKS]; /* bytes, per global rank */
  int inPlace;
  int zeroCopy; /* direct mode, all ranks in this process: two-shot reads peers' sendbuff */
  /* Direct mode, all ranks in this process, two-shot: the ranks in descMask say their input is
   * registered (ncclCommRegister style), the others push it; exchangeDescs on every rank. */
  int exchangeDescs;
  uint32_t descMask;
};

static const void* sendPtr(const struct rankCtx* c, const struct arCall* a) {
  return a->inPlace ? c->recvMem + a->recvOff[c->rank] : c->sendMem + a->sendOff[c->rank];
}
static void* recvPtr(const struct rankCtx* c, const struct arCall* a) {
  return c->recvMem + a->recvOff[c->rank];
}

static struct rankCtx* allRanks; /* one process holding every rank (direct mode), else NULL */

/* Direct mode launches as the library does (src/enqueue.c): programmatic dependent launch unless
 * SYMMCOLL_PDL=0, on sm_90 and newer. */
static int directPdl(int dev) {
  static int cached = -1;
  if (cached < 0) {
    const char* env = getenv("SYMMCOLL_PDL");
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      major = 0;
    cached = major >= 9 && !(env != NULL && atoi(env) == 0);
  }
  return cached;
}

static ncclResult_t issueOne(struct rankCtx* c, const struct arCall* a, cudaStream_t stream) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  if (opt.mode == MODE_DIRECT) {
    void* inputPeers[SYMM_MAX_RANKS];
    const int zeroCopy = a->zeroCopy && allRanks != NULL;
    if (zeroCopy)
      for (int r = 0; r < nranksWorld; r++) inputPeers[r] = (void*)sendPtr(&allRanks[r], a);
    struct symmLaunch call = {.coll = SYMM_COLL_ALLREDUCE, .sendbuff = sendPtr(c, a),
                              .recvbuff = recvPtr(c, a), .count = a->count, .datatype = a->dtype,
                              .op = a->op, .algo = a->algo, .emulateMultimem = 1,
                              .windowPeers = zeroCopy ? inputPeers : NULL,
                              .pdl = directPdl(c->dev)};
    if (a->exchangeDescs && allRanks != NULL) {
      call.exchangeDescs = 1;
      if (a->descMask & (1u << c->rank)) {
        const char* base = a->inPlace ? c->recvMem : c->sendMem;
        call.inputDesc = SYMM_USER_REG_DESC(a->inPlace ? 1 : 0,
                                            (const char*)call.sendbuff - base);
      }
    }
    return symmCollLaunch(&call, &c->peers, stream);
  }
  return ncclAllReduce(sendPtr(c, a), recvPtr(c, a), a->count, a->dtype, a->op, c->comm, stream);
}

static ncclResult_t issueAll(struct driver* d, const struct arCall* a, int useSide) {
  ncclResult_t res = ncclSuccess;
  const int group = opt.mode == MODE_NCCL && d->nlocal > 1;
  if (group) NCCL_OR_DIE(ncclGroupStart());
  for (int i = 0; i < d->nlocal; i++) {
    ncclResult_t r = issueOne(d->local[i], a, useSide ? d->local[i]->side : d->local[i]->stream);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  if (group) {
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  return res;
}

/* ------------------------------------------------------------------------------------------ */
/* Host data for one case: every rank's input (all drivers generate all of them) and the result */

struct hostCase {
  void* in[SYMM_MAX_RANKS];
  void* expect;
  void* got;
  size_t capBytes;
};

static void hostCaseInit(struct hostCase* h, size_t bytes) {
  h->capBytes = bytes;
  for (int r = 0; r < nranksWorld; r++) h->in[r] = malloc(bytes);
  h->expect = malloc(bytes);
  h->got = malloc(bytes);
  if (!h->expect || !h->got) { fprintf(stderr, "out of host memory\n"); exit(2); }
  for (int r = 0; r < nranksWorld; r++)
    if (!h->in[r]) { fprintf(stderr, "out of host memory\n"); exit(2); }
}

static void hostCaseFree(struct hostCase* h) {
  for (int r = 0; r < nranksWorld; r++) free(h->in[r]);
  free(h->expect);
  free(h->got);
}

static void hostCaseFill(struct hostCase* h, const struct arCall* a, uint64_t seed) {
  for (int r = 0; r < nranksWorld; r++)
    arFillInput(a->dtype, a->op, nranksWorld, r, seed, opt.real, h->in[r], a->count);
  arHostReference(a->dtype, a->op, nranksWorld, (const void* const*)h->in, h->expect, a->count);
}

static void uploadInputs(struct driver* d, const struct arCall* a, const struct hostCase* h) {
  const size_t bytes = a->count * symmTypeSize(a->dtype);
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    /* Poison the output (and its surroundings) so stale data cannot pass. */
    CUDA_OR_DIE(cudaMemsetAsync(c->recvMem, 0xA5, opt.maxBytes + 256, c->stream));
    CUDA_OR_DIE(cudaMemcpyAsync((void*)sendPtr(c, a), h->in[c->rank], bytes,
                                cudaMemcpyHostToDevice, c->stream));
  }
}

static int syncAll(struct driver* d) {
  int ok = 1;
  for (int i = 0; i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    cudaError_t e = cudaStreamSynchronize(d->local[i]->stream);
    if (e != cudaSuccess) {
      fprintf(stderr, "rank %d: stream error %s\n", d->local[i]->rank, cudaGetErrorString(e));
      ok = 0;
    }
    if (opt.mode == MODE_DIRECT && d->local[i]->errorHost[0] != 0) {
      fprintf(stderr, "rank %d: kernel gave up (error flag %u)\n", d->local[i]->rank,
              d->local[i]->errorHost[0]);
      ok = 0;
    }
  }
  return ok;
}

/* Downloads each local rank's result and compares it; returns mismatching elements. */
static size_t checkResults(struct driver* d, const struct arCall* a, struct hostCase* h,
                           const char* what, double tol) {
  const size_t bytes = a->count * symmTypeSize(a->dtype);
  size_t bad = 0;
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    CUDA_OR_DIE(cudaMemcpy(h->got, recvPtr(c, a), bytes, cudaMemcpyDeviceToHost));
    char label[256];
    snprintf(label, sizeof(label), "%s algo=%s dtype=%s op=%s count=%zu rank=%d/%d %s sendOff=%zu recvOff=%zu",
             what, symmAlgoName(a->algo), arTypeName(a->dtype), arOpName(a->op), a->count,
             c->rank, nranksWorld, a->inPlace ? "in-place" : "out-of-place",
             a->sendOff[c->rank], a->recvOff[c->rank]);
    size_t b = arCompare(a->dtype, h->expect, h->got, a->count, tol, label);
    /* The bytes right after the output must still hold the poison. */
    unsigned char tail[16];
    const size_t tailBytes = opt.maxBytes + 256 - a->recvOff[c->rank] - bytes < 16
                                 ? opt.maxBytes + 256 - a->recvOff[c->rank] - bytes : 16;
    CUDA_OR_DIE(cudaMemcpy(tail, (char*)recvPtr(c, a) + bytes, tailBytes, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < tailBytes; k++)
      if (tail[k] != 0xA5) {
        fprintf(stderr, "  OVERRUN %s: byte %zu after the output was written\n", label, k);
        b++;
        break;
      }
    TCHECK(b == 0, "%s: %zu mismatches", label, b);
    bad += b;
  }
  return bad;
}

/* ------------------------------------------------------------------------------------------ */
/* Cases */

/* Per thread: in --threads mode every rank thread is a driver and must draw the same sequence
 * (a shared state would interleave the draws, and the ranks would issue different calls). */
static __thread uint64_t rngState;
static uint64_t rnd(void) { /* same sequence in every driver: all ranks agree on the cases */
  rngState ^= rngState << 13;
  rngState ^= rngState >> 7;
  rngState ^= rngState << 17;
  return rngState;
}

static void randomOffsets(struct arCall* a) {
  const size_t es = symmTypeSize(a->dtype);
  for (int r = 0; r < nranksWorld; r++) {
    a->sendOff[r] = (rnd() & 1) ? 0 : (rnd() % (64 / es)) * es;
    a->recvOff[r] = (rnd() & 1) ? 0 : (rnd() % (64 / es)) * es;
  }
}

/* Nccl mode cannot see the transport's staging size: the library's default is assumed there
 * (a forced algorithm that does not fit falls back to the table; results are checked anyway). */
static int algoWanted(enum symmAlgo algo, ncclDataType_t dt, ncclRedOp_t op, size_t count) {
  const size_t staging = opt.mode == MODE_DIRECT ? opt.stagingBytes : (size_t)64 << 20;
  if (!symmAlgoFits(SYMM_COLL_ALLREDUCE, algo, count * symmTypeSize(dt), nranksWorld, staging))
    return 0;
  return (opt.algoMask & (1u << algo)) && symmAlgoExists(SYMM_COLL_ALLREDUCE, algo, dt, op);
}

static void selectAlgo(const struct driver* d, enum symmAlgo algo) {
  if (opt.mode == MODE_NCCL) setAlgoEnv(d, symmAlgoName(algo));
}

/* Runs `a` with every wanted algorithm on the same data; in nccl mode also NCCL's own. */
static void runCase(struct driver* d, struct arCall* a, struct hostCase* h, int tries) {
  const int exactForNccl = !opt.real && a->op != ncclAvg;
  const int narrow = a->dtype == ncclFloat16 || a->dtype == ncclBfloat16 ||
                     a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2;
  for (int algo = SYMM_ALGO_NCCL + 1; algo < SYMM_NALGOS; algo++) {
    if (!algoWanted((enum symmAlgo)algo, a->dtype, a->op, a->count)) continue;
    a->algo = (enum symmAlgo)algo;
    selectAlgo(d, a->algo);
    for (int t = 0; t < tries; t++) {
      /* Two-shot also reads peers' user buffers directly (as from a registered window). */
      /* ... or those of the ranks that registered them (random subset, ncclCommRegister). */
      const uint64_t mode = rnd() % 3;
      a->zeroCopy = a->algo == SYMM_ALGO_TWOSHOT && allRanks != NULL && mode == 1;
      a->exchangeDescs = a->algo == SYMM_ALGO_TWOSHOT && allRanks != NULL && mode == 2;
      a->descMask = (uint32_t)rnd();
      uploadInputs(d, a, h);
      ncclResult_t r = issueAll(d, a, 0);
      TCHECK(r == ncclSuccess, "issue algo=%s: %s", symmAlgoName(a->algo), ncclGetErrorString(r));
      TCHECK(syncAll(d), "sync algo=%s dtype=%s op=%s count=%zu", symmAlgoName(a->algo),
             arTypeName(a->dtype), arOpName(a->op), a->count);
      checkResults(d, a, h, "vs host reference", -1.0);
    }
  }
  if (opt.mode == MODE_NCCL && opt.compareNccl) {
    if (a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2) {
      int major = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d->local[0]->dev);
      if (major < 9) return; /* NCCL has no fp8 before sm_90 */
    }
    a->algo = SYMM_ALGO_NCCL;
    selectAlgo(d, SYMM_ALGO_NCCL);
    uploadInputs(d, a, h);
    ncclResult_t r = issueAll(d, a, 0);
    TCHECK(r == ncclSuccess, "real NCCL dtype=%s op=%s: %s", arTypeName(a->dtype),
           arOpName(a->op), ncclGetErrorString(r));
    TCHECK(syncAll(d), "sync real NCCL");
    /* NCCL's avg and real-valued sums round differently: tolerance there, bitwise elsewhere. */
    const int isInt = a->dtype <= ncclUint64;
    const int fp8 = a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2;
    const double tol = exactForNccl ? -1.0 : isInt ? 1.0 : fp8 ? 0.26 : narrow ? 0.07 : 1e-5;
    checkResults(d, a, h, "real NCCL vs reference", tol);
  }
}

static void sweepSmall(struct driver* d) {
  static const size_t counts[] = {1, 2, 3, 5, 7, 8, 13, 16, 31, 61, 127, 128, 251, 1021,
                                  4099, 65521, 65539, 262147};
  const size_t ncounts = opt.quick ? 10 : sizeof(counts) / sizeof(counts[0]);
  struct hostCase h;
  hostCaseInit(&h, counts[sizeof(counts) / sizeof(counts[0]) - 1] * 8);
  long cases = 0;
  for (size_t ci = 0; ci < ncounts; ci++) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      for (int op = 0; op < ncclNumOps; op++) {
        struct arCall a = {.dtype = (ncclDataType_t)dt, .op = (ncclRedOp_t)op,
                           .count = counts[ci]};
        if (a.count * symmTypeSize(a.dtype) + 64 > opt.maxBytes) continue;
        hostCaseFill(&h, &a, opt.seed + ci * 131 + (uint64_t)dt * 7 + (uint64_t)op);
        for (int place = 0; place < 2; place++) {
          a.inPlace = place;
          randomOffsets(&a);
          runCase(d, &a, &h, 1);
          cases++;
        }
      }
    }
  }
  if (d->isLeader) printf("sizes x dtypes x ops x placements: %ld cases\n", cases);
  hostCaseFree(&h);
}

static void sweepLarge(struct driver* d) {
  struct hostCase h;
  hostCaseInit(&h, opt.maxBytes);
  long cases = 0;
  const ncclDataType_t types[2] = {ncclBfloat16, ncclFloat32};
  for (size_t bytes = 1024; bytes <= opt.maxBytes; bytes *= opt.quick ? 16 : 4) {
    for (int ti = 0; ti < 2; ti++) {
      struct arCall a = {.dtype = types[ti], .op = ncclSum};
      a.count = bytes / symmTypeSize(a.dtype) - (bytes > 1024 ? 3 : 0); /* also not 16-B multiple */
      hostCaseFill(&h, &a, opt.seed ^ bytes);
      a.inPlace = (int)((bytes / 1024) & 1) ^ ti;
      randomOffsets(&a);
      runCase(d, &a, &h, 1);
      cases++;
    }
  }
  if (d->isLeader) printf("large sizes (bf16, float sum, up to %zu MiB): %ld cases\n",
                          opt.maxBytes >> 20, cases);
  hostCaseFree(&h);
}

/* ------------------------------------------------------------------------------------------ */
/* CUDA graphs: all-reduce then "input += 1" captured once, replayed many times */

static void graphTest(struct driver* d) {
  static const size_t counts[2] = {1000, (1u << 20) + 5};
  static const ncclDataType_t types[2] = {ncclFloat32, ncclInt32};
  struct hostCase h, cur;
  hostCaseInit(&h, counts[1] * 4);
  hostCaseInit(&cur, counts[1] * 4);
  long replaysDone = 0;
  for (int algo = SYMM_ALGO_NCCL + 1; algo < SYMM_NALGOS; algo++) {
    for (int ci = 0; ci < 2; ci++) {
      for (int ti = 0; ti < 2; ti++) {
        struct arCall a = {.algo = (enum symmAlgo)algo, .dtype = types[ti], .op = ncclSum,
                           .count = counts[ci]};
        if (!algoWanted(a.algo, a.dtype, a.op, a.count)) continue;
        if (a.count * 4 + 64 > opt.maxBytes) continue;
        /* Two-shot: every other rank reads its input in place (ncclCommRegister style). */
        a.exchangeDescs = a.algo == SYMM_ALGO_TWOSHOT && allRanks != NULL;
        a.descMask = 0x55555555u;
        selectAlgo(d, a.algo);
        randomOffsets(&a);
        hostCaseFill(&h, &a, opt.seed + 999 + (uint64_t)ci * 10 + (uint64_t)ti);
        uploadInputs(d, &a, &h);
        TCHECK(syncAll(d), "graph: upload");
        cudaGraphExec_t exec[SYMM_MAX_RANKS];
        for (int i = 0; i < d->nlocal; i++) {
          CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
          CUDA_OR_DIE(cudaStreamBeginCapture(d->local[i]->stream, cudaStreamCaptureModeRelaxed));
        }
        ncclResult_t r = issueAll(d, &a, 0);
        TCHECK(r == ncclSuccess, "graph capture issue: %s", ncclGetErrorString(r));
        for (int i = 0; i < d->nlocal; i++) {
          struct rankCtx* c = d->local[i];
          CUDA_OR_DIE(cudaSetDevice(c->dev));
          CUDA_OR_DIE(arAddOneDevice((void*)sendPtr(c, &a), a.count, a.dtype, c->stream));
          cudaGraph_t graph;
          CUDA_OR_DIE(cudaStreamEndCapture(c->stream, &graph));
          CUDA_OR_DIE(cudaGraphInstantiate(&exec[i], graph, 0));
          /* Uploaded first: see test/core/README.md, "Graph uploads". */
          CUDA_OR_DIE(cudaGraphUpload(exec[i], c->stream));
          CUDA_OR_DIE(cudaStreamSynchronize(c->stream));
          CUDA_OR_DIE(cudaGraphDestroy(graph));
        }
        const long every = opt.replays >= 10 ? opt.replays / 10 : 1;
        for (long k = 1; k <= opt.replays; k++) {
          for (int i = 0; i < d->nlocal; i++) {
            CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
            CUDA_OR_DIE(cudaGraphLaunch(exec[i], d->local[i]->stream));
          }
          replaysDone++;
          if (k % every != 0 && k != opt.replays) continue;
          TCHECK(syncAll(d), "graph replay %ld sync", k);
          /* After replay k the output is the all-reduce of (input + k - 1). */
          for (int rr = 0; rr < nranksWorld; rr++) {
            memcpy(cur.in[rr], h.in[rr], a.count * 4);
            arAddHost(a.dtype, cur.in[rr], a.count, (int)(k - 1));
          }
          arHostReference(a.dtype, a.op, nranksWorld, (const void* const*)cur.in, cur.expect,
                          a.count);
          char what[64];
          snprintf(what, sizeof(what), "graph replay %ld", k);
          checkResults(d, &a, &cur, what, -1.0);
        }
        for (int i = 0; i < d->nlocal; i++) {
          CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
          CUDA_OR_DIE(cudaGraphExecDestroy(exec[i]));
        }
      }
    }
  }
  if (d->isLeader) printf("graph: %ld replays per rank checked\n", replaysDone);
  hostCaseFree(&h);
  hostCaseFree(&cur);
}

/* ------------------------------------------------------------------------------------------ */
/* Soak: many random back-to-back calls, checked on the device, mixed with other traffic */

#define SOAK_MAX_COUNT 16384
struct soakData {
  char* in[ncclNumTypes][ncclNumOps];  /* this rank's input (device) */
  char* exp[ncclNumTypes][ncclNumOps]; /* expected result (device) */
};

static void soakTest(struct driver* d) {
  struct soakData sd[SYMM_MAX_RANKS];
  struct hostCase h;
  hostCaseInit(&h, SOAK_MAX_COUNT * 8);
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    for (int op = 0; op < ncclNumOps; op++) {
      struct arCall a = {.dtype = (ncclDataType_t)dt, .op = (ncclRedOp_t)op,
                         .count = SOAK_MAX_COUNT};
      hostCaseFill(&h, &a, opt.seed * 31 + (uint64_t)dt * 5 + (uint64_t)op);
      const size_t bytes = SOAK_MAX_COUNT * symmTypeSize(a.dtype);
      for (int i = 0; i < d->nlocal; i++) {
        CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
        CUDA_OR_DIE(cudaMalloc((void**)&sd[i].in[dt][op], bytes));
        CUDA_OR_DIE(cudaMalloc((void**)&sd[i].exp[dt][op], bytes));
        CUDA_OR_DIE(cudaMemcpy(sd[i].in[dt][op], h.in[d->local[i]->rank], bytes,
                               cudaMemcpyHostToDevice));
        CUDA_OR_DIE(cudaMemcpy(sd[i].exp[dt][op], h.expect, bytes, cudaMemcpyHostToDevice));
      }
    }
  }
  if (opt.mode == MODE_NCCL) {
    /* auto, with the tuning file main() installed (SYMMCOLL_TUNING_FILE): Lamport <= 1 KiB,
     * one-shot <= 4 KiB, two-shot to 16 KiB, multimem (emulated) to 64 KiB, two-shot up to
     * 96 KiB, the real NCCL above. */
    setAlgoEnv(d, "auto");
  }
  long calls = 0, forwarded = 0;
  for (long n = 0; n < opt.soak; n++) {
    const ncclDataType_t dt = (ncclDataType_t)(rnd() % ncclNumTypes);
    const ncclRedOp_t op = (ncclRedOp_t)(rnd() % ncclNumOps);
    static const enum symmAlgo arAlgos[4] = {SYMM_ALGO_LAMPORT, SYMM_ALGO_ONESHOT,
                                             SYMM_ALGO_TWOSHOT, SYMM_ALGO_MULTIMEM};
    enum symmAlgo algo = arAlgos[rnd() % 4];
    const size_t count = (rnd() & 3) ? 1 + rnd() % 512 : 1 + rnd() % SOAK_MAX_COUNT;
    if (!algoWanted(algo, dt, op, count))
      algo = algoWanted(SYMM_ALGO_ONESHOT, dt, op, count) ? SYMM_ALGO_ONESHOT : SYMM_ALGO_TWOSHOT;
    if (!algoWanted(algo, dt, op, count)) continue;
    /* Sizes above the two-shot threshold go to the real NCCL (or the test bootstrap), whose avg
     * rounds differently from ours when 1/n is inexact (n = 3, 5, 6, 7): only ours is checked
     * bit for bit against our reference. */
    if (opt.mode == MODE_NCCL && op == ncclAvg && count * symmTypeSize(dt) > 98304) continue;
    const size_t off = rnd() % (SOAK_MAX_COUNT - count + 1);
    const size_t recvOff = (rnd() % 8) * symmTypeSize(dt);
    const int inPlace = (int)(rnd() % 3 == 0);
    const size_t es = symmTypeSize(dt);
    const int extra = (int)(rnd() % 16);
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      if (inPlace)
        CUDA_OR_DIE(cudaMemcpyAsync(c->recvMem + recvOff, sd[i].in[dt][op] + off * es,
                                    count * es, cudaMemcpyDeviceToDevice, c->stream));
    }
    const int group = opt.mode == MODE_NCCL && d->nlocal > 1;
    if (group) NCCL_OR_DIE(ncclGroupStart());
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      const void* send = inPlace ? (const void*)(c->recvMem + recvOff)
                                 : (const void*)(sd[i].in[dt][op] + off * es);
      ncclResult_t r;
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      if (opt.mode == MODE_DIRECT) {
        struct symmLaunch call = {.coll = SYMM_COLL_ALLREDUCE, .sendbuff = send,
                                  .recvbuff = c->recvMem + recvOff, .count = count, .datatype = dt,
                                  .op = op, .algo = algo, .emulateMultimem = 1,
                                  .pdl = directPdl(c->dev)};
        r = symmCollLaunch(&call, &c->peers, c->stream);
      } else {
        r = ncclAllReduce(send, c->recvMem + recvOff, count, dt, op, c->comm, c->stream);
      }
      if (r != ncclSuccess) TCHECK(0, "soak call %ld: %s", n, ncclGetErrorString(r));
    }
    if (group) NCCL_OR_DIE(ncclGroupEnd());
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      CUDA_OR_DIE(arCompareDevice(c->recvMem + recvOff, sd[i].exp[dt][op] + off * es, count * es,
                                  c->devMismatch, c->stream));
    }
    calls++;
    /* Other traffic: forwarded NCCL broadcasts on the same or another stream (nccl mode), or
     * device copies on another stream (direct mode). */
    if (extra < 2) {
      if (group) NCCL_OR_DIE(ncclGroupStart());
      for (int i = 0; i < d->nlocal; i++) {
        struct rankCtx* c = d->local[i];
        CUDA_OR_DIE(cudaSetDevice(c->dev));
        cudaStream_t s = extra == 0 ? c->stream : c->side;
        if (opt.mode == MODE_NCCL)
          NCCL_OR_DIE(ncclBroadcast(c->sendMem, c->sendMem + 4096, 1024, ncclFloat32, 0, c->comm, s));
        else
          CUDA_OR_DIE(cudaMemcpyAsync(c->sendMem + 4096, c->sendMem, 4096, cudaMemcpyDeviceToDevice, s));
      }
      if (group) NCCL_OR_DIE(ncclGroupEnd());
      forwarded++;
    }
    if ((n + 1) % 20000 == 0 || n + 1 == opt.soak) {
      TCHECK(syncAll(d), "soak sync at call %ld", n);
      for (int i = 0; i < d->nlocal; i++) {
        unsigned long long bad = 0;
        CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
        CUDA_OR_DIE(cudaStreamSynchronize(d->local[i]->side));
        CUDA_OR_DIE(cudaMemcpy(&bad, d->local[i]->devMismatch, sizeof(bad), cudaMemcpyDeviceToHost));
        TCHECK(bad == 0, "soak rank %d: %llu wrong bytes in calls up to %ld", d->local[i]->rank,
               bad, n);
        /* On the compare kernels' stream: the legacy stream would not order it before them. */
        CUDA_OR_DIE(cudaMemsetAsync(d->local[i]->devMismatch, 0, sizeof(bad), d->local[i]->stream));
      }
    }
  }
  if (d->isLeader)
    printf("soak: %ld all-reduce calls, %ld other operations interleaved\n", calls, forwarded);
  for (int i = 0; i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    for (int dt = 0; dt < ncclNumTypes; dt++)
      for (int op = 0; op < ncclNumOps; op++) {
        CUDA_OR_DIE(cudaFree(sd[i].in[dt][op]));
        CUDA_OR_DIE(cudaFree(sd[i].exp[dt][op]));
      }
  }
  hostCaseFree(&h);
}

/* ------------------------------------------------------------------------------------------ */
/* Abort and timeout: rank 0 spins for a peer that never arrives */

struct abortArg {
  struct rankCtx* c;
  struct timespec at;
};

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void* abortLater(void* p) {
  struct abortArg* arg = p;
  usleep(200 * 1000);
  clock_gettime(CLOCK_MONOTONIC, &arg->at);
  if (opt.mode == MODE_DIRECT) {
    __atomic_store_n(&arg->c->abortHost[0], 1u, __ATOMIC_SEQ_CST);
  } else {
    ncclResult_t r = ncclCommAbort(arg->c->comm);
    TCHECK(r == ncclSuccess, "ncclCommAbort: %s", ncclGetErrorString(r));
  }
  return NULL;
}

/* Zeroes every rank's signals and epoch so the ranks start in step again (direct mode). */
static void resetDirectState(struct driver* d) {
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    CUDA_OR_DIE(cudaDeviceSynchronize());
    CUDA_OR_DIE(cudaMemset(c->signalsMem, 0, SIGNAL_BYTES));
    CUDA_OR_DIE(cudaMemset(c->stateMem, 0, STATE_BYTES));
    CUDA_OR_DIE(cudaDeviceSynchronize());
    c->abortHost[0] = c->errorHost[0] = 0;
  }
}

static void lonelyLaunch(struct rankCtx* c, struct arCall* a) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaMemsetAsync(c->recvMem, 0xA5, 4096, c->stream));
  CUDA_OR_DIE(cudaStreamSynchronize(c->stream));
  ncclResult_t r = issueOne(c, a, c->stream);
  TCHECK(r == ncclSuccess, "lonely launch: %s", ncclGetErrorString(r));
}

static int outputUntouched(struct rankCtx* c) {
  unsigned char buf[4096];
  CUDA_OR_DIE(cudaMemcpy(buf, c->recvMem, sizeof(buf), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof(buf); i++)
    if (buf[i] != 0xA5) return 0;
  return 1;
}

static void abortTest(struct driver* d) {
  if (d->nlocal != nranksWorld) return; /* needs to hold back every other rank itself */
  struct rankCtx* c = d->local[0];
  struct arCall a = {.algo = SYMM_ALGO_ONESHOT, .dtype = ncclFloat32, .op = ncclSum, .count = 1000};
  if (opt.mode == MODE_NCCL) {
    struct symmComm* sc = symmCommFind(c->comm);
    if (sc == NULL || sc->transport == NULL) {
      printf("abort: communicator forwards (no symmetric memory here); ncclCommAbort test skipped\n");
      return;
    }
    setAlgoEnv(d, "oneshot");
  }
  /* 1. Abort while spinning: the stream drains within 2 s of the abort. */
  struct abortArg arg = {.c = c};
  lonelyLaunch(c, &a);
  pthread_t th;
  pthread_create(&th, NULL, abortLater, &arg);
  cudaError_t e = cudaStreamSynchronize(c->stream);
  pthread_join(th, NULL);
  const double drain = secondsSince(&arg.at);
  printf("abort: stream drained %.3f s after the abort\n", drain);
  TCHECK(e == cudaSuccess, "stream after abort: %s", cudaGetErrorString(e));
  TCHECK(drain < 2.0, "stream took %.3f s to drain after abort", drain);
  if (opt.mode == MODE_NCCL) {
    /* The communicator is gone; the others are aborted too so teardown does not wait. */
    for (int i = 1; i < d->nlocal; i++) (void)ncclCommAbort(d->local[i]->comm);
    for (int i = 0; i < d->nlocal; i++) d->local[i]->comm = NULL;
    return;
  }
  TCHECK(c->errorHost[0] == SYMM_ERR_ABORT, "error flag after abort = %u", c->errorHost[0]);
  TCHECK(outputUntouched(c), "abort: the output buffer was written");
  resetDirectState(d);

  /* 2. Deadline: SYMMCOLL_SPIN_DEADLINE_MS=300 gives up by itself. */
  setenv("SYMMCOLL_SPIN_DEADLINE_MS", "300", 1);
  symmParamResetAll();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  lonelyLaunch(c, &a);
  e = cudaStreamSynchronize(c->stream);
  const double took = secondsSince(&t0);
  printf("timeout: kernel gave up after %.3f s (deadline 0.3 s)\n", took);
  TCHECK(e == cudaSuccess, "stream after timeout: %s", cudaGetErrorString(e));
  TCHECK(took >= 0.25 && took < 2.0, "timeout took %.3f s", took);
  TCHECK((c->errorHost[0] & SYMM_ERR_DEADLINE) != 0, "error flag after the deadline = %u",
         c->errorHost[0]);
  TCHECK(outputUntouched(c), "timeout: the output buffer was written");
  /* 3. A communicator that gave up refuses further work at once, touching nothing. */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  lonelyLaunch(c, &a);
  e = cudaStreamSynchronize(c->stream);
  TCHECK(e == cudaSuccess && secondsSince(&t0) < 0.25 && outputUntouched(c),
         "launch after an error should return at once without writing");
  unsetenv("SYMMCOLL_SPIN_DEADLINE_MS");
  symmParamResetAll();
  resetDirectState(d);
  /* 4. And after a reset the ranks work together again. */
  struct hostCase h;
  hostCaseInit(&h, 4096 * 4);
  a.count = 4096;
  hostCaseFill(&h, &a, 77);
  uploadInputs(d, &a, &h);
  TCHECK(issueAll(d, &a, 0) == ncclSuccess, "after reset: issue");
  TCHECK(syncAll(d), "after reset: sync");
  checkResults(d, &a, &h, "after abort reset", -1.0);
  hostCaseFree(&h);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers */

static void runDriver(struct driver* d) {
  rngState = opt.seed * 2654435761u + 1; /* identical case sequence in every driver */
  if (opt.mode == MODE_NCCL && d->isLeader) {
    for (int i = 0; i < d->nlocal; i++) {
      struct symmComm* sc = symmCommFind(d->local[i]->comm);
      printf("rank %d: %s\n", d->local[i]->rank,
             sc && sc->transport ? "symmetric memory: our kernels run"
                                 : "no symmetric memory: every call forwards to the real NCCL");
    }
  }
  sweepSmall(d);
  sweepLarge(d);
  if (opt.replays > 0) graphTest(d);
  if (opt.soak > 0) soakTest(d);
  if (opt.abortTest && !opt.threads && opt.procs == 0) abortTest(d);
}

static void setupNcclSingle(struct rankCtx* ctx) {
  ncclComm_t comms[SYMM_MAX_RANKS];
  int devs[SYMM_MAX_RANKS];
  for (int r = 0; r < nranksWorld; r++) devs[r] = ctx[r].dev;
  NCCL_OR_DIE(ncclCommInitAll(comms, nranksWorld, devs));
  for (int r = 0; r < nranksWorld; r++) ctx[r].comm = comms[r];
}

static void teardown(struct rankCtx* c) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaDeviceSynchronize());
  if (c->comm) NCCL_OR_DIE(ncclCommDestroy(c->comm));
  c->comm = NULL;
}

struct threadArg {
  struct rankCtx* ctx;
  ncclUniqueId id;
};

static void* threadMain(void* p) {
  struct threadArg* t = p;
  struct rankCtx* c = t->ctx;
  allocRankMemory(c);
  NCCL_OR_DIE(ncclCommInitRank(&c->comm, nranksWorld, t->id, c->rank));
  struct driver d = {.nlocal = 1, .local = {c}, .isLeader = c->rank == 0};
  runDriver(&d);
  driverBarrier();
  teardown(c);
  return NULL;
}

static int childMain(int rank) {
  struct rankCtx c;
  memset(&c, 0, sizeof(c));
  c.rank = rank;
  int count = 0;
  CUDA_OR_DIE(cudaGetDeviceCount(&count));
  ngpus = count;
  c.dev = rank % ngpus;
  allocRankMemory(&c);
  if (opt.mode == MODE_DIRECT) {
    connectDirectIpc(&c);
  } else {
    struct blob mine, all[SYMM_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    if (rank == 0) NCCL_OR_DIE(ncclGetUniqueId(&mine.id));
    exchange(rank, &mine, all);
    NCCL_OR_DIE(ncclCommInitRank(&c.comm, nranksWorld, all[0].id, rank));
  }
  struct driver d = {.nlocal = 1, .local = {&c}, .isLeader = rank == 0};
  runDriver(&d);
  /* Every rank finishes its kernels before any unmaps: one more exchange as a barrier. */
  CUDA_OR_DIE(cudaDeviceSynchronize());
  struct blob dummy, all[SYMM_MAX_RANKS];
  memset(&dummy, 0, sizeof(dummy));
  exchange(rank, &dummy, all);
  teardown(&c);
  char name[32];
  snprintf(name, sizeof(name), "test_allreduce[rank %d]", rank);
  return harnessReport(name);
}

static void usage(void) {
  fprintf(stderr,
          "usage: test_allreduce [--mode direct|nccl] [--ranks N] [--procs N] [--threads]\n"
          "  [--algos oneshot,twoshot,multimem,lamport] [--soak CALLS] [--replays N] [--staging-mb MB]\n"
          "  [--max-mb MB] [--quick] [--real] [--no-abort] [--no-nccl-compare] [--seed S]\n");
  exit(2);
}

/* nccl mode, auto: a tuning file read at communicator setup sends every size class of the soak
 * to one of our algorithms (Lamport <= 1 KiB, one-shot <= 4 KiB, two-shot to 16 KiB, emulated
 * multimem to 64 KiB where it has a kernel, two-shot to 96 KiB) and the rest to the real NCCL. */
static int installTuningFile(void) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/symmcoll_test_tuning_%d.txt", (int)getpid());
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    return 0;
  }
  fprintf(f, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
             "allreduce lamport<=1K oneshot<=4K twoshot<=16383 multimem<=64K twoshot<=96K\n");
  fclose(f);
  setenv("SYMMCOLL_TUNING_FILE", path, 1);
  return 1;
}

int main(int argc, char** argv) {
  watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
  harnessManyStreamsPerGpu();
  /* Logging first: src/param.c logs under its lock, which deadlocks if the first param read
   * (with the variable set) also has to initialise logging. Reported to the lead. */
  (void)symmLogLevel();
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--mode") && v) { opt.mode = !strcmp(v, "nccl") ? MODE_NCCL : MODE_DIRECT; i++; }
    else if (!strcmp(a, "--ranks") && v) { opt.ranks = atoi(v); i++; }
    else if (!strcmp(a, "--procs") && v) { opt.procs = atoi(v); opt.ranks = opt.procs; i++; }
    else if (!strcmp(a, "--threads")) opt.threads = 1;
    else if (!strcmp(a, "--soak") && v) { opt.soak = atol(v); i++; }
    else if (!strcmp(a, "--replays") && v) { opt.replays = atol(v); i++; }
    else if (!strcmp(a, "--staging-mb") && v) { opt.stagingBytes = (size_t)atol(v) << 20; i++; }
    else if (!strcmp(a, "--max-mb") && v) { opt.maxBytes = (size_t)atol(v) << 20; i++; }
    else if (!strcmp(a, "--seed") && v) { opt.seed = (uint64_t)atoll(v); i++; }
    else if (!strcmp(a, "--quick")) opt.quick = 1;
    else if (!strcmp(a, "--real")) opt.real = 1;
    else if (!strcmp(a, "--no-abort")) opt.abortTest = 0;
    else if (!strcmp(a, "--no-nccl-compare")) opt.compareNccl = 0;
    else if (!strcmp(a, "--algos") && v) {
      opt.algoMask = 0;
      char buf[256];
      snprintf(buf, sizeof(buf), "%s", v);
      for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int al = symmAlgoParse(tok);
        if (al <= 0) usage();
        opt.algoMask |= 1u << al;
      }
      i++;
    } else usage();
  }
  /* Multicast never: these machines forbid it. Multimem runs emulated. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  setenv("SYMMCOLL_MULTIMEM_EMULATE", "1", 1);
  if (opt.mode == MODE_NCCL && !installTuningFile()) return 2;
  nranksWorld = opt.ranks;
  if (nranksWorld < 1 || nranksWorld > SYMM_MAX_RANKS) usage();
  if (opt.maxBytes < (4u << 20)) opt.maxBytes = 4u << 20;

  ngpus = procsCountGpus();
  if (ngpus == 0) {
    printf("test_allreduce: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  if (opt.mode == MODE_NCCL && !opt.threads && opt.procs == 0 && nranksWorld > ngpus) {
    printf("test_allreduce: %d ranks in one process need %d GPUs (have %d), skipped\n",
           nranksWorld, nranksWorld, ngpus);
    return TEST_SKIP_CODE;
  }
  /* Without MPS, kernels of processes sharing a GPU are time-sliced, not concurrent: ranks that
   * wait for each other then crawl (minutes for this test). */
  if (opt.procs > ngpus) {
    printf("test_allreduce: %d processes need %d GPUs (have %d): processes sharing a GPU run "
           "their kernels time-sliced, skipped\n", opt.procs, opt.procs, ngpus);
    return TEST_SKIP_CODE;
  }
  /* The real NCCL refuses two ranks on one GPU; only the test bootstrap takes them. */
  if (opt.mode == MODE_NCCL && nranksWorld > ngpus &&
      (symmRealLoad() != ncclSuccess || dlsym(symmReal.handle, "symmTestBootstrapIsFake") == NULL)) {
    printf("test_allreduce: %d ranks on %d GPU(s) need the test bootstrap as SYMMCOLL_NCCL_LIB "
           "(the real NCCL refuses two ranks on one GPU), skipped\n", nranksWorld, ngpus);
    return TEST_SKIP_CODE;
  }
  if (nranksWorld > 2 && opt.maxBytes > (64u << 20)) opt.maxBytes = 64u << 20;
  printf("test_allreduce: mode=%s ranks=%d %s gpus=%d staging=%zu MiB max=%zu MiB soak=%ld "
         "replays=%ld\n",
         opt.mode == MODE_NCCL ? "nccl" : "direct", nranksWorld,
         opt.procs ? "processes" : opt.threads ? "threads" : "one-thread", ngpus,
         opt.stagingBytes >> 20, opt.maxBytes >> 20, opt.soak, opt.replays);
  fflush(stdout);

  if (opt.procs > 0) {
    pid_t pids[SYMM_MAX_RANKS];
    for (int r = 0; r < nranksWorld; r++)
      if (pipe(upPipe[r]) != 0 || pipe(downPipe[r]) != 0) { perror("pipe"); return 2; }
    for (int r = 0; r < nranksWorld; r++) {
      pids[r] = fork();
      if (pids[r] == 0) {
        /* Keep only our own ends, so a rank that dies is seen as end-of-file, not a hang. */
        for (int o = 0; o < nranksWorld; o++) {
          close(upPipe[o][0]);
          close(downPipe[o][1]);
          if (o != r) {
            close(upPipe[o][1]);
            close(downPipe[o][0]);
          }
        }
        _exit(childMain(r));
      }
    }
    for (int r = 0; r < nranksWorld; r++) {
      close(upPipe[r][1]);
      close(downPipe[r][0]);
    }
    /* Relay the blob exchanges: setup, then the final barrier. */
    relayBlobs();
    relayBlobs();
    int failed = 0;
    for (int r = 0; r < nranksWorld; r++) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank %d exited with status %d\n", r, status);
        failed++;
      }
    }
    printf("test_allreduce: %d processes, %d failed\n", nranksWorld, failed);
    return failed ? 1 : 0;
  }

  struct rankCtx ctx[SYMM_MAX_RANKS];
  memset(ctx, 0, sizeof(ctx));
  for (int r = 0; r < nranksWorld; r++) {
    ctx[r].rank = r;
    ctx[r].dev = r % ngpus;
  }
  if (opt.threads) {
    if (opt.mode != MODE_NCCL) usage();
    pthread_barrier_init(&threadBarrier, NULL, (unsigned)nranksWorld);
    struct threadArg targs[SYMM_MAX_RANKS];
    pthread_t th[SYMM_MAX_RANKS];
    ncclUniqueId id;
    NCCL_OR_DIE(ncclGetUniqueId(&id));
    for (int r = 0; r < nranksWorld; r++) {
      targs[r].ctx = &ctx[r];
      targs[r].id = id;
      pthread_create(&th[r], NULL, threadMain, &targs[r]);
    }
    for (int r = 0; r < nranksWorld; r++) pthread_join(th[r], NULL);
    return harnessReport("test_allreduce");
  }
  for (int r = 0; r < nranksWorld; r++) allocRankMemory(&ctx[r]);
  if (opt.mode == MODE_DIRECT) {
    connectDirectLocal(ctx, nranksWorld);
    allRanks = ctx;
  } else {
    setupNcclSingle(ctx);
  }
  struct driver d = {.nlocal = nranksWorld, .isLeader = 1};
  for (int r = 0; r < nranksWorld; r++) d.local[r] = &ctx[r];
  runDriver(&d);
  for (int r = 0; r < nranksWorld; r++) teardown(&ctx[r]);
  return harnessReport("test_allreduce");
}
