/* SPDX-License-Identifier: Apache-2.0 */
/* All-reduce: the Lamport (lamport.cuh), one-shot and multimem kernels (and the multimem
 * emulation), its launcher and its table of algorithms, which also holds the two-shot kernel
 * (all_reduce_twoshot.cu). */
#include <stdint.h>
#include <string.h>

#include "family.cuh"
#include "lamport.cuh"
#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"

extern "C" {
#include "debug.h"
#include "param.h"
}

/* Off: timed on the H200 pair against one signal per round, 1 gains 1.3 us at 16 MiB and loses
 * 0.8 us at 64 MiB, 2 loses eager (perf/RESULTS.md, session 29, S2). */
SYMMCOLL_PARAM_FULL(TwoShotSplit, "TWOSHOT_SPLIT", 0, 0, 2, SYMM_PARAM_AGREED,
                    "two-shot all-reduce: 1 pushes each round in two pieces, each with its own "
                    "signal, so the reduction starts on the first while the second is in flight; "
                    "2 also signals the reduced pieces apart, so copying staged results out "
                    "starts on the first (0: one signal per round and barrier)")

namespace symm {

/* ---------------------------------------------------------------------------------------------
 * Staging double-buffering (no end barrier): call k uses staging half (epoch & 1). A rank writes
 * a half again only in call k+2, after its call k+1 waited for every peer to arrive in call k+1;
 * a peer arriving in k+1 has finished its whole kernel k (same stream, kernels in order), so no
 * reader of call k's half remains. The same holds across algorithms: every kernel uses the same
 * epoch counter and waits for all peers at least once before it returns. */

/* One-shot: copy our input into staging, barrier, every rank reduces everything. R: the bound
 * of the loops over ranks (family.cuh, launchByWorld; 2 only where the world is 2 ranks). */
template <typename E, int Kind, int R>
__global__ void __launch_bounds__(kThreads, 1) oneShotKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  Call c;
  if (!openCall<N>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half, lo = c.lo, hi = c.hi;
  /* Staging is always 16-byte aligned: only the user's pointer decides each loop's width. */
  copyRange<E>(a.staging[a.rank] + half, (const char*)a.send, lo, hi, aligned16(a.send), false);
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  const int n = worldRanks<R>(a);
  const char* srcs[R];
#pragma unroll
  for (int r = 0; r < R; r++) srcs[r] = r < n ? a.staging[r] + half : nullptr;
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind, R>(srcs, n, out, 1, lo, hi, aligned16(a.recv), a.avg != 0);
  (void)sizeof(T);
  endCall(a, epoch, c.ticket);
}

/* Multimem: copy our input into staging, barrier, each rank reduces its slice across all ranks
 * with one multimem.ld_reduce per 16 bytes and broadcasts it with multimem.st into every rank's
 * staging, barrier, each rank copies the whole result out of its own staging. The last 16-byte
 * unit may run past `count`: staging has room, the extra lanes are never copied out.
 * Emulate: the same structure, the multicast load/store replaced by loops over peer pointers
 * (rank-order reduction, so bit-identical to the other kernels). */
template <typename E, int Kind, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) multimemKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c)) return;
  const uint64_t epoch = c.epoch;
  const size_t half = c.half;
  const SliceLayout L(a.count, a.nranks, N);
  char* mine = a.staging[a.rank] + half;
  const bool sendVec = aligned16(a.send), recvVec = aligned16(a.recv);
  /* avg: the switch only sums, so real multicast pre-multiplies its inputs at copy-in (NCCL's
   * PreMulSum order); the emulation copies them as they are and pre-multiplies in reducePacks,
   * like every other kernel. */
  const bool preMulIn = !Emulate && a.avg != 0;
  for (int q = 0; q < a.nranks; q++) {
    if (preMulIn) {
      for (size_t i = L.lo(q) + threadIdx.x; i < L.hi(q); i += blockDim.x)
        ((T*)mine)[i] = Arith<E>::avgPre(((const T*)a.send)[i], a.nranks);
    } else {
      copyRange<E>(mine, (const char*)a.send, L.lo(q), L.hi(q), sendVec, false);
    }
  }
  /* Unicast copy-in, then multicast reads of it: the proxies are ordered before the release. */
  if (!Emulate) fenceProxyAlias();
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  /* An empty part must stay empty: its clamped start may not be 16-byte aligned, and rounding
   * it would hand the last unit to two blocks at once. */
  const size_t mineLo = L.lo(a.rank), mineHi = L.hi(a.rank);
  const size_t ulo = mineLo < mineHi ? mineLo * sizeof(T) / 16 : 0;
  const size_t uhi = mineLo < mineHi ? divUp(mineHi * sizeof(T), 16) : 0;
  for (size_t u = ulo + threadIdx.x; u < uhi; u += blockDim.x) {
    const size_t off = half + u * 16;
    uint4 v;
    if constexpr (Emulate) {
      uint4 packs[SYMM_MAX_RANKS];
#pragma unroll
      for (int r = 0; r < SYMM_MAX_RANKS; r++)
        if (r < a.nranks) packs[r] = loadStaging16(a.staging[r] + off);
      v = reducePacks<E, Kind>(packs, a.nranks, a.avg != 0);
#pragma unroll
      for (int r = 0; r < SYMM_MAX_RANKS; r++)
        if (r < a.nranks) *(uint4*)(a.staging[r] + off) = v;
    } else {
      v = Mm<E, Kind>::ldReduce(a.multicast + off);
      if (a.avg) {
        typename Vec<E>::Pack p;
        p.v = v;
#pragma unroll
        for (int k = 0; k < N; k++) p.e[k] = Arith<E>::avgPost(p.e[k], a.nranks);
        v = p.v;
      }
      multimemStore16(a.multicast + off, v);
    }
  }
  if (!Emulate) fenceProxyAlias();
  if (!blockBarrier(a, kSigMid, epoch, &failed)) return;
  if (!Emulate) fenceProxyAlias();
  for (int q = 0; q < a.nranks; q++)
    copyRange<E>((char*)a.recv, mine, L.lo(q), L.hi(q), recvVec, true);
  endCall(a, epoch, c.ticket);
}

/* The instances of each algorithm (family.cuh). */
template <int R> struct AllReduceOneShotFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool) { return oneShotKernel<E, Kind, R>; }
};

struct AllReduceMultimemFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool emulate) {
    if constexpr (Mm<E, Kind>::kOk)
      return emulate ? multimemKernel<E, Kind, true> : multimemKernel<E, Kind, false>;
    else
      return nullptr;
  }
};

/* One-shot, multimem and Lamport: one launch per staging half of the message (each a call of
 * its own); two-shot: in rounds inside one launch (all_reduce_twoshot.cuh), at most kMaxRounds
 * per launch. */
static ncclResult_t allReduceLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                    cudaStream_t stream) {
  const size_t esize = symmTypeSize(call->datatype);
  if (call->algo == SYMM_ALGO_MULTIMEM && !call->emulateMultimem && peers->multicastBuffer == NULL) {
    WARN("all-reduce: multimem requested without a multicast mapping");
    return ncclInternalError;
  }
  const size_t halfBytes = halfBytesOf(peers);
  const size_t chunkElems = halfBytes / esize; /* multiple of 16/esize: chunks stay aligned */
  if (chunkElems == 0 ||
      (call->algo == SYMM_ALGO_TWOSHOT && halfBytes < 2 * (size_t)peers->nranks * 16)) {
    WARN("all-reduce: staging buffer of %zu bytes is too small", peers->bufferBytes);
    return ncclInternalError;
  }
  KernelArgs args;
  fillArgs(call, peers, &args);
  args.sliceMax = twoShotSliceMax(peers, halfBytes, esize);
  args.zeroCopy = call->algo == SYMM_ALGO_TWOSHOT && call->windowPeers != NULL;
  args.windowsOut = args.zeroCopy && call->windowsAreOutputs;
  /* The call's flag and the pad size are the same on all ranks. A rank without a table (its
   * registration receiver is off) never acknowledges a region, so no peer ever publishes a
   * descriptor that rank would not read: it pushes and reads scatter slots as usual. */
  args.exchangeDescs = call->algo == SYMM_ALGO_TWOSHOT && call->exchangeDescs && !args.zeroCopy &&
                       peers->userRegTable != NULL;
  args.inputDesc = args.exchangeDescs ? call->inputDesc : 0;
  args.splitRounds = call->algo == SYMM_ALGO_TWOSHOT ? (int)symmParamTwoShotSplit() : 0;
  /* Two-shot: a round covers sliceMax, rounded down to the kernel's unit, of each rank's slice
   * (twoShotPlan); at most kMaxRounds rounds per launch (the Lamport refresh's bound). */
  const size_t launchElems =
      call->algo == SYMM_ALGO_TWOSHOT
          ? roundsLaunchElems((size_t)peers->nranks * (args.sliceMax / 2), 16 / esize)
          : chunkElems;
  return launchPieces(&kAllReduce, "all-reduce", call, peers, stream, &args, launchElems);
}

/* All-reduce's algorithms (launch.h, AlgoKernels; familyAlgo, worldAlgo: family.cuh). */
static const AlgoKernels kAllReduceAlgos[] = {
    lamportAlgo<SYMM_COLL_ALLREDUCE>(anyTypeAndOp),
    worldAlgo<AllReduceOneShotFamily>(SYMM_ALGO_ONESHOT, anyTypeAndOp),
    {SYMM_ALGO_TWOSHOT, launchTwoShot, loadTwoShot, anyTypeAndOp},
    familyAlgo<AllReduceMultimemFamily>(SYMM_ALGO_MULTIMEM, multimemHasKernel),
};

const CollKernels kAllReduce = {SYMM_COLL_ALLREDUCE, true, allReduceLaunch, kAllReduceAlgos,
                                (int)(sizeof(kAllReduceAlgos) / sizeof(kAllReduceAlgos[0]))};

}  // namespace symm
