/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce-scatter: the Lamport (lamport.cuh), pull and multimem kernels and its table of
 * algorithms (its launcher, shared with all-gather, is in launch.cu).
 *
 * "pull" (the algorithm's name; staged, its data now travel as remote stores, which NVLink moves
 * faster than remote loads): the whole message in one launch, in rounds of S elements of every
 * slice (rounds.cuh: the plan, the split barriers, why every reuse of staging is safe). Round k,
 * rank r, block b:
 *   A(k): store part b of the round-k piece of every input slice q != r (rank q's output) into
 *         slot peerSlot(q, r) of rank q's staging half (remote stores);
 *   B(k): once every peer's A(k) arrived, reduce part b in rank order 0..n-1 from our own input
 *         slice r (read in place) and every peer's slot of our staging, write the output.
 * reduceRange is the all-reduce kernels' arithmetic (rank order, avg as NCCL's PreMulSum /
 * SumPostDiv): the result is bit for bit our all-reduce's slice. In place (recvbuff == sendbuff +
 * rank*recvcount): A reads only the other slices; B's threads write exactly the elements of slice
 * r they have just read, and no other thread or rank touches them.
 *
 * Zero copy (every rank's input in a registered window, windows[q] = rank q's input as mapped
 * here), one launch for any size: block b waits for block b of every rank (start barrier: each
 * rank's stream has reached this call, so its input is written), reduces part [lo, hi) of slice
 * `rank` straight from every rank's input in rank order, then waits for block b of every rank
 * again (middle barrier: no rank's stream goes on to rewrite its input while a peer still reads
 * it). In place, the elements a thread writes are the ones it has just read. */
#include <stdint.h>

#include "family.cuh"
#include "lamport.cuh"
#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"
#include "rounds.cuh"

namespace symm {

template <typename E, int Kind>
__device__ __forceinline__ void reduceScatterZeroCopy(const KernelArgs& a, volatile int* failed) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  Call c;
  if (!openCall<N>(a, failed, &c)) return;
  if (!blockBarrier(a, kSigStart, c.epoch, failed)) return;
  const char* srcs[SYMM_MAX_RANKS];
  bool vec = aligned16(a.recv);
#pragma unroll
  for (int r = 0; r < SYMM_MAX_RANKS; r++) {
    srcs[r] = r < a.nranks ? a.windows[r] + (size_t)a.rank * a.sliceStride * sizeof(T) : nullptr;
    vec = vec && (srcs[r] == nullptr || aligned16(srcs[r]));
  }
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind>(srcs, a.nranks, out, 1, c.lo, c.hi, vec, a.avg != 0);
  if (!blockBarrier(a, kSigMid, c.epoch, failed)) return;
  endCall(a, c.epoch, c.ticket);
}

template <typename E, int Kind>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterPullKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  constexpr size_t es = sizeof(T);
  __shared__ volatile int failed;
  if (a.zeroCopy) {
    reduceScatterZeroCopy<E, Kind>(a, &failed);
    return;
  }
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c)) return;
  const uint64_t epoch0 = c.epoch;
  const RoundPlan p = roundPlan(a, es, N);
  const int me = a.rank, n = a.nranks;
  const size_t slot = p.S * es; /* a multiple of 16: slots stay aligned */
  const size_t stride = a.sliceStride * es;
  const char* send = (const char*)a.send;
  /* Peers in turn from the next rank on, so the ranks' first stores go to different peers. */
  auto remote = [&](uint32_t k, size_t half) {
    const RoundPart r = roundPart(a, p, k);
    for (int i = 1; i < n; i++) {
      const int q = (me + i) % n;
      const char* in = send + (size_t)q * stride + r.first * es;
      copyRange<E>(a.staging[q] + half + peerSlot(q, me) * slot, in, r.lo, r.hi, aligned16(in),
                   false);
    }
  };
  auto own = [](uint32_t) {};
  auto local = [&](uint32_t k, size_t half) {
    const RoundPart r = roundPart(a, p, k);
    const char* srcs[SYMM_MAX_RANKS];
    char* const out[1] = {(char*)a.recv + r.first * es};
    bool vec = aligned16(out[0]);
#pragma unroll
    for (int w = 0; w < SYMM_MAX_RANKS; w++) {
      srcs[w] = w >= n    ? nullptr
                : w == me ? send + (size_t)me * stride + r.first * es
                          : a.staging[me] + half + peerSlot(me, w) * slot;
      vec = vec && (srcs[w] == nullptr || aligned16(srcs[w]));
    }
    reduceRange<E, Kind>(srcs, n, out, 1, r.lo, r.hi, vec, a.avg != 0);
  };
  if (!runRounds(a, epoch0, p.rounds, &failed, remote, own, local)) return;
  endCall(a, epoch0 + p.rounds - 1, c.ticket);
}

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
struct ReduceScatterPullFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool) {
    return reduceScatterPullKernel<E, Kind>;
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

/* Reduce-scatter's algorithms (launch.h, AlgoKernels; familyAlgo: family.cuh). Its
 * launcher is the one it shares with all-gather (launch.cu). */
static const AlgoKernels kReduceScatterAlgos[] = {
    lamportAlgo<SYMM_COLL_REDUCESCATTER>(anyTypeAndOp),
    familyAlgo<ReduceScatterPullFamily>(SYMM_ALGO_PULL, anyTypeAndOp),
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
