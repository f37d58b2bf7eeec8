/* SPDX-License-Identifier: Apache-2.0 */
/* Device fill of per-rank inputs and device count of wrong result elements (pattern.h logic). */
#include <cuda_runtime.h>

#define PERF_HAVE_CUDA 1
#include "common.h"

namespace {

constexpr int kThreads = 512;

int gridFor(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  return blocks < 1 ? 1 : (int)blocks;
}

__global__ void fillKernel(void* buf, size_t count, int type, int op, int contributions, int rank, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    int64_t v = perfInputValue(type, op, contributions, rank, seed, i);
    perfStoreBits(buf, type, i, perfEncode(type, (double)v));
  }
}

__global__ void checkKernel(const void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                            uint64_t seed, size_t blockCount, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < count; j += (size_t)gridDim.x * blockDim.x) {
    double want = perfExpected(kind, type, op, nranks, rank, seed, j, blockCount);
    if (!perfElementOk(type, op, nranks, perfLoadBits(buf, type, j), want)) mine++;
  }
  if (mine) atomicAdd(wrong, mine);
}

}  // namespace

extern "C" cudaError_t perfFillDevice(void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                                      uint64_t seed, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  int contributions = kind == PERF_ALLGATHER ? 1 : nranks;
  int fillOp = kind == PERF_ALLGATHER ? PERF_SUM : op;
  fillKernel<<<gridFor(count), kThreads, 0, stream>>>(buf, count, type, fillOp, contributions, rank, seed);
  return cudaGetLastError();
}

extern "C" cudaError_t perfCheckDevice(const void* buf, size_t count, int kind, int type, int op, int nranks,
                                       int rank, uint64_t seed, size_t blockCount, unsigned long long* wrongDev,
                                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  checkKernel<<<gridFor(count), kThreads, 0, stream>>>(buf, count, kind, type, op, nranks, rank, seed, blockCount,
                                                       wrongDev);
  return cudaGetLastError();
}
