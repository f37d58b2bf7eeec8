/* SPDX-License-Identifier: Apache-2.0 */
/* All-gather: the Lamport (lamport.cuh), push and multimem kernels, its launcher (the copy
 * engine's route, then the launcher it shares with reduce-scatter, launch.cu) and its table of
 * algorithms.
 *
 * Push, staged: the whole message in one launch, in rounds of S elements of our input (rounds.cuh:
 * the plan, the split barriers, why every reuse of staging is safe). Round k, rank r, block b:
 *   A(k): store part b of our round-k piece into slot peerSlot(q, r) of every peer q's staging
 *         half (remote stores, nothing copied in first) and into our part of the output (each
 *         load feeds every store; nothing in place, where our input is our part of the output);
 *   own(k): that local copy on its own, after the arrive, where only our output's alignment
 *         keeps it out of A's vector loop;
 *   B(k): once every peer's A(k) arrived, copy part b of every peer's slot of our own staging
 *         half to that peer's part of the output (local).
 * Our own part never goes through staging. In place (sendbuff == recvbuff + rank*count): A and
 * own read only our part of the output, which nothing writes (own is skipped, B writes the other
 * parts), so the layout needs no care.
 *
 * Zero copy (every rank's output in a registered window, windows[q] = rank q's output as
 * mapped here), one launch for any size: block b waits for block b of every rank (start
 * barrier: each rank's stream has reached this call, so nothing there still uses its output),
 * stores part [lo, hi) of our input straight into slot `rank` of every rank's output (each load
 * feeding every rank's store, our own output included), then waits
 * for block b of every rank again (middle barrier: every writer's part b is in our output
 * before our kernel ends). No staging, no copy-out. In place, our own slot already holds our
 * input and no other rank writes it. */
#include <stdint.h>

#include "copyengine.h"
#include "family.cuh"
#include "lamport.cuh"
#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"
#include "rounds.cuh"

namespace symm {

template <typename E, int R>
__device__ __forceinline__ void allGatherZeroCopy(const KernelArgs& a, volatile int* failed) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  Call c;
  if (!openCall<N>(a, failed, &c)) return;
  /* The start barrier first (every output is free to write), the middle one after. */
  if (!blockBarrier(a, kSigStart, c.epoch, failed)) return;
  const size_t ours = (size_t)a.rank * a.sliceStride * sizeof(T);
  /* Each load of our input feeds every rank's store (the local copy rides along with the remote
   * ones instead of taking its own pass), peers from the next rank on. */
  const int n = worldRanks<R>(a);
  char* dsts[R];
  int ndst = 0;
  bool vec = aligned16(a.send);
  for (int i = 0; i < n; i++) {
    char* dst = a.windows[(a.rank + 1 + i) % n] + ours;
    if (dst == (const char*)a.send) continue; /* in place: our slot holds our input already */
    vec = vec && aligned16(dst);
    dsts[ndst++] = dst;
  }
  copyRangeMulti<E, R>(dsts, ndst, (const char*)a.send, c.lo, c.hi, vec);
  if (!blockBarrier(a, kSigMid, c.epoch, failed)) return;
  endCall(a, c.epoch, c.ticket);
}

/* R: the bound of the loops over ranks (family.cuh, launchByWorld; 2 only where the world is 2
 * ranks). */
template <typename E, int R>
__global__ void __launch_bounds__(kThreads, 1) allGatherPushKernel(KernelArgs a) {
  kernelEntry();
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  constexpr size_t es = sizeof(T);
  __shared__ volatile int failed;
  if (a.zeroCopy) {
    allGatherZeroCopy<E, R>(a, &failed);
    return;
  }
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c)) return;
  const uint64_t epoch0 = c.epoch;
  const RoundPlan p = roundPlan(a, es, N);
  const int me = a.rank, n = worldRanks<R>(a);
  const size_t slot = p.S * es; /* a multiple of 16: slots stay aligned */
  const char* send = (const char*)a.send;
  char* recv = (char*)a.recv;
  char* mine = recv + (size_t)me * a.sliceStride * es;
  const bool sendVec = aligned16(send);
  /* Our own part rides along with the pushes (each load of our input feeds every store), unless
   * in place (nothing to copy) or only our output is misaligned (it would take the pushes off
   * the vector path): then own() copies it on its own. */
  const bool ownAlone = mine == send || (sendVec && !aligned16(mine));
  /* Peers from the next rank on, so the ranks' first stores go to different peers. */
  auto remote = [&](uint32_t k, size_t half) {
    const RoundPart r = roundPart(a, p, k);
    char* dsts[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
      const int q = (me + 1 + i) % n;
      dsts[i] = i < n - 1    ? a.staging[q] + half + peerSlot(q, me) * slot
                : i == n - 1 ? mine + r.first * es
                             : nullptr;
    }
    copyRangeMulti<E, R>(dsts, n - (ownAlone ? 1 : 0), send + r.first * es, r.lo, r.hi, sendVec);
  };
  auto own = [&](uint32_t k) {
    if (mine == send || !ownAlone) return;
    const RoundPart r = roundPart(a, p, k);
    char* out = mine + r.first * es;
    copyRange<E>(out, send + r.first * es, r.lo, r.hi, false, false);
  };
  auto local = [&](uint32_t k, size_t half) {
    const RoundPart r = roundPart(a, p, k);
    const char* staged = a.staging[me] + half;
    for (int q = 0; q < n; q++) {
      if (q == me) continue;
      char* out = recv + ((size_t)q * a.sliceStride + r.first) * es;
      copyRange<E>(out, staged + peerSlot(me, q) * slot, r.lo, r.hi, aligned16(out), true);
    }
  };
  if (!runRounds(a, epoch0, p.rounds, &failed, remote, own, local)) return;
  endCall(a, epoch0 + p.rounds - 1, c.ticket);
}

/* Multimem, one launch per chunk of every rank's share (slotStride elements; launch.cu): one
 * multimem.st per 16 bytes of part [lo, hi) of our chunk, which lands in slot `rank` of every
 * rank's staging half (epoch & 1) at once, then a start barrier, then part [lo, hi) of every slot
 * of our staging copied to the output. A half is rewritten only in call k+2, after call k+1's
 * barrier, which each peer reaches only after finishing its kernel k. In place, each block reads
 * its part of our input before its barrier and writes only after it. A block's part starts on a
 * 16-byte unit; a
 * partial last unit carries the chunk's last elements and zeros (staging slots have room, and
 * the copy-out never reads past count). Emulate: the same units stored to every rank in a loop. */
template <typename E, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) allGatherMultimemKernel(KernelArgs a) {
  kernelEntry();
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  Call c;
  if (!openCall<N>(a, &failed, &c)) return;
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

/* The instances of each algorithm (family.cuh): one per datatype, whatever the op. */
template <int R> struct AllGatherPushFamily {
  static constexpr bool kReduces = false;
  template <typename E, int> static KernelFn of(bool) { return allGatherPushKernel<E, R>; }
};

struct AllGatherMultimemFamily {
  static constexpr bool kReduces = false;
  template <typename E, int> static KernelFn of(bool emulate) {
    return emulate ? allGatherMultimemKernel<E, true> : allGatherMultimemKernel<E, false>;
  }
};

/* The copy engine runs no kernel of ours (copyengine.c: peer copies and stream memory
 * operations over both staging halves); the kernels share reduce-scatter's launcher. */
static ncclResult_t allGatherLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                    cudaStream_t stream) {
  if (call->algo == SYMM_ALGO_COPYENGINE)
    return symmCopyEngineAllGather(call, peers, 2 * halfBytesOf(peers), stream);
  return gatherScatterLaunch(&kAllGather, call, peers, stream);
}

/* All-gather's algorithms (launch.h, AlgoKernels; familyAlgo, worldAlgo: family.cuh). It moves
 * bits: every datatype has every kernel, whatever the op. */
static const AlgoKernels kAllGatherAlgos[] = {
    lamportAlgo<SYMM_COLL_ALLGATHER>(anyTypeAndOp),
    worldAlgo<AllGatherPushFamily>(SYMM_ALGO_PUSH, anyTypeAndOp),
    {SYMM_ALGO_COPYENGINE, launchNoKernel, loadNothing, anyTypeAndOp},
    familyAlgo<AllGatherMultimemFamily>(SYMM_ALGO_MULTIMEM, anyTypeAndOp),
};

const CollKernels kAllGather = {SYMM_COLL_ALLGATHER, false, allGatherLaunch, kAllGatherAlgos,
                                (int)(sizeof(kAllGatherAlgos) / sizeof(kAllGatherAlgos[0]))};

}  // namespace symm
