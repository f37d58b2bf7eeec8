/* SPDX-License-Identifier: Apache-2.0 */
/* Host time of one eager 1 KiB all-reduce through ncclAllReduce (or, with --coll, all-gather or
 * reduce-scatter of 1 KiB of output or input) on libsymmcoll's path, against one bare kernel
 * launch. Ranks are threads on one GPU (run it with SYMMCOLL_NCCL_LIB naming the
 * test bootstrap's libnccl.so.2); each rank times its own calls, one by one. Three kinds of call
 * are timed, interleaved in blocks of --sync calls (the stream is synchronized after each, so
 * the GPU never backs up), in an order that rotates every round, so that drift falls on all
 * three alike:
 *   ours     ncclAllReduce (--coll: ncclAllGather, ncclReduceScatter), in place;
 *   meet     a bare cuLaunchKernel of a kernel that, like ours, waits on the GPU for its peers'
 *            launches (so it queues behind a waiting kernel, as ours does);
 *   replica  the meet launch with the CUDA calls our path makes around its launch;
 *   driver replica  the same calls made to the driver directly.
 * ours - meet is what the issue bounds; replica - meet is the part of it that is CUDA calls.
 * With --turns K the ranks take turns, K calls each (a host-side token passed after every K
 * calls), so no two threads are inside the CUDA driver at once, as a process that drives its
 * own GPU issues them. With --one-thread 1 one thread drives every rank (ncclCommInitAll, then
 * each call to every rank in turn), so only one thread ever enters the driver. Also printed: a
 * bare launch on an idle GPU. --bytes 0 times an empty call, which NCCL discards after its checks
 * (with the test bootstrap set SYMM_BOOTSTRAP_DISCARD_EMPTY=1, or every empty call meets its
 * peers on the host); against the same run with SYMMCOLL_DISABLE=1 it is what our path adds to a
 * forwarded call. Uses only NCCL's public API, so it runs against any libsymmcoll (or NCCL
 * itself). */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define NK(x) BENCH_CHECK(ncclResult_t, x, ncclSuccess, ncclGetErrorString)

static int nranks = 2, calls = 10000, rounds = 10, syncEvery = 100, warmup = 500, turns = 0;
static int oneThreadMode; /* --one-thread 1 */
static int turn; /* --turns: the rank whose calls are next (atomic) */
static size_t bytes = 1024;
/* --coll: which collective "ours" calls; bytes is the all-reduce's buffer, the all-gather's
 * output and the reduce-scatter's input (every rank's part together). */
enum coll { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER };
static enum coll coll = COLL_ALLREDUCE;
static const char* const collNames[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter"};
static int collOf(const char* arg) {
  static const char* const args[] = {"all_reduce", "all_gather", "reduce_scatter"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(arg, args[i])) return i;
  return -1;
}
static ncclUniqueId uid;
static pthread_barrier_t barrier;

/* Median and 10th/90th percentiles of `n` samples (sorted in place). */
static void summarize(double* t, int n, double* p10, double* p50, double* p90) {
  qsort(t, (size_t)n, sizeof(double), benchCmpDouble);
  *p10 = t[n / 10];
  *p50 = t[n / 2];
  *p90 = t[n * 9 / 10];
}

/* A kernel with a 328-byte argument block (about our launch's), one with 4 bytes, and "meet":
 * 328 bytes whose first 8 hold a counter's address and next 4 a target; it adds 1 to the counter
 * and waits until it reaches the target, so a rank's launch waits for its peers' on the GPU as
 * ours do. PTX the driver compiles for whatever GPU this is. */
static const char kPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry big(.param .align 8 .b8 p[328]) { ret; }\n"
    ".visible .entry small(.param .u32 x) { ret; }\n"
    ".visible .entry meet(.param .align 8 .b8 p[328]) {\n"
    "  .reg .b64 %rd<2>; .reg .b32 %r<3>; .reg .pred %q;\n"
    "  ld.param.u64 %rd0, [p]; ld.param.u32 %r0, [p+8]; cvta.to.global.u64 %rd1, %rd0;\n"
    "  atom.global.add.u32 %r1, [%rd1], 1;\n"
    "WAIT:\n  ld.volatile.global.u32 %r2, [%rd1]; setp.lt.u32 %q, %r2, %r0; @%q bra WAIT;\n"
    "  ret;\n}\n";

typedef CUresult (*ModuleLoadDataFn)(CUmodule*, const void*);
typedef CUresult (*ModuleGetFunctionFn)(CUfunction*, CUmodule, const char*);
typedef CUresult (*LaunchKernelFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void**, void**);
typedef CUresult (*CtxGetDeviceFn)(CUdevice*);
typedef CUresult (*StreamGetCaptureInfoFn)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                           const CUgraphNode**, const CUgraphEdgeData**, size_t*);
typedef CUresult (*StreamGetIdFn)(CUstream, unsigned long long*);
typedef CUresult (*EventRecordFn)(CUevent, CUstream);

/* Driver entry points through the runtime (nothing links libcuda); returned through a union so
 * that the object-to-function pointer conversion is explicit. */
union entryPoint {
  void* object;
  ModuleLoadDataFn load;
  ModuleGetFunctionFn get;
  LaunchKernelFn launch;
  CtxGetDeviceFn ctxGetDevice;
  StreamGetCaptureInfoFn captureInfo;
  StreamGetIdFn streamId;
  EventRecordFn eventRecord;
};

static union entryPoint driverEntry(const char* name, unsigned version) {
  union entryPoint fn = {NULL};
  enum cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &fn.object, version, cudaEnableDefault, &q));
  if (fn.object == NULL || q != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "host_path: no driver entry point %s\n", name);
    exit(1);
  }
  return fn;
}

static LaunchKernelFn launchFn;
static CtxGetDeviceFn ctxGetDeviceFn;
static StreamGetCaptureInfoFn captureInfoFn;
static StreamGetIdFn streamIdFn;
static EventRecordFn eventRecordFn;
static CUfunction bigFn, smallFn, meetFn;
static unsigned* meetCounter; /* device memory the "meet" launches count in */

static void loadBareKernels(void) {
  CK(cudaSetDevice(0));
  CK(cudaFree(NULL));
  ModuleLoadDataFn load = driverEntry("cuModuleLoadData", 12000).load;
  ModuleGetFunctionFn get = driverEntry("cuModuleGetFunction", 12000).get;
  launchFn = driverEntry("cuLaunchKernel", 12000).launch;
  ctxGetDeviceFn = driverEntry("cuCtxGetDevice", 12000).ctxGetDevice;
  captureInfoFn = driverEntry("cuStreamGetCaptureInfo", 12030).captureInfo; /* the _v3 form */
  streamIdFn = driverEntry("cuStreamGetId", 12000).streamId;
  eventRecordFn = driverEntry("cuEventRecord", 12000).eventRecord;
  CUmodule mod;
  if (load(&mod, kPtx) != CUDA_SUCCESS || get(&bigFn, mod, "big") != CUDA_SUCCESS ||
      get(&smallFn, mod, "small") != CUDA_SUCCESS || get(&meetFn, mod, "meet") != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: cannot load the bare kernels\n");
    exit(1);
  }
  CK(cudaMalloc((void**)&meetCounter, sizeof(unsigned)));
  CK(cudaMemset(meetCounter, 0, sizeof(unsigned)));
}

/* What each rank times (the issuing functions are not inlined, so that profiles tell them
 * apart), interleaved turn by turn so that drift (clocks, the other thread, the
 * driver's state) falls on all three alike. */
enum kind { KIND_OURS, KIND_MEET, KIND_REPLICA, KIND_DRIVER_REPLICA, KINDS };
static const char* kindNames[KINDS] = {"ncclAllReduce", "meet launch", "replica",
                                       "driver replica"};

struct samples {
  double p10, p50, p90;
};
static struct samples timed[8][KINDS];
/* Per rank and round: the median of each kind's calls in that round. */
static double* roundMedian[8][KINDS];

struct rankCtx {
  int rank;
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t event;
  float* buf;
  size_t count;
  int meets; /* meet kernels launched so far (also by the replica) */
  char meetArgs[328];
};

static __attribute__((noinline)) void issueOurs(struct rankCtx* c) {
  /* In place: rank r's part of the all-gather's output or the reduce-scatter's input. */
  const size_t part = c->count / (size_t)nranks;
  float* mine = c->buf + (size_t)c->rank * part;
  if (coll == COLL_ALLREDUCE)
    NK(ncclAllReduce(c->buf, c->buf, c->count, ncclFloat32, ncclSum, c->comm, c->stream));
  else if (coll == COLL_ALLGATHER)
    NK(ncclAllGather(mine, c->buf, part, ncclFloat32, c->comm, c->stream));
  else
    NK(ncclReduceScatter(c->buf, mine, part, ncclFloat32, ncclSum, c->comm, c->stream));
}

static __attribute__((noinline)) void issueMeet(struct rankCtx* c) {
  const unsigned target = (unsigned)nranks * (unsigned)(++c->meets);
  memcpy(c->meetArgs + 8, &target, sizeof(target)); /* the counter's address is already there */
  void* params[] = {c->meetArgs};
  if (launchFn(meetFn, 1, 1, 1, 1, 1, 1, 0, (CUstream)c->stream, params, NULL) != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: cuLaunchKernel(meet) failed\n");
    exit(1);
  }
}

#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#endif

/* The CUDA calls an eager call of ours makes around its launch (src/enqueue.c, src/core/order.c on
 * a stream it used last time), around the meet launch: the difference to "meet" is what those
 * calls cost, the difference of ours to this is our own code. */
static __attribute__((noinline)) void issueReplica(struct rankCtx* c) {
  int dev = -1;
  enum cudaStreamCaptureStatus status;
  unsigned long long captureId = 0, streamId = 0;
  cudaGraph_t graph = NULL;
  CK(cudaGetDevice(&dev));
  CK(cudaStreamGetCaptureInfo(c->stream, &status, &captureId, &graph, NULL, NULL, NULL));
  CK(cudaStreamGetId(c->stream, &streamId));
  issueMeet(c);
  CK(cudaEventRecord(c->event, c->stream));
}

/* The same calls made to the driver directly (what our path would save by making them so). */
static __attribute__((noinline)) void issueDriverReplica(struct rankCtx* c) {
  CUdevice dev = -1;
  CUstreamCaptureStatus status;
  cuuint64_t captureId = 0;
  unsigned long long streamId = 0;
  CUgraph graph = NULL;
  if (ctxGetDeviceFn(&dev) != CUDA_SUCCESS ||
      captureInfoFn((CUstream)c->stream, &status, &captureId, &graph, NULL, NULL, NULL) !=
          CUDA_SUCCESS ||
      streamIdFn((CUstream)c->stream, &streamId) != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: a driver query failed\n");
    exit(1);
  }
  issueMeet(c);
  if (eventRecordFn((CUevent)c->event, (CUstream)c->stream) != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: cuEventRecord failed\n");
    exit(1);
  }
}

static void issue(struct rankCtx* c, enum kind k) {
  if (k == KIND_OURS) issueOurs(c);
  else if (k == KIND_MEET) issueMeet(c);
  else if (k == KIND_REPLICA) issueReplica(c);
  else issueDriverReplica(c);
}

static void waitTurn(int rank) {
  while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != rank) continue;
}

static void passTurn(int rank) { __atomic_store_n(&turn, (rank + 1) % nranks, __ATOMIC_RELEASE); }

/* Ranks cs[0..n-1], all driven by this thread (n = 1: the thread of one rank; --one-thread:
 * every rank, as a process that drives all its GPUs does). A warmup of every kind, untimed (the
 * first call of ours builds its memory: from one thread, every rank's first call goes in one
 * group), then `rounds` rounds; a round issues `calls / rounds` calls of each kind in blocks of
 * --sync calls, the kinds taking turns block by block in an order that rotates every round.
 * From one thread each call of a block goes to every rank in turn. With --turns K the rank
 * threads also take turns, K calls each. */
static void driveRanks(struct rankCtx** cs, int n) {
  if (n > 1) {
    NK(ncclGroupStart());
    for (int q = 0; q < n; q++) issueOurs(cs[q]);
    NK(ncclGroupEnd());
  }
  /* Not in turns: the first call of ours waits inside the call for its peers' first calls. */
  for (int k = 0; k < KINDS; k++) {
    for (int i = 0; i < warmup; i++) {
      for (int q = 0; q < n; q++) issue(cs[q], (enum kind)k);
      if ((i + 1) % syncEvery == 0)
        for (int q = 0; q < n; q++) CK(cudaStreamSynchronize(cs[q]->stream));
    }
    for (int q = 0; q < n; q++) CK(cudaStreamSynchronize(cs[q]->stream));
  }
  pthread_barrier_wait(&barrier);
  const int perRound = calls / rounds;
  double* t[8][KINDS];
  double* blockT = malloc(sizeof(double) * (size_t)perRound);
  if (blockT == NULL) exit(1);
  for (int q = 0; q < n; q++)
    for (int k = 0; k < KINDS; k++) {
      t[q][k] = malloc(sizeof(double) * (size_t)calls);
      roundMedian[cs[q]->rank][k] = malloc(sizeof(double) * (size_t)rounds);
      if (t[q][k] == NULL || roundMedian[cs[q]->rank][k] == NULL) exit(1);
    }
  const int rank = cs[0]->rank; /* whose turn it is, with --turns (n = 1 then) */
  int done[KINDS] = {0};
  for (int r = 0; r < rounds; r++) {
    int start[KINDS];
    for (int k = 0; k < KINDS; k++) start[k] = done[k];
    for (int b = 0; b < perRound / syncEvery; b++) {
      for (int j = 0; j < KINDS; j++) {
        const enum kind k = (enum kind)((j + r) % KINDS);
        for (int i = 0; i < syncEvery; i++) {
          if (turns && i % turns == 0) waitTurn(rank);
          for (int q = 0; q < n; q++) {
            const double t0 = benchNowUs();
            issue(cs[q], k);
            t[q][k][done[k]] = benchNowUs() - t0;
          }
          done[k]++;
          if (turns && (i + 1) % turns == 0) passTurn(rank);
        }
        for (int q = 0; q < n; q++) CK(cudaStreamSynchronize(cs[q]->stream));
      }
    }
    for (int q = 0; q < n; q++)
      for (int k = 0; k < KINDS; k++) {
        const int m = done[k] - start[k];
        memcpy(blockT, t[q][k] + start[k], sizeof(double) * (size_t)m);
        double p10, p50, p90;
        summarize(blockT, m, &p10, &p50, &p90);
        roundMedian[cs[q]->rank][k][r] = p50;
      }
  }
  for (int q = 0; q < n; q++)
    for (int k = 0; k < KINDS; k++) {
      struct samples* out = &timed[cs[q]->rank][k];
      summarize(t[q][k], done[k], &out->p10, &out->p50, &out->p90);
      free(t[q][k]);
    }
  free(blockT);
  pthread_barrier_wait(&barrier);
}

static void setUpRank(struct rankCtx* c, int rank) {
  memset(c, 0, sizeof(*c));
  c->rank = rank;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&c->event, cudaEventDisableTiming));
  if (bytes > 0) {
    CK(cudaMalloc((void**)&c->buf, bytes));
    CK(cudaMemset(c->buf, 0, bytes));
  }
  c->count = bytes / sizeof(float);
  memcpy(c->meetArgs, &meetCounter, sizeof(meetCounter));
}

static void tearDownRank(struct rankCtx* c) {
  CK(cudaFree(c->buf));
  CK(cudaEventDestroy(c->event));
  CK(cudaStreamDestroy(c->stream));
  NK(ncclCommDestroy(c->comm));
}

static void* rankMain(void* arg) {
  struct rankCtx c;
  setUpRank(&c, (int)(long)arg);
  NK(ncclCommInitRank(&c.comm, nranks, uid, c.rank));
  struct rankCtx* one = &c;
  driveRanks(&one, 1);
  tearDownRank(&c);
  return NULL;
}

/* --one-thread: every rank from the main thread (only the test bootstrap accepts several ranks
 * on one GPU in ncclCommInitAll). */
static void oneThread(void) {
  struct rankCtx c[8];
  struct rankCtx* cs[8];
  ncclComm_t comms[8];
  for (int r = 0; r < nranks; r++) {
    setUpRank(&c[r], r);
    cs[r] = &c[r];
  }
  NK(ncclCommInitAll(comms, nranks, NULL));
  for (int r = 0; r < nranks; r++) c[r].comm = comms[r];
  driveRanks(cs, nranks);
  for (int r = 0; r < nranks; r++) tearDownRank(&c[r]);
}

static double bareLaunch(CUfunction fn, void** params) {
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double* t = malloc(sizeof(double) * (size_t)calls);
  if (t == NULL) exit(1);
  for (int i = 0; i < warmup + calls; i++) {
    const double t0 = benchNowUs();
    if (launchFn(fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)stream, params, NULL) != CUDA_SUCCESS) exit(1);
    if (i >= warmup) t[i - warmup] = benchNowUs() - t0;
    if ((i + 1) % syncEvery == 0) CK(cudaStreamSynchronize(stream));
  }
  CK(cudaStreamSynchronize(stream));
  double p10, p50, p90;
  summarize(t, calls, &p10, &p50, &p90);
  free(t);
  CK(cudaStreamDestroy(stream));
  return p50;
}

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) nranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--sync")) syncEvery = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--bytes")) bytes = (size_t)atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--turns")) turns = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--one-thread")) oneThreadMode = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--coll") && collOf(argv[i + 1]) >= 0)
      coll = (enum coll)collOf(argv[i + 1]);
    else {
      fprintf(stderr, "usage: host_path [--ranks 2] [--calls 10000] [--rounds 10] [--sync 100] "
              "[--bytes 1024] [--turns K] [--one-thread 1] "
              "[--coll all_reduce|all_gather|reduce_scatter]\n");
      return 2;
    }
  }
  kindNames[KIND_OURS] = collNames[coll];
  /* Turns: every rank's stream is synchronized only after its peers had their turn; every round
   * holds whole blocks of --sync calls. */
  if (nranks < 1 || nranks > 8 || calls < 10 || syncEvery < 1 ||
      (bytes != 0 && bytes < sizeof(float) * (coll == COLL_ALLREDUCE ? 1u : (size_t)nranks)) ||
      turns < 0 || (turns > 0 && syncEvery % turns != 0) || rounds < 1 ||
      calls % (rounds * syncEvery) != 0 || warmup % syncEvery != 0 || (oneThreadMode && turns)) {
    fprintf(stderr, "host_path: --calls must be a multiple of --rounds x --sync, --sync of --turns; "
            "--one-thread takes no --turns; all-gather and reduce-scatter need a float per rank\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    fprintf(stderr, "host_path: no GPU\n");
    return 77;
  }
  /* Bare launches first, with the GPU otherwise idle. */
  loadBareKernels();
  char big[328] = {0};
  unsigned small = 1;
  void* bigArgs[] = {big};
  void* smallArgs[] = {&small};
  const double bareBig = bareLaunch(bigFn, bigArgs);
  const double bareSmall = bareLaunch(smallFn, smallArgs);

  if (oneThreadMode) {
    pthread_barrier_init(&barrier, NULL, 1);
    oneThread();
  } else {
    NK(ncclGetUniqueId(&uid));
    pthread_barrier_init(&barrier, NULL, (unsigned)nranks);
    pthread_t threads[8];
    for (long r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rankMain, (void*)r);
    for (int r = 0; r < nranks; r++) pthread_join(threads[r], NULL);
  }
  pthread_barrier_destroy(&barrier);

  int version = 0;
  (void)ncclGetVersion(&version);
  printf("host_path: %d ranks on one GPU, %s of %zu bytes of floats (sum), %d calls per rank of "
         "each kind in %d rounds, sync every %d, %s %d (NCCL version %d)\n", nranks,
         collNames[coll], bytes, calls, rounds,
         syncEvery, oneThreadMode ? "one thread driving every rank, call by call" :
         turns ? "rank threads taking turns of" : "rank threads calling at once", turns, version);
  printf("  bare cuLaunchKernel, idle GPU: %.3f us (328-byte argument), %.3f us (4-byte)\n",
         bareBig, bareSmall);
  printf("  kinds: %s = ours; %s = a bare launch of a kernel that waits for its peers; %s = that "
         "launch with the CUDA runtime calls our path makes around it; %s = the same calls to "
         "the driver\n", kindNames[KIND_OURS], kindNames[KIND_MEET], kindNames[KIND_REPLICA],
         kindNames[KIND_DRIVER_REPLICA]);
  for (int r = 0; r < nranks; r++)
    for (int k = 0; k < KINDS; k++)
      printf("  rank %d %-13s median %.3f us (p10 %.3f, p90 %.3f)\n", r, kindNames[k],
             timed[r][k].p50, timed[r][k].p10, timed[r][k].p90);
  /* Per round, the slowest rank of each kind; then the median over rounds of the differences. */
  double* oursOverMeet = malloc(sizeof(double) * (size_t)rounds);
  double* callsOverMeet = malloc(sizeof(double) * (size_t)rounds);
  double* driverOverMeet = malloc(sizeof(double) * (size_t)rounds);
  if (oursOverMeet == NULL || callsOverMeet == NULL || driverOverMeet == NULL) return 1;
  printf("  round: slowest rank's median of ours / meet / replica / driver replica (us)\n");
  for (int i = 0; i < rounds; i++) {
    double worst[KINDS] = {0};
    for (int r = 0; r < nranks; r++)
      for (int k = 0; k < KINDS; k++)
        if (roundMedian[r][k][i] > worst[k]) worst[k] = roundMedian[r][k][i];
    printf("  %5d: %.3f / %.3f / %.3f / %.3f\n", i, worst[KIND_OURS], worst[KIND_MEET],
           worst[KIND_REPLICA], worst[KIND_DRIVER_REPLICA]);
    oursOverMeet[i] = worst[KIND_OURS] - worst[KIND_MEET];
    callsOverMeet[i] = worst[KIND_REPLICA] - worst[KIND_MEET];
    driverOverMeet[i] = worst[KIND_DRIVER_REPLICA] - worst[KIND_MEET];
  }
  double p10, p50, p90, c10, c50, c90, d10, d50, d90;
  summarize(oursOverMeet, rounds, &p10, &p50, &p90);
  summarize(callsOverMeet, rounds, &c10, &c50, &c90);
  summarize(driverOverMeet, rounds, &d10, &d50, &d90);
  printf("  ours minus meet, median over rounds: %.3f us (p10 %.3f, p90 %.3f); of it the CUDA "
         "calls around the launch (replica minus meet): %.3f us (p10 %.3f, p90 %.3f); the same "
         "calls to the driver: %.3f us (p10 %.3f, p90 %.3f)\n", p50, p10, p90, c50, c10, c90,
         d50, d10, d90);
  free(oursOverMeet);
  free(callsOverMeet);
  free(driverOverMeet);
  return 0;
}
