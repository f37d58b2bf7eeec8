/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce-scatter: the pull and multimem kernels (the Lamport kernel is in lamport.cu, the
 * launcher, shared with all-gather, in launch.cu).
 *
 * Pull, one launch per chunk of c elements of every slice (c slices fit the staging half):
 * block b copies its part [lo, hi) of every slice q of our input into slot q of our own staging
 * half (epoch & 1), waits for block b of every rank (start barrier), then reduces part [lo, hi)
 * of slot `rank` of every rank's staging in rank order 0..n-1 (reduceRange: the all-reduce
 * kernels' arithmetic, so the result is bit for bit our all-reduce's slice) and writes it to the
 * output. A half is rewritten only in call k+2, after call k+1's barrier, which each peer reaches
 * only after finishing its kernel k, reads of our half included. In place (recvbuff == sendbuff +
 * rank*recvcount): a block copies its part of our slice before its barrier and writes the same
 * part only after it.
 *
 * Zero copy (every rank's input in a registered window, windows[q] = rank q's input as mapped
 * here), one launch for any size: block b waits for block b of every rank (start barrier: each
 * rank's stream has reached this call, so its input is written), reduces part [lo, hi) of slice
 * `rank` straight from every rank's input in rank order, then waits for block b of every rank
 * again (middle barrier: no rank's stream goes on to rewrite its input while a peer still reads
 * it). In place, the elements a thread writes are the ones it has just read. */
#include <stdint.h>

#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"

namespace symm {

template <typename E, int Kind>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterPullKernel(KernelArgs a) {
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  BlockCall c;
  if (!beginBlockCall<N>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half, lo = c.lo, hi = c.hi;
  const size_t slot = a.slotStride * sizeof(T); /* a multiple of 16: slots stay aligned */
  /* Staged: our input into our staging first. Zero copy: straight from every rank's window
   * (one reduce either way: one instance of its unrolled code per kernel). */
  if (!a.zeroCopy) {
    char* mine = a.staging[a.rank] + half;
    for (int q = 0; q < a.nranks; q++) {
      const char* in = (const char*)a.send + (size_t)q * a.sliceStride * sizeof(T);
      copyRange<E>(mine + (size_t)q * slot, in, lo, hi, aligned16(in), false);
    }
  }
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  const char* srcs[SYMM_MAX_RANKS];
  bool vec = aligned16(a.recv);
#pragma unroll
  for (int r = 0; r < SYMM_MAX_RANKS; r++) {
    srcs[r] = r >= a.nranks ? nullptr
              : a.zeroCopy  ? a.windows[r] + (size_t)a.rank * a.sliceStride * sizeof(T)
                            : a.staging[r] + half + (size_t)a.rank * slot;
    vec = vec && (srcs[r] == nullptr || aligned16(srcs[r]));
  }
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind>(srcs, a.nranks, out, 1, lo, hi, vec, a.avg != 0);
  if (a.zeroCopy && !blockBarrier(a, kSigMid, epoch, &failed)) return;
  endCall(a, epoch, c.ticket);
}

/* Multimem: the pull kernel's copy-in, then one multimem.ld_reduce per 16 bytes of slot `rank`
 * sums it across every rank's staging in the switch. A block's part starts on a 16-byte unit; a
 * partial last unit reads slot lanes past count (staging has room) and writes only the elements
 * below it. avg: real multicast pre-multiplies at copy-in, as the all-reduce multimem kernel does.
 * Emulate: the unit reduced from every rank's staging in rank order (reducePacks), bit for bit
 * the pull kernel's result. */
template <typename E, int Kind, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterMultimemKernel(KernelArgs a) {
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  BlockCall c;
  if (!beginBlockCall<N>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half, lo = c.lo, hi = c.hi;
  const size_t slot = a.slotStride * sizeof(T);
  char* mine = a.staging[a.rank] + half;
  const bool preMulIn = !Emulate && a.avg != 0;
  for (int q = 0; q < a.nranks; q++) {
    const char* in = (const char*)a.send + (size_t)q * a.sliceStride * sizeof(T);
    if (preMulIn) {
      for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        ((T*)(mine + (size_t)q * slot))[i] = Arith<E>::avgPre(((const T*)in)[i], a.nranks);
    } else {
      copyRange<E>(mine + (size_t)q * slot, in, lo, hi, aligned16(in), false);
    }
  }
  if (!Emulate) fenceProxyAlias();
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  const size_t ours = half + (size_t)a.rank * slot;
  const bool recvVec = aligned16(a.recv);
  /* An empty part stays empty: its clamped start may sit inside the last unit, which belongs
   * to the block before. */
  const size_t ulo = lo < hi ? lo / N : 0, uhi = lo < hi ? divUp(hi, (size_t)N) : 0;
  for (size_t u = ulo + threadIdx.x; u < uhi; u += blockDim.x) {
    typename Vec<E>::Pack p;
    if constexpr (Emulate) {
      uint4 packs[SYMM_MAX_RANKS];
#pragma unroll
      for (int r = 0; r < SYMM_MAX_RANKS; r++)
        if (r < a.nranks) packs[r] = loadStaging16(a.staging[r] + ours + u * 16);
      p.v = reducePacks<E, Kind>(packs, a.nranks, a.avg != 0);
    } else {
      p.v = Mm<E, Kind>::ldReduce(a.multicast + ours + u * 16);
      if (a.avg) {
#pragma unroll
        for (int k = 0; k < N; k++) p.e[k] = Arith<E>::avgPost(p.e[k], a.nranks);
      }
    }
    if (recvVec && (u + 1) * N <= hi) {
      *(uint4*)((char*)a.recv + u * 16) = p.v;
    } else {
#pragma unroll
      for (int k = 0; k < N; k++)
        if (u * N + k < hi) ((T*)a.recv)[u * N + k] = p.e[k];
    }
  }
  endCall(a, epoch, c.ticket);
}

template <typename E, int Kind>
static cudaError_t launchTyped(int blocks, cudaStream_t stream, const KernelArgs& args) {
  return launchKernel(reduceScatterPullKernel<E, Kind>, blocks, stream, args);
}

cudaError_t launchReduceScatterPull(ncclDataType_t dt, ncclRedOp_t op, int blocks,
                                    cudaStream_t stream, const KernelArgs& args) {
  cudaError_t err = cudaErrorInvalidValue;
  SYMM_DISPATCH_DTYPE(dt, SYMM_DISPATCH_OP(op, err = (launchTyped<E, Kind>(blocks, stream, args))));
  return err;
}

template <typename E, int Kind>
static cudaError_t launchMultimemTyped(bool emulate, int blocks, cudaStream_t stream,
                                       const KernelArgs& args) {
  if constexpr (Mm<E, Kind>::kOk) {
    return launchKernel(emulate ? reduceScatterMultimemKernel<E, Kind, true>
                                : reduceScatterMultimemKernel<E, Kind, false>,
                        blocks, stream, args);
  } else {
    return cudaErrorInvalidValue;
  }
}

cudaError_t launchReduceScatterMultimem(ncclDataType_t dt, ncclRedOp_t op, bool emulate,
                                        int blocks, cudaStream_t stream, const KernelArgs& args) {
  cudaError_t err = cudaErrorInvalidValue;
  SYMM_DISPATCH_DTYPE(dt, SYMM_DISPATCH_OP(op, err = (launchMultimemTyped<E, Kind>(emulate, blocks, stream, args))));
  return err;
}

template <typename E, int Kind> static cudaError_t loadMultimemTyped() {
  cudaFuncAttributes attr;
  cudaError_t err = cudaSuccess;
  if constexpr (Mm<E, Kind>::kOk) {
    /* Loading only: nothing here touches a multicast object. */
    err = cudaFuncGetAttributes(&attr, (const void*)reduceScatterMultimemKernel<E, Kind, true>);
    if (err == cudaSuccess)
      err = cudaFuncGetAttributes(&attr, (const void*)reduceScatterMultimemKernel<E, Kind, false>);
  }
  return err;
}

cudaError_t loadReduceScatterMultimem() {
  cudaError_t err = cudaSuccess;
  SYMM_FOR_EACH_TYPE_AND_OP(err, loadMultimemTyped<E, Kind>());
  return err;
}

template <typename E, int Kind> static cudaError_t loadTyped() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, (const void*)reduceScatterPullKernel<E, Kind>);
}

cudaError_t loadReduceScatterPull() {
  cudaError_t err = cudaSuccess;
  SYMM_FOR_EACH_TYPE_AND_OP(err, loadTyped<E, Kind>());
  return err;
}

}  // namespace symm
