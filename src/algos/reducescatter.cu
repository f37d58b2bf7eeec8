/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce-scatter: the pull kernel and the launcher (the Lamport kernel is in lamport.cu).
 *
 * Pull, one launch per chunk of c elements of every slice (c slices fit the staging half):
 * block b copies its part [lo, hi) of every slice q of our input into slot q of our own staging
 * half (epoch & 1), waits for block b of every rank (start barrier), then reduces part [lo, hi)
 * of slot `rank` of every rank's staging in rank order 0..n-1 (reduceRange: the all-reduce
 * kernels' arithmetic, so the result is bit for bit our all-reduce's slice) and writes it to the
 * output. A half is rewritten only in call k+2, after call k+1's barrier, which each peer reaches
 * only after finishing its kernel k, reads of our half included. In place (recvbuff == sendbuff +
 * rank*recvcount): a block copies its part of our slice before its barrier and writes the same
 * part only after it. */
#include <stdint.h>

#include "launch.h"
#include "primitives.cuh"

extern "C" {
#include "debug.h"
}

namespace symm {

template <typename E, int Kind>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterPullKernel(KernelArgs a) {
  SYMM_REDUCING_KERNEL(E)
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
  char* mine = a.staging[a.rank] + half;
  for (int q = 0; q < a.nranks; q++) {
    const char* in = (const char*)a.send + (size_t)q * a.sliceStride * sizeof(T);
    copyRange<E>(mine + (size_t)q * slot, in, lo, hi, aligned16(in), false);
  }
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  const char* srcs[SYMM_MAX_RANKS];
#pragma unroll
  for (int r = 0; r < SYMM_MAX_RANKS; r++)
    srcs[r] = r < a.nranks ? a.staging[r] + half + (size_t)a.rank * slot : nullptr;
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind>(srcs, a.nranks, out, 1, lo, hi, aligned16(a.recv), a.avg != 0);
  endCall(a, epoch, ticket);
}

template <typename E, int Kind>
static cudaError_t launchTyped(int blocks, cudaStream_t stream, const KernelArgs& args) {
  reduceScatterPullKernel<E, Kind><<<blocks, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launchReduceScatterPull(ncclDataType_t dt, ncclRedOp_t op, int blocks,
                                    cudaStream_t stream, const KernelArgs& args) {
  cudaError_t err = cudaErrorInvalidValue;
  SYMM_DISPATCH_DTYPE(dt, SYMM_DISPATCH_OP(op, err = (launchTyped<E, Kind>(blocks, stream, args))));
  return err;
}

template <typename E, int Kind> static cudaError_t loadTyped() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, (const void*)reduceScatterPullKernel<E, Kind>);
}

cudaError_t loadReduceScatterPull() {
  cudaError_t err = cudaSuccess;
  for (int dt = 0; dt < (int)ncclNumTypes && err == cudaSuccess; dt++)
    for (int op = 0; op < (int)ncclNumOps && err == cudaSuccess; op++)
      if (op != ncclAvg) SYMM_DISPATCH_DTYPE((ncclDataType_t)dt,
                                             SYMM_DISPATCH_OP((ncclRedOp_t)op, err = (loadTyped<E, Kind>())));
  return err;
}

ncclResult_t reduceScatterLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
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
        launchLamport(SYMM_COLL_REDUCESCATTER, call->datatype, call->op, blocks, stream, args);
    if (err != cudaSuccess) {
      WARN("reduce-scatter kernel launch failed: %s", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
    return ncclSuccess;
  }
  /* Pull: every slice's chunk has a slot in our staging half. */
  const size_t chunk = halfBytesOf(peers) / ((size_t)peers->nranks * esize) / vecElems * vecElems;
  if (chunk == 0) {
    WARN("reduce-scatter: staging buffer of %zu bytes is too small", peers->bufferBytes);
    return ncclInternalError;
  }
  args.slotStride = chunk;
  for (size_t done = 0; done < call->count; done += chunk) {
    const size_t n = call->count - done < chunk ? call->count - done : chunk;
    args.send = (const char*)call->sendbuff + done * esize;
    args.recv = (char*)call->recvbuff + done * esize;
    args.count = n;
    const int blocks = gridBlocks(n * esize, call, peers);
    TRACE(SYMM_COLL, "rank %d: reduce-scatter pull, %zu elements per slice, %d blocks",
          peers->rank, n, blocks);
    const cudaError_t err = launchReduceScatterPull(call->datatype, call->op, blocks, stream, args);
    if (err != cudaSuccess) {
      WARN("reduce-scatter kernel launch failed: %s", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

}  // namespace symm
