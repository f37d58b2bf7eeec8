/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver's iterations: one collective launched on every GPU of a thread (a group when
 * it has several), completed while watching NCCL's errors, the timeout and failed peers; data
 * written and checked on the device; CUDA graphs captured, uploaded, replayed. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <time.h>

#include "driver.h"

double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int isMainPrinter(const struct perfThread* t) { return t->isMain; }

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
int completeColl(struct perfThread* t) {
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

int startColl(struct perfThread* t, int inPlace, int iter) {
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
int initData(struct perfThread* t, int inPlace, uint64_t seed) {
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

int checkData(struct perfThread* t, int inPlace, uint64_t seed, int64_t* wrong) {
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

int beginCapture(struct perfThread* t, enum cudaStreamCaptureMode mode) {
  for (int i = 0; i < t->nGpus; i++) CUDA_TRY(cudaStreamBeginCapture(t->gpus[i].stream, mode));
  return 0;
}

int endCapture(struct perfThread* t) {
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

void destroyGraphs(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++) {
    if (t->gpus[i].exec) CUDA_WARN(cudaGraphExecDestroy(t->gpus[i].exec));
    if (t->gpus[i].graph) CUDA_WARN(cudaGraphDestroy(t->gpus[i].graph));
    t->gpus[i].exec = NULL;
    t->gpus[i].graph = NULL;
  }
}

int launchGraphs(struct perfThread* t) {
  for (int i = 0; i < t->nGpus; i++) CUDA_TRY(cudaGraphLaunch(t->gpus[i].exec, t->gpus[i].stream));
  return 0;
}
