/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver (nccl-tests' common.cu, rewritten in C): ranks, communicators, buffers,
 * warm-up, timed loops (eager or one CUDA graph per replay), data checks, and the table. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <nccl.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERF_HAVE_CUDA 1
#include "common.h"
#include "compare.h"
#include "world.h"

_Static_assert((int)ncclInt8 == PERF_INT8 && (int)ncclUint64 == PERF_UINT64 && (int)ncclFloat16 == PERF_HALF &&
                   (int)ncclFloat32 == PERF_FLOAT && (int)ncclFloat64 == PERF_DOUBLE &&
                   (int)ncclBfloat16 == PERF_BF16 && (int)ncclFloat8e4m3 == PERF_FP8E4M3 &&
                   (int)ncclFloat8e5m2 == PERF_FP8E5M2,
               "perfType codes must equal ncclDataType_t");
_Static_assert((int)ncclSum == PERF_SUM && (int)ncclProd == PERF_PROD && (int)ncclMax == PERF_MAX &&
                   (int)ncclMin == PERF_MIN && (int)ncclAvg == PERF_AVG,
               "perfOp codes must equal ncclRedOp_t");

#define PERF_LOG_CUDA(e, call) \
  fprintf(stderr, "perf: CUDA error '%s' at %s:%d: %s\n", cudaGetErrorString(e), __FILE__, __LINE__, call)
#define PERF_LOG_NCCL(r, call)                                                                         \
  fprintf(stderr, "perf: NCCL error '%s' at %s:%d: %s (%s)\n", ncclGetErrorString(r), __FILE__, __LINE__, \
          call, ncclGetLastError(NULL))

#define CUDA_TRY(call)                  \
  do {                                  \
    cudaError_t e_ = (call);            \
    if (e_ != cudaSuccess) {            \
      PERF_LOG_CUDA(e_, #call);         \
      return PERF_EXIT_FAILURE;         \
    }                                   \
  } while (0)
#define NCCL_TRY(call)                                       \
  do {                                                       \
    ncclResult_t r_ = (call);                                \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {         \
      PERF_LOG_NCCL(r_, #call);                              \
      return PERF_EXIT_FAILURE;                              \
    }                                                        \
  } while (0)
#define PERF_TRY(call)     \
  do {                     \
    int rc_ = (call);      \
    if (rc_ != 0) return rc_; \
  } while (0)
/* Cleanup-path variant: logs and goes on. */
#define CUDA_WARN(call)                     \
  do {                                      \
    cudaError_t e_ = (call);                \
    if (e_ != cudaSuccess) PERF_LOG_CUDA(e_, #call); \
  } while (0)
#define NCCL_WARN(call)                     \
  do {                                      \
    ncclResult_t r_ = (call);               \
    if (r_ != ncclSuccess) PERF_LOG_NCCL(r_, #call); \
  } while (0)

struct perfGpu {
  int dev, rank;
  ncclComm_t comm;
  cudaStream_t stream;
  void *sendAlloc, *recvAlloc; /* as allocated */
  char *send, *recv;           /* shifted by -u */
  void *sendHandle, *recvHandle;
  ncclWindow_t sendWin, recvWin;
  unsigned long long* wrongDev;
  ncclRedOp_t op;
  int opCreated;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
};

struct perfRun {
  const struct perfColl* coll;
  struct perfOptions opt;
  struct perfWorld world;
  const char* prog;
  int nranks, nLocal, firstRank;
  int nDevices; /* visible GPUs (--share_gpus wraps local ranks onto them) */
  size_t allocBytes;
  int ncclVersion;
  FILE* csv;
  struct perfGpu* gpus;
};

struct perfThread {
  struct perfRun* run;
  int index, nGpus, isMain;
  struct perfGpu* gpus;
  pthread_t tid;
  int rc;
  double bwSum;
  int bwCount, errors;
  uint64_t rep;
  /* the test being timed */
  int type, op;
  struct perfCounts counts;
};

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int isMainPrinter(const struct perfThread* t) { return t->isMain; }

/* ---- launching and completing ------------------------------------------------------------ */

static int launchOne(struct perfThread* t, struct perfGpu* g, int inPlace, size_t shift) {
  const struct perfCounts* c = &t->counts;
  size_t elt = (size_t)perfTypeSize(t->type);
  char* recv = g->recv + shift;
  char* send = inPlace ? recv + c->sendInplaceOffset * elt * (size_t)g->rank : g->send + shift;
  char* out = recv + (inPlace ? c->recvInplaceOffset * elt * (size_t)g->rank : 0);
  ncclDataType_t dt = (ncclDataType_t)t->type;
  switch (t->run->coll->kind) {
    case PERF_ALLREDUCE: NCCL_TRY(ncclAllReduce(send, out, c->paramCount, dt, g->op, g->comm, g->stream)); break;
    case PERF_ALLGATHER: NCCL_TRY(ncclAllGather(send, out, c->paramCount, dt, g->comm, g->stream)); break;
    case PERF_REDUCESCATTER:
      NCCL_TRY(ncclReduceScatter(send, out, c->paramCount, dt, g->op, g->comm, g->stream));
      break;
    default: return PERF_EXIT_FAILURE;
  }
  return 0;
}

/* Waits for all of this thread's streams, watching NCCL's async errors, -T and a failed peer. */
static int completeColl(struct perfThread* t) {
  const struct perfOptions* opt = &t->run->opt;
  double start = nowSec();
  int remaining = t->nGpus;
  int done[t->nGpus];
  memset(done, 0, sizeof(done));
  while (remaining > 0) {
    int progressed = 0;
    for (int i = 0; i < t->nGpus; i++) {
      if (done[i]) continue;
      cudaError_t e = cudaStreamQuery(t->gpus[i].stream);
      if (e == cudaSuccess) {
        done[i] = 1;
        remaining--;
        progressed = 1;
        continue;
      }
      if (e != cudaErrorNotReady) {
        PERF_LOG_CUDA(e, "cudaStreamQuery");
        return PERF_EXIT_FAILURE;
      }
      ncclResult_t async = ncclSuccess;
      NCCL_TRY(ncclCommGetAsyncError(t->gpus[i].comm, &async));
      int timedOut = opt->timeout > 0 && nowSec() - start > opt->timeout;
      if (async != ncclSuccess || timedOut || perfWorldAborted(&t->run->world)) {
        if (async != ncclSuccess)
          fprintf(stderr, "perf: rank %d: NCCL async error '%s', aborting\n", t->gpus[i].rank,
                  ncclGetErrorString(async));
        else if (timedOut)
          fprintf(stderr, "perf: rank %d: test timeout (%d s), aborting\n", t->gpus[i].rank, opt->timeout);
        for (int k = 0; k < t->nGpus; k++) NCCL_WARN(ncclCommAbort(t->gpus[k].comm));
        for (int k = 0; k < t->nGpus; k++) t->gpus[k].comm = NULL;
        return PERF_EXIT_FAILURE;
      }
    }
    if (!progressed) sched_yield();
  }
  return 0;
}

static int startColl(struct perfThread* t, int inPlace, int iter) {
  const struct perfOptions* opt = &t->run->opt;
  size_t elt = (size_t)perfTypeSize(t->type);
  /* Move through the buffer from one iteration to the next (nccl-tests does, against caches). */
  size_t total = (t->counts.sendCount > t->counts.recvCount ? t->counts.sendCount : t->counts.recvCount) * elt;
  size_t steps = total ? opt->maxBytes / total : 1;
  if (steps == 0) steps = 1;
  size_t shift = total * ((size_t)iter % steps);
  if (t->nGpus > 1) NCCL_TRY(ncclGroupStart());
  for (int i = 0; i < t->nGpus; i++) {
    int rc = launchOne(t, &t->gpus[i], inPlace, shift);
    if (rc) {
      if (t->nGpus > 1) NCCL_WARN(ncclGroupEnd());
      return rc;
    }
  }
  if (t->nGpus > 1) NCCL_TRY(ncclGroupEnd());
  if (opt->blocking == 1 || opt->blocking == 2) PERF_TRY(completeColl(t));
  if (opt->blocking == 1) PERF_TRY(perfBarrier(&t->run->world, t->index));
  return 0;
}

/* ---- data ------------------------------------------------------------------------------ */

/* Poisons the outputs (0xff: NaN in every float type) and writes the inputs for `seed`. */
static int initData(struct perfThread* t, int inPlace, uint64_t seed) {
  const struct perfCounts* c = &t->counts;
  const struct perfColl* coll = t->run->coll;
  size_t elt = (size_t)perfTypeSize(t->type);
  for (int i = 0; i < t->nGpus; i++) {
    struct perfGpu* g = &t->gpus[i];
    CUDA_TRY(cudaSetDevice(g->dev));
    CUDA_TRY(cudaMemsetAsync(g->recv, 0xff, c->recvCount * elt, g->stream));
    char* in = inPlace ? g->recv + c->sendInplaceOffset * elt * (size_t)g->rank : g->send;
    CUDA_TRY(perfFillDevice(in, c->sendCount, coll->kind, t->type, t->op, t->run->nranks, g->rank, seed, g->stream));
    CUDA_TRY(cudaStreamSynchronize(g->stream));
  }
  return 0;
}

static int checkData(struct perfThread* t, int inPlace, uint64_t seed, int64_t* wrong) {
  const struct perfCounts* c = &t->counts;
  const struct perfColl* coll = t->run->coll;
  size_t elt = (size_t)perfTypeSize(t->type);
  size_t block = coll->kind == PERF_ALLGATHER ? c->sendCount : c->recvCount;
  *wrong = 0;
  for (int i = 0; i < t->nGpus; i++) {
    struct perfGpu* g = &t->gpus[i];
    CUDA_TRY(cudaSetDevice(g->dev));
    const char* out = g->recv + (inPlace ? c->recvInplaceOffset * elt * (size_t)g->rank : 0);
    CUDA_TRY(cudaMemsetAsync(g->wrongDev, 0, sizeof(*g->wrongDev), g->stream));
    CUDA_TRY(perfCheckDevice(out, c->recvCount, coll->kind, t->type, t->op, t->run->nranks, g->rank, seed, block,
                             g->wrongDev, g->stream));
    unsigned long long n = 0;
    CUDA_TRY(cudaMemcpyAsync(&n, g->wrongDev, sizeof(n), cudaMemcpyDeviceToHost, g->stream));
    CUDA_TRY(cudaStreamSynchronize(g->stream));
    *wrong += (int64_t)n;
  }
  return 0;
}

/* ---- graphs ---------------------------------------------------------------------------- */

static int beginCapture(struct perfThread* t, enum cudaStreamCaptureMode mode) {
  for (int i = 0; i < t->nGpus; i++) CUDA_TRY(cudaStreamBeginCapture(t->gpus[i].stream, mode));
  return 0;
}

static int endCapture(struct perfThread* t) {
  int rc = 0;
  for (int i = 0; i < t->nGpus; i++) {
    cudaError_t e = cudaStreamEndCapture(t->gpus[i].stream, &t->gpus[i].graph);
    if (e != cudaSuccess) {
      PERF_LOG_CUDA(e, "cudaStreamEndCapture");
      rc = PERF_EXIT_FAILURE;
    }
  }
  for (int i = 0; i < t->nGpus && rc == 0; i++) {
    CUDA_TRY(cudaSetDevice(t->gpus[i].dev));
    CUDA_TRY(cudaGraphInstantiate(&t->gpus[i].exec, t->gpus[i].graph, 0));
    /* Uploaded before any replay: without it, cudaGraphLaunch sometimes blocked every rank
     * thread of a process holding several ranks (test/core/README.md, "Graph uploads"). */
    CUDA_TRY(cudaGraphUpload(t->gpus[i].exec, t->gpus[i].stream));
    CUDA_TRY(cudaStreamSynchronize(t->gpus[i].stream));
  }
  return rc;
}

static void destroyGraphs(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++) {
    if (t->gpus[i].exec) CUDA_WARN(cudaGraphExecDestroy(t->gpus[i].exec));
    if (t->gpus[i].graph) CUDA_WARN(cudaGraphDestroy(t->gpus[i].graph));
    t->gpus[i].exec = NULL;
    t->gpus[i].graph = NULL;
  }
}

static int launchGraphs(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++) CUDA_TRY(cudaGraphLaunch(t->gpus[i].exec, t->gpus[i].stream));
  return 0;
}

/* ---- one measurement (nccl-tests' BenchTime) --------------------------------------------- */

struct perfMeasure {
  double usec, algBw, busBw;
  int64_t wrong; /* -1: not checked */
};

static int timedLoop(struct perfThread* t, int inPlace, double* deltaSec, double* cpuSec) {
  const struct perfOptions* opt = &t->run->opt;
  struct perfWorld* w = &t->run->world;
  int graph = opt->graphLaunches > 0;
  if (graph) PERF_TRY(beginCapture(t, cudaStreamCaptureModeThreadLocal));
  double collOnly = 0;
  double start = nowSec();
  for (int iter = 0; iter < opt->iters; iter++) {
    double t0 = nowSec();
    int rc = startColl(t, inPlace, iter);
    if (rc) {
      if (graph) (void)endCapture(t), destroyGraphs(t);
      return rc;
    }
    if (opt->blocking == 3) {
      PERF_TRY(completeColl(t));
      collOnly += nowSec() - t0;
      PERF_TRY(perfBarrier(w, t->index));
    }
  }
  if (graph) {
    int rc = endCapture(t);
    if (rc == 0) rc = perfBarrier(w, t->index);
    start = nowSec();
    for (int l = 0; l < opt->graphLaunches && rc == 0; l++) rc = launchGraphs(t);
    if (rc) {
      destroyGraphs(t);
      return rc;
    }
  }
  double ops = (double)opt->iters * (graph ? opt->graphLaunches : 1);
  *cpuSec = (opt->blocking == 3 ? collOnly : nowSec() - start) / ops;
  int rc = completeColl(t);
  *deltaSec = (opt->blocking == 3 ? collOnly : nowSec() - start) / ops;
  if (graph) destroyGraphs(t);
  return rc;
}

static int checkOnce(struct perfThread* t, int inPlace, int64_t* wrong) {
  const struct perfOptions* opt = &t->run->opt;
  uint64_t seed = ++t->rep;
  PERF_TRY(initData(t, inPlace, seed));
  if (opt->graphLaunches > 0) {
    /* check what a replay computes: one op captured, then launched */
    PERF_TRY(beginCapture(t, t->run->opt.nThreads > 1 ? cudaStreamCaptureModeThreadLocal
                                                       : cudaStreamCaptureModeGlobal));
    int rc = startColl(t, inPlace, 0);
    int rcEnd = endCapture(t);
    if (rc == 0) rc = rcEnd;
    if (rc == 0) rc = launchGraphs(t);
    if (rc == 0) rc = completeColl(t);
    destroyGraphs(t);
    PERF_TRY(rc);
  } else {
    PERF_TRY(startColl(t, inPlace, 0));
    PERF_TRY(completeColl(t));
  }
  return checkData(t, inPlace, seed, wrong);
}

static int benchTime(struct perfThread* t, int inPlace, struct perfMeasure* m) {
  struct perfRun* run = t->run;
  const struct perfOptions* opt = &run->opt;
  struct perfWorld* w = &run->world;
  if (opt->check) PERF_TRY(initData(t, inPlace, 99)); /* realistic data while timing */
  PERF_TRY(startColl(t, inPlace, 0));
  PERF_TRY(completeColl(t));
  PERF_TRY(perfBarrier(w, t->index));

  double deltaSec = 0, cpuSec = 0;
  PERF_TRY(timedLoop(t, inPlace, &deltaSec, &cpuSec));
  double reported = opt->reportCputime ? cpuSec : deltaSec;
  static const int modes[] = {PERF_RED_FIRST, PERF_RED_SUM, PERF_RED_MIN, PERF_RED_MAX};
  PERF_TRY(perfAllreduce(w, t->index, &deltaSec, modes[opt->average]));
  PERF_TRY(perfAllreduce(w, t->index, &reported, modes[opt->average]));
  if (opt->average == PERF_AVG_MEAN) {
    deltaSec /= (double)w->nProcs * w->nThreads;
    reported /= (double)w->nProcs * w->nThreads;
  }
  run->coll->getBw(t->counts.paramCount, perfTypeSize(t->type), deltaSec, run->nranks, &m->algBw, &m->busBw);
  m->usec = reported * 1e6;
  PERF_TRY(perfBarrier(w, t->index));

  m->wrong = opt->check ? 0 : -1;
  for (int c = 0; c < opt->check; c++) {
    int64_t mine = 0;
    PERF_TRY(checkOnce(t, inPlace, &mine));
    double total = (double)mine;
    PERF_TRY(perfAllreduce(w, t->index, &total, PERF_RED_SUM));
    m->wrong = (int64_t)total;
    if (m->wrong) break;
  }
  if (m->wrong > 0) t->errors++;
  t->bwSum += m->busBw;
  t->bwCount++;
  return 0;
}

/* ---- one (type, op) sweep (nccl-tests' TimeTest) ----------------------------------------- */

static void setupCounts(struct perfThread* t, size_t bytes) {
  int elt = perfTypeSize(t->type);
  t->run->coll->getCounts(bytes / (size_t)elt, elt, t->run->nranks, &t->counts);
}

static int createOps(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++) {
    struct perfGpu* g = &t->gpus[i];
    g->opCreated = 0;
    if (t->op != PERF_MULSUM) {
      g->op = t->run->coll->hasOp ? (ncclRedOp_t)t->op : ncclSum;
      continue;
    }
    uint64_t scalar = perfEncode(t->type, (double)perfMulsumScalar(g->rank));
    NCCL_TRY(ncclRedOpCreatePreMulSum(&g->op, &scalar, (ncclDataType_t)t->type, ncclScalarHostImmediate, g->comm));
    g->opCreated = 1;
  }
  return 0;
}

static void destroyOps(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++)
    if (t->gpus[i].opCreated && t->gpus[i].comm) NCCL_WARN(ncclRedOpDestroy(t->gpus[i].op, t->gpus[i].comm));
}

/* 1 when the NCCL in use refuses this type/op with ncclInvalidArgument (one call of one element
 * on every local GPU; the same answer on every rank, so no rank is left waiting). Otherwise the
 * call ran; it is completed here. -d all -o all then covers exactly what that NCCL accepts. */
static int refusedByNccl(struct perfThread* t, int* refused) {
  ncclDataType_t dt = (ncclDataType_t)t->type;
  ncclResult_t first = ncclSuccess;
  *refused = 0;
  if (t->nGpus > 1) NCCL_TRY(ncclGroupStart());
  for (int i = 0; i < t->nGpus; i++) {
    struct perfGpu* g = &t->gpus[i];
    CUDA_TRY(cudaSetDevice(g->dev));
    ncclResult_t r = ncclSuccess;
    switch (t->run->coll->kind) {
      case PERF_ALLREDUCE: r = ncclAllReduce(g->send, g->recv, 1, dt, g->op, g->comm, g->stream); break;
      case PERF_ALLGATHER: r = ncclAllGather(g->send, g->recv, 1, dt, g->comm, g->stream); break;
      case PERF_REDUCESCATTER: r = ncclReduceScatter(g->send, g->recv, 1, dt, g->op, g->comm, g->stream); break;
      default: return PERF_EXIT_FAILURE;
    }
    if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
  }
  if (t->nGpus > 1) {
    ncclResult_t r = ncclGroupEnd();
    if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
  }
  if (first == ncclInvalidArgument) {
    *refused = 1;
    return 0;
  }
  if (first != ncclSuccess) {
    PERF_LOG_NCCL(first, "probe call");
    return PERF_EXIT_FAILURE;
  }
  return completeColl(t);
}

static int timeTest(struct perfThread* t, int type, int op) {
  struct perfRun* run = t->run;
  const struct perfOptions* opt = &run->opt;
  t->type = type;
  t->op = op;
  PERF_TRY(perfBarrier(&run->world, t->index));
  size_t shiftBytes = (size_t)opt->unalign * (size_t)perfTypeSize(type);
  for (int i = 0; i < t->nGpus; i++) {
    t->gpus[i].send = (char*)t->gpus[i].sendAlloc + shiftBytes;
    t->gpus[i].recv = (char*)t->gpus[i].recvAlloc + shiftBytes;
  }
  PERF_TRY(createOps(t));
  int rc = 0, refused = 0;
  if (opt->type == PERF_ALL || opt->op == PERF_ALL) {
    rc = refusedByNccl(t, &refused);
    if (rc == 0 && refused) {
      if (isMainPrinter(t))
        printf("# %s %s %s: skipped, the NCCL in use refuses it (ncclInvalidArgument)\n", run->coll->name,
               perfTypeName(type), run->coll->hasOp ? perfOpName(op) : "none");
      goto destroy_ops;
    }
    if (rc) goto destroy_ops;
  }
  size_t nWarm = perfWarmupSizes(opt, NULL, 0);
  size_t* sizes = malloc(sizeof(size_t) * (nWarm > 0 ? nWarm : 1));
  if (sizes == NULL) {
    rc = PERF_EXIT_FAILURE;
    goto destroy_ops;
  }
  perfWarmupSizes(opt, sizes, nWarm);
  for (size_t s = 0; s < nWarm && rc == 0; s++) {
    setupCounts(t, sizes[s]);
    for (int iter = 0; iter < opt->warmupIters && rc == 0; iter++) rc = startColl(t, 0, iter);
    if (rc == 0) rc = completeColl(t);
  }
  free(sizes);
  if (rc) goto destroy_ops;

  size_t nSizes = perfSweepSizes(opt, NULL, 0);
  sizes = malloc(sizeof(size_t) * nSizes);
  if (sizes == NULL) {
    rc = PERF_EXIT_FAILURE;
    goto destroy_ops;
  }
  perfSweepSizes(opt, sizes, nSizes);
  const char* opName = run->coll->hasOp ? perfOpName(op) : "none";
  for (int cycle = 0; cycle < opt->runCycles && rc == 0; cycle++) {
    for (size_t s = 0; s < nSizes && rc == 0; s++) {
      setupCounts(t, sizes[s]);
      size_t elt = (size_t)perfTypeSize(type);
      size_t shown = (t->counts.sendCount > t->counts.recvCount ? t->counts.sendCount : t->counts.recvCount) * elt;
      if (isMainPrinter(t)) perfPrintLinePreamble(stdout, shown, t->counts.paramCount, perfTypeName(type), opName, -1);
      struct perfMeasure m[2];
      for (int inPlace = 0; inPlace < 2 && rc == 0; inPlace++) {
        rc = benchTime(t, inPlace, &m[inPlace]);
        if (rc == 0 && isMainPrinter(t))
          perfPrintLineBody(stdout, m[inPlace].usec, m[inPlace].algBw, m[inPlace].busBw, opt->check > 0,
                            m[inPlace].wrong);
      }
      if (rc) break;
      if (isMainPrinter(t)) {
        printf("\n");
        fflush(stdout);
        if (run->csv) {
          struct perfResult r;
          memset(&r, 0, sizeof(r));
          snprintf(r.coll, sizeof(r.coll), "%s", run->coll->name);
          snprintf(r.library, sizeof(r.library), "%s", opt->library ? opt->library : "libsymmcoll");
          snprintf(r.type, sizeof(r.type), "%s", perfTypeName(type));
          snprintf(r.op, sizeof(r.op), "%s", opName);
          r.bytes = shown;
          r.count = t->counts.paramCount;
          r.root = -1;
          for (int k = 0; k < 2; k++) {
            r.usec[k] = m[k].usec;
            r.algBw[k] = m[k].algBw;
            r.busBw[k] = m[k].busBw;
            r.wrong[k] = m[k].wrong;
          }
          perfCsvRow(run->csv, &r);
          fflush(run->csv);
        }
      }
    }
  }
  free(sizes);
destroy_ops:
  destroyOps(t);
  return rc;
}

static int runTests(struct perfThread* t) {
  const struct perfOptions* opt = &t->run->opt;
  int firstType = opt->type == PERF_ALL ? 0 : opt->type;
  int lastType = opt->type == PERF_ALL ? PERF_NUM_TYPES - 1 : opt->type;
  int hasOp = t->run->coll->hasOp;
  int firstOp = !hasOp ? PERF_SUM : opt->op == PERF_ALL ? 0 : opt->op;
  int lastOp = !hasOp ? PERF_SUM : opt->op == PERF_ALL ? PERF_NUM_OPS - 1 : opt->op;
  CUDA_TRY(cudaSetDevice(t->gpus[0].dev));
  for (int type = firstType; type <= lastType; type++) {
    /* fp8 needs Hopper or later, as in nccl-tests */
    if ((type == PERF_FP8E4M3 || type == PERF_FP8E5M2) && opt->type == PERF_ALL) {
      int major = 0;
      CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, t->gpus[0].dev));
      if (major < 9) continue;
    }
    for (int op = firstOp; op <= lastOp; op++) PERF_TRY(timeTest(t, type, op));
  }
  return 0;
}

static void* threadMain(void* arg) {
  struct perfThread* t = arg;
  t->rc = runTests(t);
  if (t->rc) perfWorldAbort(&t->run->world);
  return NULL;
}

/* ---- process setup --------------------------------------------------------------------- */

#define PERF_DEVICE_TEXT 16384

/* The GPU of this process's local rank i: one each, or wrapped onto the GPUs (--share_gpus). */
static int localDevice(const struct perfRun* run, int firstDev, int i) {
  return run->opt.shareGpus ? (firstDev + i) % run->nDevices : firstDev + i;
}

static int deviceReport(struct perfRun* run, int firstDev, char* text, size_t cap, size_t* minMem) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  size_t len = 0;
  for (int i = 0; i < run->nLocal; i++) {
    int dev = localDevice(run, firstDev, i);
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    if (prop.totalGlobalMem < *minMem) *minMem = prop.totalGlobalMem;
    len += (size_t)snprintf(text + len, len < cap ? cap - len : 0,
                            "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n",
                            run->firstRank + i, 0, (int)getpid(), host, dev, prop.pciDomainID, prop.pciBusID,
                            prop.pciDeviceID, prop.name);
    if (run->opt.reportCputime && len < cap) {
      /* informational: an attribute this runtime does not report shows as -1 */
      static const enum cudaDeviceAttr attrs[6] = {
          cudaDevAttrMultiProcessorCount, cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
          cudaDevAttrMemoryClockRate,     cudaDevAttrGlobalMemoryBusWidth,   cudaDevAttrL2CacheSize};
      int v[6];
      for (int k = 0; k < 6; k++)
        if (cudaDeviceGetAttribute(&v[k], attrs[k], dev) != cudaSuccess) v[k] = -1;
      (void)cudaGetLastError();
      int sms = v[0], major = v[1], minor = v[2], memClock = v[3], busWidth = v[4], l2 = v[5];
      len += (size_t)snprintf(text + len, len < cap ? cap - len : 0,
                              "#          sm_%d%d, %d SMs, %.1f GiB, memory %d MHz x %d bit, L2 %d MiB\n", major,
                              minor, sms, (double)prop.totalGlobalMem / (1 << 30), memClock < 0 ? -1 : memClock / 1000,
                              busWidth, l2 < 0 ? -1 : l2 >> 20);
    }
  }
  if (len >= cap) strcpy(text + cap - 5, "...\n");
  return 0;
}

static void printHeader(const struct perfRun* run) {
  const struct perfOptions* o = &run->opt;
  printf("# libsymmcoll perf (nccl-tests format) nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE,
         run->ncclVersion);
  printf("# Collective test starting: %s\n", run->prog);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: %d unalign: %d\n",
         o->nThreads, o->nGpus, o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : o->stepBytes,
         o->stepFactor > 1 ? "factor" : "bytes", o->warmupIters, o->iters, o->check, o->graphLaunches, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each iteration\n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each iteration, no barrier\n");
  if (o->blocking == 3) printf("# Blocking Enabled: wait and barrier after each iteration; time excludes barrier\n");
  printf("# Ranks: %d (%d process%s via %s, %d thread%s x %d GPU%s each)%s%s\n", run->nranks, run->world.nProcs,
         run->world.nProcs > 1 ? "es" : "", run->world.ops->name, o->nThreads, o->nThreads > 1 ? "s" : "",
         o->nGpus, o->nGpus > 1 ? "s" : "",
         o->registration == PERF_REG_SYMMETRIC ? ", symmetric registration"
         : o->registration == PERF_REG_LOCAL   ? ", local registration"
                                               : "",
         o->alloc == PERF_ALLOC_CUDA ? ", cudaMalloc buffers" : "");
  const char* disabled = getenv("SYMMCOLL_DISABLE");
  printf("# SYMMCOLL_DISABLE=%s\n", disabled ? disabled : "(unset)");
  printf("#\n# Using devices\n");
}

static int allocBuffers(struct perfRun* run) {
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    CUDA_TRY(cudaSetDevice(g->dev));
    if (run->opt.alloc == PERF_ALLOC_CUDA) {
      CUDA_TRY(cudaMalloc(&g->sendAlloc, run->allocBytes));
      CUDA_TRY(cudaMalloc(&g->recvAlloc, run->allocBytes));
    } else {
      NCCL_TRY(ncclMemAlloc(&g->sendAlloc, run->allocBytes));
      NCCL_TRY(ncclMemAlloc(&g->recvAlloc, run->allocBytes));
    }
    CUDA_TRY(cudaMalloc((void**)&g->wrongDev, sizeof(*g->wrongDev)));
  }
  return 0;
}

static int registerBuffers(struct perfRun* run) {
  if (run->opt.registration == PERF_REG_NONE) return 0;
  NCCL_TRY(ncclGroupStart());
  int rc = 0;
  for (int i = 0; i < run->nLocal && rc == 0; i++) {
    struct perfGpu* g = &run->gpus[i];
    ncclResult_t r;
    if (run->opt.registration == PERF_REG_SYMMETRIC) {
      r = ncclCommWindowRegister(g->comm, g->sendAlloc, run->allocBytes, &g->sendWin, NCCL_WIN_COLL_SYMMETRIC);
      if (r == ncclSuccess)
        r = ncclCommWindowRegister(g->comm, g->recvAlloc, run->allocBytes, &g->recvWin, NCCL_WIN_COLL_SYMMETRIC);
    } else {
      r = ncclCommRegister(g->comm, g->sendAlloc, run->allocBytes, &g->sendHandle);
      if (r == ncclSuccess) r = ncclCommRegister(g->comm, g->recvAlloc, run->allocBytes, &g->recvHandle);
    }
    if (r != ncclSuccess) {
      PERF_LOG_NCCL(r, run->opt.registration == PERF_REG_SYMMETRIC ? "ncclCommWindowRegister" : "ncclCommRegister");
      rc = PERF_EXIT_FAILURE;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess && rc == 0) {
    PERF_LOG_NCCL(end, "ncclGroupEnd (registration)");
    rc = PERF_EXIT_FAILURE;
  }
  return rc;
}

static void teardown(struct perfRun* run) {
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    if (cudaSetDevice(g->dev) != cudaSuccess) continue;
    if (g->comm) {
      if (g->sendWin) NCCL_WARN(ncclCommWindowDeregister(g->comm, g->sendWin));
      if (g->recvWin) NCCL_WARN(ncclCommWindowDeregister(g->comm, g->recvWin));
      if (g->sendHandle) NCCL_WARN(ncclCommDeregister(g->comm, g->sendHandle));
      if (g->recvHandle) NCCL_WARN(ncclCommDeregister(g->comm, g->recvHandle));
    }
  }
  for (int i = 0; i < run->nLocal; i++) /* after every deregistration: they may need all ranks */
    if (run->gpus[i].comm) NCCL_WARN(ncclCommDestroy(run->gpus[i].comm));
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    if (cudaSetDevice(g->dev) != cudaSuccess) continue;
    if (run->opt.alloc == PERF_ALLOC_CUDA) {
      if (g->sendAlloc) CUDA_WARN(cudaFree(g->sendAlloc));
      if (g->recvAlloc) CUDA_WARN(cudaFree(g->recvAlloc));
    } else {
      if (g->sendAlloc) NCCL_WARN(ncclMemFree(g->sendAlloc));
      if (g->recvAlloc) NCCL_WARN(ncclMemFree(g->recvAlloc));
    }
    if (g->wrongDev) CUDA_WARN(cudaFree(g->wrongDev));
    if (g->stream) CUDA_WARN(cudaStreamDestroy(g->stream));
  }
}

static int initComms(struct perfRun* run, const ncclUniqueId* id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (run->ncclVersion >= NCCL_VERSION(2, 28, 0)) config.nvlinkCentricSched = 1; /* as nccl-tests sets it */
#endif
  NCCL_TRY(ncclGroupStart());
  int rc = 0;
  for (int i = 0; i < run->nLocal && rc == 0; i++) {
    struct perfGpu* g = &run->gpus[i];
    cudaError_t e = cudaSetDevice(g->dev);
    if (e != cudaSuccess) {
      PERF_LOG_CUDA(e, "cudaSetDevice");
      rc = PERF_EXIT_FAILURE;
      break;
    }
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, run->nranks, *id, g->rank, &config);
    if (r != ncclSuccess) {
      PERF_LOG_NCCL(r, "ncclCommInitRankConfig");
      rc = PERF_EXIT_FAILURE;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess && rc == 0) {
    PERF_LOG_NCCL(end, "ncclGroupEnd (communicator creation)");
    rc = PERF_EXIT_FAILURE;
  }
  return rc;
}

/* Runs this process's share of the ranks (all of them unless -P or MPI split them). */
static int runProcess(struct perfRun* run) {
  struct perfOptions* opt = &run->opt;
  struct perfWorld* w = &run->world;
  int isMainProc = w->proc == 0;
  int rc = 0;
  run->nLocal = opt->nThreads * opt->nGpus;
  run->nranks = w->nProcs * run->nLocal;
  run->firstRank = w->proc * run->nLocal;

  int nDev = 0;
  cudaError_t e = cudaGetDeviceCount(&nDev);
  if (e != cudaSuccess || nDev == 0) {
    fprintf(stderr, "%s: no usable CUDA device (%s); this benchmark needs GPUs\n", run->prog,
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return PERF_EXIT_FAILURE;
  }
  run->nDevices = nDev;
  int firstDev = w->localRank * run->nLocal;
  if (firstDev + run->nLocal > nDev && !opt->shareGpus) {
    fprintf(stderr, "%s: invalid number of GPUs: %d requested but only %d were found (process %d)\n", run->prog,
            firstDev + run->nLocal, nDev, w->proc);
    return PERF_EXIT_USAGE;
  }
  if (ncclGetVersion(&run->ncclVersion) != ncclSuccess) run->ncclVersion = 0;
  if (isMainProc) printHeader(run);

  /* Device lines of every process, printed by process 0 in rank order. */
  char* mine = calloc(1, PERF_DEVICE_TEXT);
  char* all = isMainProc ? calloc((size_t)w->nProcs, PERF_DEVICE_TEXT) : NULL;
  size_t minMem = (size_t)-1;
  if (mine == NULL || (isMainProc && all == NULL)) rc = PERF_EXIT_FAILURE;
  if (rc == 0) rc = deviceReport(run, firstDev, mine, PERF_DEVICE_TEXT, &minMem);
  double memAll = (double)minMem;
  /* every process takes part in the exchanges even after a local failure, or the others hang */
  if (w->ops->gather(w->impl, mine, all, PERF_DEVICE_TEXT) != 0 ||
      w->ops->allreduce(w->impl, &memAll, PERF_RED_MIN) != 0)
    rc = PERF_EXIT_FAILURE;
  if (isMainProc && all)
    for (int p = 0; p < w->nProcs; p++) fputs(all + (size_t)p * PERF_DEVICE_TEXT, stdout);
  free(all);
  free(mine);
  if (rc) return rc;

  /* Two buffers per GPU (no expected buffer: the check computes expected values itself). Keep
   * 1 GiB plus 1 GiB per 16 GiB (at most 4) for NCCL and the library, as nccl-tests does. */
  const size_t gib = (size_t)1 << 30;
  size_t mem = (size_t)memAll;
  size_t reserve = ((mem + 16 * gib - 1) / (16 * gib)) * gib;
  if (reserve > 4 * gib) reserve = 4 * gib;
  size_t limit = mem > reserve + gib ? (mem - reserve - gib) / 2 : 0;
  if (opt->maxBytes > limit) {
    opt->maxBytes = limit;
    if (opt->minBytes > limit) opt->minBytes = limit;
    if (isMainProc) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", limit);
  }
  run->allocBytes = opt->maxBytes + 8 * (size_t)opt->unalign + 256;

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (isMainProc) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      PERF_LOG_NCCL(r, "ncclGetUniqueId");
      rc = PERF_EXIT_FAILURE;
    }
  }
  double idFailed = rc;
  if (w->ops->allreduce(w->impl, &idFailed, PERF_RED_MAX) != 0 || idFailed != 0) return PERF_EXIT_FAILURE;
  if (w->ops->bcast(w->impl, &id, sizeof(id)) != 0) return PERF_EXIT_FAILURE;

  run->gpus = calloc((size_t)run->nLocal, sizeof(*run->gpus));
  struct perfThread* threads = calloc((size_t)opt->nThreads, sizeof(*threads));
  if (run->gpus == NULL || threads == NULL) {
    rc = PERF_EXIT_FAILURE;
    goto free_arrays;
  }
  for (int i = 0; i < run->nLocal; i++) {
    run->gpus[i].dev = localDevice(run, firstDev, i);
    run->gpus[i].rank = run->firstRank + i;
    e = cudaSetDevice(run->gpus[i].dev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&run->gpus[i].stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      PERF_LOG_CUDA(e, "cudaStreamCreateWithFlags");
      rc = PERF_EXIT_FAILURE;
      goto release_resources;
    }
  }
  rc = initComms(run, &id);
  if (rc == 0) rc = allocBuffers(run);
  if (rc == 0) rc = registerBuffers(run);
  if (rc) goto release_resources;

  if (isMainProc) {
    perfPrintTableHeader(stdout, opt->reportCputime);
    fflush(stdout);
  }
  if (isMainProc && opt->csvPath) {
    run->csv = fopen(opt->csvPath, "w");
    if (run->csv == NULL)
      fprintf(stderr, "%s: cannot write %s: %s\n", run->prog, opt->csvPath, strerror(errno));
    else
      perfCsvHeader(run->csv);
  }

  for (int t = 0; t < opt->nThreads; t++) {
    threads[t].run = run;
    threads[t].index = t;
    threads[t].nGpus = opt->nGpus;
    threads[t].gpus = run->gpus + (size_t)t * opt->nGpus;
    threads[t].isMain = isMainProc && t == 0;
  }
  int started = 1;
  for (int t = 1; t < opt->nThreads; t++) {
    if (pthread_create(&threads[t].tid, NULL, threadMain, &threads[t]) != 0) {
      fprintf(stderr, "%s: pthread_create failed\n", run->prog);
      perfWorldAbort(w);
      rc = PERF_EXIT_FAILURE;
      break;
    }
    started++;
  }
  if (rc == 0) threadMain(&threads[0]);
  for (int t = 1; t < started; t++) pthread_join(threads[t].tid, NULL);

  int errors = 0;
  double bwSum = 0;
  int bwCount = 0;
  for (int t = 0; t < opt->nThreads; t++) {
    if (threads[t].rc && rc == 0) rc = threads[t].rc;
    errors += threads[t].errors;
    bwSum += threads[t].bwSum;
    bwCount += threads[t].bwCount;
  }
  if (rc == 0 && isMainProc) {
    /* errors[]: wrong counts are already summed over ranks, so process 0's count is the total */
    printf("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", bwCount ? bwSum / bwCount : 0.0);
    printf("#\n# Collective test concluded: %s\n#\n", run->prog);
  }
  if (rc == 0 && errors) rc = PERF_EXIT_WRONG;
  if (run->csv) fclose(run->csv);

release_resources:
  teardown(run);
free_arrays:
  free(threads);
  free(run->gpus);
  run->gpus = NULL;
  return rc;
}

int perfMain(const struct perfColl* coll, int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct perfRun run;
  memset(&run, 0, sizeof(run));
  run.coll = coll;
  const char* slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  run.prog = slash ? slash + 1 : (argc > 0 ? argv[0] : "perf");
  perfOptionsDefault(&run.opt);
  char err[256] = "";
  int parsed = perfParseArgs(argc, argv, &run.opt, coll->hasOp, err, sizeof(err));
  if (parsed == 1) return PERF_EXIT_OK;
  if (parsed < 0) {
    fprintf(stderr, "%s: %s\n", run.prog, err);
    return PERF_EXIT_USAGE;
  }
  if (run.opt.compareOut) return perfCompareMain(coll, &run.opt, argc, argv);
#ifdef PERF_HAVE_MPI
  /* started by mpirun (OpenMPI, or a PMI launcher): take the ranks from MPI */
  if (run.opt.nProcs == 0 && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")))
    run.opt.mpi = 1;
#endif

  int rc;
  if (run.opt.mpi) {
    if (perfWorldInitMpi(&run.world, run.opt.nThreads, &argc, &argv) != 0) return PERF_EXIT_FAILURE;
  } else if (run.opt.nProcs > 0) {
    int isParent = 0, exitCode = 0;
    if (perfWorldInitForked(&run.world, run.opt.nThreads, run.opt.nProcs, &isParent, &exitCode) != 0)
      return PERF_EXIT_FAILURE;
    if (isParent) return exitCode;
  } else if (perfWorldInitSingle(&run.world, run.opt.nThreads) != 0) {
    return PERF_EXIT_FAILURE;
  }
  rc = runProcess(&run);
  perfWorldFinalize(&run.world);
  return rc;
}
