/* SPDX-License-Identifier: Apache-2.0 */
/* Test kernels for peer-mapped memory: pattern fill/verify and a system-scope signal ping-pong. */
#include "gpu_kernels.h"

__global__ void fillKernel(uint32_t* dst, size_t words, uint32_t seed, uint32_t rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = testPattern(seed, rank, i);
}

__global__ void verifyKernel(const uint32_t* src, size_t words, uint32_t seed, uint32_t rank,
                             uint64_t firstIndex, verifyResult* res) {
  unsigned long long bad = 0, first = ~0ull;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x) {
    if (src[i] != testPattern(seed, rank, firstIndex + i)) {
      bad++;
      if (i < first) first = i;
    }
  }
  if (bad) {
    atomicAdd(&res->mismatches, bad);
    atomicMin(&res->firstBad, first);
  }
}

__global__ void countNonzeroKernel(const uint32_t* src, size_t words, verifyResult* res) {
  unsigned long long n = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x)
    n += src[i] != 0;
  if (n) atomicAdd(&res->nonzero, n);
}

__device__ __forceinline__ void storeRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t loadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long nowNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* 0: arrived; 1: timed out; 2: abort seen. */
__device__ int waitFor(const uint32_t* flag, uint32_t want, const volatile uint32_t* abortFlag,
                       unsigned long long deadline) {
  for (unsigned iter = 0;; iter++) {
    if ((int32_t)(loadAcquire(flag) - want) >= 0) return 0;
    if ((iter & 1023) == 1023) {
      if (*abortFlag != 0) return 2;
      if (nowNs() > deadline) return 1;
    }
  }
}

__device__ uint32_t payload(int from, int to, int round) {
  return 0x5EED0000u ^ ((uint32_t)from << 24) ^ ((uint32_t)to << 16) ^ (uint32_t)round;
}

/* Warp w talks to rank w (its lane 0 does): one independent conversation per peer. */
__global__ void pingPongKernel(symmPeers p, int rounds, size_t dataWord,
                               unsigned long long timeoutNs, pingResult* res) {
  int peer = threadIdx.x / 32;
  if ((threadIdx.x & 31) != 0 || peer >= p.nranks || peer == p.rank) return;
  int me = p.rank;
  /* The last words of each pad: the kernels' layout (failure word, signals) starts at word 0. */
  const size_t base = p.signalBytes / 4 - SYMM_MAX_RANKS;
  uint32_t* inFlag = (uint32_t*)p.signals[me] + base + peer;   /* written by peer */
  uint32_t* outFlag = (uint32_t*)p.signals[peer] + base + me;  /* we write */
  uint32_t* inData = (uint32_t*)p.buffers[me] + dataWord + peer;
  uint32_t* outData = (uint32_t*)p.buffers[peer] + dataWord + me;
  unsigned long long deadline = nowNs() + timeoutNs;
  int initiator = me < peer;
  unsigned done = 0, bad = 0;
  for (int k = 1; k <= rounds; k++) {
    if (initiator) {
      *outData = payload(me, peer, k);
      storeRelease(outFlag, (uint32_t)k);
    }
    int w = waitFor(inFlag, (uint32_t)k, p.abortFlag, deadline);
    if (w != 0) {
      atomicAdd(w == 1 ? &res->timeouts : &res->aborted, 1u);
      break;
    }
    if (*(volatile uint32_t*)inData != payload(peer, me, k)) bad++;
    if (!initiator) {
      *outData = payload(me, peer, k);
      storeRelease(outFlag, (uint32_t)k);
    }
    done++;
  }
  atomicAdd(&res->rounds, done);
  if (bad) atomicAdd(&res->badData, bad);
}

__global__ void waitForAbortKernel(symmPeers p, unsigned long long timeoutNs, pingResult* res) {
  int peer = threadIdx.x / 32;
  if ((threadIdx.x & 31) != 0 || peer >= p.nranks || peer == p.rank) return;
  const uint32_t* inFlag = (const uint32_t*)p.signals[p.rank] + p.signalBytes / 4 - SYMM_MAX_RANKS + peer;
  uint32_t never = loadAcquire(inFlag) + 0x40000000u;
  int w = waitFor(inFlag, never, p.abortFlag, nowNs() + timeoutNs);
  atomicAdd(w == 2 ? &res->aborted : w == 1 ? &res->timeouts : &res->badData, 1u);
}

static unsigned gridFor(size_t words) {
  size_t blocks = (words + 255) / 256;
  return (unsigned)(blocks > 1024 ? 1024 : blocks < 1 ? 1 : blocks);
}

extern "C" cudaError_t testLaunchFill(uint32_t* dst, size_t words, uint32_t seed, uint32_t rank,
                                      cudaStream_t s) {
  fillKernel<<<gridFor(words), 256, 0, s>>>(dst, words, seed, rank);
  return cudaGetLastError();
}

extern "C" cudaError_t testLaunchVerify(const uint32_t* src, size_t words, uint32_t seed,
                                        uint32_t rank, uint64_t firstIndex, verifyResult* res,
                                        cudaStream_t s) {
  verifyKernel<<<gridFor(words), 256, 0, s>>>(src, words, seed, rank, firstIndex, res);
  return cudaGetLastError();
}

extern "C" cudaError_t testLaunchCountNonzero(const uint32_t* src, size_t words, verifyResult* res,
                                              cudaStream_t s) {
  countNonzeroKernel<<<gridFor(words), 256, 0, s>>>(src, words, res);
  return cudaGetLastError();
}

extern "C" cudaError_t testLaunchPingPong(symmPeers peers, int rounds, size_t dataWord,
                                          unsigned long long timeoutNs, pingResult* res,
                                          cudaStream_t s) {
  pingPongKernel<<<1, 32 * SYMM_MAX_RANKS, 0, s>>>(peers, rounds, dataWord, timeoutNs, res);
  return cudaGetLastError();
}

extern "C" cudaError_t testLaunchWaitForAbort(symmPeers peers, unsigned long long timeoutNs,
                                              pingResult* res, cudaStream_t s) {
  waitForAbortKernel<<<1, 32 * SYMM_MAX_RANKS, 0, s>>>(peers, timeoutNs, res);
  return cudaGetLastError();
}

extern "C" cudaError_t testPrewarmKernels(void) {
  cudaFuncAttributes attr;
  cudaError_t e;
  if ((e = cudaFuncGetAttributes(&attr, fillKernel)) != cudaSuccess) return e;
  if ((e = cudaFuncGetAttributes(&attr, verifyKernel)) != cudaSuccess) return e;
  if ((e = cudaFuncGetAttributes(&attr, countNonzeroKernel)) != cudaSuccess) return e;
  if ((e = cudaFuncGetAttributes(&attr, waitForAbortKernel)) != cudaSuccess) return e;
  return cudaFuncGetAttributes(&attr, pingPongKernel);
}
