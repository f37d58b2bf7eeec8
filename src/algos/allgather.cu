/* SPDX-License-Identifier: Apache-2.0 */
/* All-gather: the push and multimem kernels (the Lamport kernel is in lamport.cu, the launcher,
 * shared with reduce-scatter, in launch.cu).
 *
 * Push, one launch per chunk of c elements of every rank's input (c fits the staging half):
 * block b copies its part [lo, hi) of our chunk into slot `rank` of every rank's staging half
 * (epoch & 1), waits for block b of every rank (start barrier: release of our signal after
 * __syncthreads, acquire of theirs), then copies part [lo, hi) of every slot of its own staging
 * to the output. Block b pairs only with block b, whose parts are the same on every rank. A half
 * is rewritten only in call k+2: a writer gets there after call k+1's barrier, which each peer
 * reaches only after finishing its whole kernel k (README: the invariant every kernel keeps).
 * In place (sendbuff == recvbuff + rank*count): each block reads its part of our input before
 * its barrier and writes only after it, and parts of other blocks never overlap.
 *
 * Zero copy (every rank's output in a registered window, windows[q] = rank q's output as
 * mapped here), one launch for any size: block b waits for block b of every rank (start
 * barrier: each rank's stream has reached this call, so nothing there still uses its output),
 * stores part [lo, hi) of our input straight into slot `rank` of every rank's output, then waits
 * for block b of every rank again (middle barrier: every writer's part b is in our output
 * before our kernel ends). No staging, no copy-out. In place, our own slot already holds our
 * input and no other rank writes it. */
#include <stdint.h>

#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"

namespace symm {

template <typename E>
__global__ void __launch_bounds__(kThreads, 1) allGatherPushKernel(KernelArgs a) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  BlockCall c;
  if (!beginBlockCall<N>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half, lo = c.lo, hi = c.hi;
  const size_t slot = a.slotStride * sizeof(T); /* a multiple of 16: slots stay aligned */
  const bool sendVec = aligned16(a.send);
  /* Zero copy: the start barrier first (every output is free to write), the middle one after. */
  if (a.zeroCopy && !blockBarrier(a, kSigStart, epoch, &failed)) return;
  const size_t ours =
      a.zeroCopy ? (size_t)a.rank * a.sliceStride * sizeof(T) : half + (size_t)a.rank * slot;
  for (int q = 0; q < a.nranks; q++) {
    char* dst = (a.zeroCopy ? a.windows[q] : a.staging[q]) + ours;
    if (dst != (const char*)a.send) /* zero copy in place: our slot holds our input already */
      copyRange<E>(dst, (const char*)a.send, lo, hi, sendVec && aligned16(dst), false);
  }
  if (!blockBarrier(a, a.zeroCopy ? kSigMid : kSigStart, epoch, &failed)) return;
  if (!a.zeroCopy) {
    for (int r = 0; r < a.nranks; r++) {
      char* out = (char*)a.recv + (size_t)r * a.sliceStride * sizeof(T);
      copyRange<E>(out, a.staging[a.rank] + half + (size_t)r * slot, lo, hi, aligned16(out), true);
    }
  }
  endCall(a, epoch, c.ticket);
}

/* Multimem: the push kernel with one multimem.st per 16 bytes of our part, which lands in slot
 * `rank` of every rank's staging half at once. A block's part starts on a 16-byte unit; a
 * partial last unit carries the chunk's last elements and zeros (staging slots have room, and
 * the copy-out never reads past count). Emulate: the same units stored to every rank in a loop. */
template <typename E, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) allGatherMultimemKernel(KernelArgs a) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  BlockCall c;
  if (!beginBlockCall<N>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half, lo = c.lo, hi = c.hi;
  const size_t slot = a.slotStride * sizeof(T);
  const size_t ours = half + (size_t)a.rank * slot;
  const bool sendVec = aligned16(a.send);
  /* An empty part stays empty: its clamped start may sit inside the last unit, which belongs
   * to the block before. */
  const size_t ulo = lo < hi ? lo / N : 0, uhi = lo < hi ? divUp(hi, (size_t)N) : 0;
  for (size_t u = ulo + threadIdx.x; u < uhi; u += blockDim.x) {
    typename Vec<E>::Pack p;
    if (sendVec && (u + 1) * N <= hi) {
      p.v = *(const uint4*)((const char*)a.send + u * 16);
    } else {
      p.v = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < N; k++)
        if (u * N + k < hi) p.e[k] = ((const T*)a.send)[u * N + k];
    }
    if constexpr (Emulate) {
      for (int r = 0; r < a.nranks; r++) *(uint4*)(a.staging[r] + ours + u * 16) = p.v;
    } else {
      multimemStore16(a.multicast + ours + u * 16, p.v);
    }
  }
  if (!Emulate) fenceProxyAlias();
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  if (!Emulate) fenceProxyAlias();
  for (int r = 0; r < a.nranks; r++) {
    char* out = (char*)a.recv + (size_t)r * a.sliceStride * sizeof(T);
    copyRange<E>(out, a.staging[a.rank] + half + (size_t)r * slot, lo, hi, aligned16(out), true);
  }
  endCall(a, epoch, c.ticket);
}

template <typename E>
static cudaError_t launchTyped(int blocks, cudaStream_t stream, const KernelArgs& args) {
  return launchKernel(allGatherPushKernel<E>, blocks, stream, args);
}

template <typename E>
static cudaError_t launchMultimemTyped(bool emulate, int blocks, cudaStream_t stream,
                                       const KernelArgs& args) {
  return launchKernel(emulate ? allGatherMultimemKernel<E, true> : allGatherMultimemKernel<E, false>,
                      blocks, stream, args);
}

cudaError_t launchAllGatherMultimem(ncclDataType_t dt, bool emulate, int blocks,
                                    cudaStream_t stream, const KernelArgs& args) {
  cudaError_t err = cudaErrorInvalidValue;
  SYMM_DISPATCH_DTYPE(dt, err = launchMultimemTyped<E>(emulate, blocks, stream, args));
  return err;
}

template <typename E> static cudaError_t loadMultimemTyped() {
  cudaFuncAttributes attr;
  /* Loading only: nothing here touches a multicast object. */
  cudaError_t err = cudaFuncGetAttributes(&attr, (const void*)allGatherMultimemKernel<E, true>);
  if (err == cudaSuccess)
    err = cudaFuncGetAttributes(&attr, (const void*)allGatherMultimemKernel<E, false>);
  return err;
}

cudaError_t loadAllGatherMultimem() {
  cudaError_t err = cudaSuccess;
  for (int dt = 0; dt < (int)ncclNumTypes && err == cudaSuccess; dt++)
    SYMM_DISPATCH_DTYPE((ncclDataType_t)dt, err = loadMultimemTyped<E>());
  return err;
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

}  // namespace symm
