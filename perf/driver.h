/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver's insides, shared by its files: error macros, a GPU's rank, the process's run,
 * a thread's share of the GPUs. common.c sets up the process, launch.c issues and completes one
 * collective on a thread's GPUs (eager or captured) and checks data, measure.c times the sweep. */
#ifndef SYMMCOLL_PERF_DRIVER_H
#define SYMMCOLL_PERF_DRIVER_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>

#define PERF_HAVE_CUDA 1
#include "common.h"
#include "world.h"

#define PERF_LOG_CUDA(e, call) \
  fprintf(stderr, "perf: CUDA error '%s' at %s:%d: %s\n", cudaGetErrorString(e), __FILE__, __LINE__, call)
#define PERF_LOG_NCCL(r, call)                                                                         \
  fprintf(stderr, "perf: NCCL error '%s' at %s:%d: %s (%s)\n", ncclGetErrorString(r), __FILE__, __LINE__, \
          call, ncclGetLastError(NULL))

/* A call whose result r_ must pass `ok`, else `log` names it and `onError` runs: CUDA_TRY and
 * NCCL_TRY return PERF_EXIT_FAILURE from the caller (ncclInProgress, from a non-blocking
 * communicator, is no error); the _WARN forms, for cleanup paths, log and go on. */
#define PERF_CALL(type, call, ok, log, onError) \
  do {                                          \
    const type r_ = (call);                     \
    if (!(ok)) {                                \
      log(r_, #call);                           \
      onError;                                  \
    }                                           \
  } while (0)
#define CUDA_TRY(call) PERF_CALL(cudaError_t, call, r_ == cudaSuccess, PERF_LOG_CUDA, return PERF_EXIT_FAILURE)
#define NCCL_TRY(call) \
  PERF_CALL(ncclResult_t, call, r_ == ncclSuccess || r_ == ncclInProgress, PERF_LOG_NCCL, return PERF_EXIT_FAILURE)
#define CUDA_WARN(call) PERF_CALL(cudaError_t, call, r_ == cudaSuccess, PERF_LOG_CUDA, (void)0)
#define NCCL_WARN(call) PERF_CALL(ncclResult_t, call, r_ == ncclSuccess, PERF_LOG_NCCL, (void)0)
#define PERF_TRY(call)        \
  do {                        \
    int rc_ = (call);         \
    if (rc_ != 0) return rc_; \
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

/* launch.c */
double nowSec(void);
int isMainPrinter(const struct perfThread* t);
int completeColl(struct perfThread* t);
int startColl(struct perfThread* t, int inPlace, int iter);
int initData(struct perfThread* t, int inPlace, uint64_t seed);
int checkData(struct perfThread* t, int inPlace, uint64_t seed, int64_t* wrong);
int beginCapture(struct perfThread* t, enum cudaStreamCaptureMode mode);
int endCapture(struct perfThread* t);
void destroyGraphs(struct perfThread* t);
int launchGraphs(struct perfThread* t);

/* measure.c: a thread's whole sweep (every type and op asked for), then its result in t->rc. */
void* perfThreadMain(void* arg);

#endif
