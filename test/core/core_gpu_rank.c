/* SPDX-License-Identifier: Apache-2.0 */
/* test_core_gpu's rank kit: clocks, entry counters, patterns and their sums, checked calls, a
 * rank's communicator (blocking, non-blocking, with a config), streams and buffers. */
#include "core_gpu.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

int ctaPolicy, maxCTAs;

double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void sleepMs(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
  nanosleep(&ts, NULL);
}

/* A counter of comm's entry (the offset of a uint64_t field of struct symmComm), 0 when the
 * communicator is not ours. */
uint64_t entryCounter(ncclComm_t comm, size_t field) {
  struct symmComm* c = symmCommFind(comm);
  return c != NULL ? __atomic_load_n((uint64_t*)((char*)c + field), __ATOMIC_RELAXED) : 0;
}
/* Non-blocking calls: wait out ncclInProgress. */
ncclResult_t settle(ncclComm_t comm, ncclResult_t res) {
  for (double t0 = nowMs(); res == ncclInProgress && nowMs() - t0 < 600000;) {
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclSystemError;
    res = state;
    if (res == ncclInProgress) sched_yield();
  }
  return res;
}

float pattern(int rank, size_t i, int salt) { return (float)((rank + 1) * (int)((i + (size_t)salt) % 13 + 1)); }
/* The sum of pattern() over n ranks. */
float expectedOf(size_t i, int salt, int n) {
  return (float)(n * (n + 1) / 2 * (int)((i + (size_t)salt) % 13 + 1));
}
float expected(size_t i, int salt) { return expectedOf(i, salt, nranks); }

void fill(struct rank* r, float* dev, size_t count, int salt, cudaStream_t s) {
  for (size_t i = 0; i < count; i++) r->host[i] = pattern(r->rank, i, salt);
  CUDA_OK(cudaMemcpyAsync(dev, r->host, count * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

/* Wrong elements among `count` floats at dev (synchronized): expected(i, salt) for a sum,
 * else pattern(root, i, salt) for a broadcast from `root`. */
int wrongAt(struct rank* r, const float* dev, size_t count, int salt, int root) {
  CUDA_OK(cudaMemcpy(r->host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += r->host[i] != (root < 0 ? expected(i, salt) : pattern(root, i, salt));
  return wrong;
}

/* Wrong elements of an all-reduce output (stream synchronized). */
int wrongSum(struct rank* r, const float* dev, size_t count, int salt, cudaStream_t s) {
  CUDA_OK(cudaStreamSynchronize(s));
  return wrongAt(r, dev, count, salt, -1);
}

ncclResult_t allReduce(struct rank* r, const float* in, float* out, size_t count, cudaStream_t s) {
  return ncclAllReduce(in, out, count, ncclFloat32, ncclSum, r->comm, s);
}

/* One all-gather of `each` floats per rank on stream s, checked (stream synchronized). */
void checkedAllGather(struct rank* r, size_t each, int salt, cudaStream_t s) {
  fill(r, r->in, each, salt, s);
  TCHECK_EQ_INT(ncclAllGather(r->in, r->out, each, ncclFloat32, r->comm, s), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(s));
  int wrong = 0;
  for (int q = 0; q < nranks; q++) wrong += wrongAt(r, r->out + (size_t)q * each, each, salt, q);
  TCHECK_EQ_INT(wrong, 0);
}

/* One checked all-reduce on stream s1. */
void checkedAllReduce(struct rank* r, size_t count, int salt) {
  fill(r, r->in, count, salt, r->s1);
  TCHECK_EQ_INT(settle(r->comm, allReduce(r, r->in, r->out, count, r->s1)), ncclSuccess);
  TCHECK_EQ_INT(wrongSum(r, r->out, count, salt, r->s1), 0);
}

int openRank(struct rank* r, int blocking) {
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

void closeRank(struct rank* r, int destroy) {
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
