/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver's measurements: one timed size (nccl-tests' BenchTime: warm call, timed loop
 * eager or replayed, times reduced over ranks, checks), one (type, op) sweep (TimeTest: warm-up,
 * every size in and out of place, a table row and a CSV row), and a thread's run of them all. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "driver.h"

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

void* perfThreadMain(void* arg) {
  struct perfThread* t = arg;
  t->rc = runTests(t);
  if (t->rc) perfWorldAbort(&t->run->world);
  return NULL;
}
