/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce-scatter: the multimem kernel, the Lamport (lamport.cuh) and pull
 * (reduce_scatter_pull.cuh) families and its table of algorithms (its launcher, shared with
 * all-gather, is in launch.cu). */
#include <stdint.h>

#include "family.cuh"
#include "lamport.cuh"
#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"

namespace symm {

/* The pull kernel's instances (reduce_scatter_pull.cuh), compiled in three other files. */
template <typename E, int Kind, int R> KernelFn reduceScatterPullInstance();

/* Multimem, one launch per chunk of every slice (slotStride elements; launch.cu): part [lo, hi)
 * of every slice q of our input copied into slot q of our own staging half (epoch & 1), a start
 * barrier, then one multimem.ld_reduce per 16 bytes of slot `rank` sums it across every rank's
 * staging in the switch. A half is rewritten only in call k+2, after call k+1's barrier, which
 * each peer reaches only after finishing its kernel k. In place, a block copies its part of our
 * slice before its barrier and writes the same part only after it. A block's part starts on a
 * 16-byte unit; a partial last unit reads slot lanes past count (staging has room) and writes
 * only the elements below it. avg: real multicast pre-multiplies at copy-in, as the all-reduce
 * multimem kernel does. Emulate: the unit reduced from every rank's staging in rank order
 * (reducePacks), bit for bit the pull kernel's result. */
template <typename E, int Kind, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterMultimemKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  Call c;
  if (!openCall<N>(a, &failed, &c)) return;
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

/* The instances of each algorithm (family.cuh). */
template <int R> struct ReduceScatterPullFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool) {
    return reduceScatterPullInstance<E, Kind, R>();
  }
};

struct ReduceScatterMultimemFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool emulate) {
    if constexpr (Mm<E, Kind>::kOk)
      return emulate ? reduceScatterMultimemKernel<E, Kind, true>
                     : reduceScatterMultimemKernel<E, Kind, false>;
    else
      return nullptr;
  }
};

/* Reduce-scatter's algorithms (launch.h, AlgoKernels; familyAlgo, worldAlgo: family.cuh). Its
 * launcher is the one it shares with all-gather (launch.cu). */
static const AlgoKernels kReduceScatterAlgos[] = {
    lamportAlgo<SYMM_COLL_REDUCESCATTER>(anyTypeAndOp),
    worldAlgo<ReduceScatterPullFamily>(SYMM_ALGO_PULL, anyTypeAndOp),
    familyAlgo<ReduceScatterMultimemFamily>(SYMM_ALGO_MULTIMEM, multimemHasKernel),
};

static ncclResult_t reduceScatterLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                        cudaStream_t stream) {
  return gatherScatterLaunch(&kReduceScatter, call, peers, stream);
}

const CollKernels kReduceScatter = {
    SYMM_COLL_REDUCESCATTER, true, reduceScatterLaunch, kReduceScatterAlgos,
    (int)(sizeof(kReduceScatterAlgos) / sizeof(kReduceScatterAlgos[0]))};

}  // namespace symm
