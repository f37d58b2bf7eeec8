/* SPDX-License-Identifier: Apache-2.0 */
/* All-gather: the push kernel and the launcher (the Lamport kernel is in lamport.cu).
 *
 * Push, one launch per chunk of c elements of every rank's input (c fits the staging half):
 * block b copies its part [lo, hi) of our chunk into slot `rank` of every rank's staging half
 * (epoch & 1), waits for block b of every rank (start barrier: release of our signal after
 * __syncthreads, acquire of theirs), then copies part [lo, hi) of every slot of its own staging
 * to the output. Block b pairs only with block b, whose parts are the same on every rank. A half
 * is rewritten only in call k+2: a writer gets there after call k+1's barrier, which each peer
 * reaches only after finishing its whole kernel k (README: the invariant every kernel keeps).
 * In place (sendbuff == recvbuff + rank*count): each block reads its part of our input before
 * its barrier and writes only after it, and parts of other blocks never overlap. */
#include <stdint.h>

#include "launch.h"
#include "primitives.cuh"

extern "C" {
#include "debug.h"
}

namespace symm {

template <typename E>
__global__ void __launch_bounds__(kThreads, 1) allGatherPushKernel(KernelArgs a) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  uint64_t epoch;
  uint32_t ticket = 0;
  if (!beginCall(a, &epoch, &failed, &ticket)) return;
  refreshLamportLine(a, epoch, 0);
  const size_t half = (size_t)(epoch & 1u) * a.halfBytes;
  const size_t per = roundUp(divUp(a.count, (size_t)gridDim.x), (size_t)N);
  const size_t lo = minSize((size_t)blockIdx.x * per, a.count);
  const size_t hi = minSize(lo + per, a.count);
  const size_t slot = a.slotStride * sizeof(T); /* a multiple of 16: slots stay aligned */
  const bool sendVec = aligned16(a.send);
  for (int q = 0; q < a.nranks; q++)
    copyRange<E>(a.staging[q] + half + (size_t)a.rank * slot, (const char*)a.send, lo, hi, sendVec,
                 false);
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  for (int r = 0; r < a.nranks; r++) {
    char* out = (char*)a.recv + (size_t)r * a.sliceStride * sizeof(T);
    copyRange<E>(out, a.staging[a.rank] + half + (size_t)r * slot, lo, hi, aligned16(out), true);
  }
  endCall(a, epoch, ticket);
}

template <typename E>
static cudaError_t launchTyped(int blocks, cudaStream_t stream, const KernelArgs& args) {
  allGatherPushKernel<E><<<blocks, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launchAllGatherPush(ncclDataType_t dt, int blocks, cudaStream_t stream,
                                const KernelArgs& args) {
  cudaError_t err = cudaErrorInvalidValue;
  SYMM_DISPATCH_DTYPE(dt, err = launchTyped<E>(blocks, stream, args));
  return err;
}

cudaError_t loadAllGatherPush() {
  cudaError_t err = cudaSuccess;
  cudaFuncAttributes attr;
  for (int dt = 0; dt < (int)ncclNumTypes && err == cudaSuccess; dt++)
    SYMM_DISPATCH_DTYPE((ncclDataType_t)dt,
                        err = cudaFuncGetAttributes(&attr, (const void*)allGatherPushKernel<E>));
  return err;
}

ncclResult_t allGatherLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                             cudaStream_t stream) {
  const size_t esize = symmTypeSize(call->datatype);
  const size_t vecElems = 16 / esize;
  KernelArgs args;
  fillArgs(call, peers, &args);
  args.sliceStride = call->count;
  if (call->algo == SYMM_ALGO_LAMPORT) {
    args.send = call->sendbuff;
    args.recv = call->recvbuff;
    args.count = call->count;
    const int blocks = gridBlocks(2 * call->count * esize, call, peers);
    const cudaError_t err =
        launchLamport(SYMM_COLL_ALLGATHER, call->datatype, ncclSum, blocks, stream, args);
    if (err != cudaSuccess) {
      WARN("all-gather kernel launch failed: %s", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
    return ncclSuccess;
  }
  /* Push: every rank's chunk has a slot in each staging half. */
  const size_t chunk = halfBytesOf(peers) / ((size_t)peers->nranks * esize) / vecElems * vecElems;
  if (chunk == 0) {
    WARN("all-gather: staging buffer of %zu bytes is too small", peers->bufferBytes);
    return ncclInternalError;
  }
  args.slotStride = chunk;
  for (size_t done = 0; done < call->count; done += chunk) {
    const size_t n = call->count - done < chunk ? call->count - done : chunk;
    args.send = (const char*)call->sendbuff + done * esize;
    args.recv = (char*)call->recvbuff + done * esize;
    args.count = n;
    const int blocks = gridBlocks(n * esize, call, peers);
    TRACE(SYMM_COLL, "rank %d: all-gather push, %zu elements per rank, %d blocks", peers->rank, n,
          blocks);
    const cudaError_t err = launchAllGatherPush(call->datatype, blocks, stream, args);
    if (err != cudaSuccess) {
      WARN("all-gather kernel launch failed: %s", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

}  // namespace symm
