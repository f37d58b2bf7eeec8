/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce-scatter's pull kernel.
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
#ifndef SYMMCOLL_REDUCE_SCATTER_PULL_CUH
#define SYMMCOLL_REDUCE_SCATTER_PULL_CUH

#include <stdint.h>

#include "launch.h"
#include "primitives.cuh"
#include "rounds.cuh"

namespace symm {

template <typename E, int Kind, int R>
__device__ __forceinline__ void reduceScatterZeroCopy(const KernelArgs& a, volatile int* failed) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  Call c;
  if (!openCall<N>(a, failed, &c)) return;
  if (!blockBarrier(a, kSigStart, c.epoch, failed)) return;
  const int n = worldRanks<R>(a);
  const char* srcs[R];
  bool vec = aligned16(a.recv);
#pragma unroll
  for (int r = 0; r < R; r++) {
    srcs[r] = r < n ? a.windows[r] + (size_t)a.rank * a.sliceStride * sizeof(T) : nullptr;
    vec = vec && (srcs[r] == nullptr || aligned16(srcs[r]));
  }
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind, R>(srcs, n, out, 1, c.lo, c.hi, vec, a.avg != 0);
  if (!blockBarrier(a, kSigMid, c.epoch, failed)) return;
  endCall(a, c.epoch, c.ticket);
}

/* R: the bound of the loops over ranks (family.cuh, launchByWorld; 2 only where the world is 2
 * ranks). */
template <typename E, int Kind, int R>
__global__ void __launch_bounds__(kThreads, 1) reduceScatterPullKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  constexpr size_t es = sizeof(T);
  __shared__ volatile int failed;
  if (a.zeroCopy) {
    reduceScatterZeroCopy<E, Kind, R>(a, &failed);
    return;
  }
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c)) return;
  const uint64_t epoch0 = c.epoch;
  const RoundPlan p = roundPlan(a, es, N);
  const int me = a.rank, n = worldRanks<R>(a);
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
    const char* srcs[R];
    char* const out[1] = {(char*)a.recv + r.first * es};
    bool vec = aligned16(out[0]);
#pragma unroll
    for (int w = 0; w < R; w++) {
      srcs[w] = w >= n    ? nullptr
                : w == me ? send + (size_t)me * stride + r.first * es
                          : a.staging[me] + half + peerSlot(me, w) * slot;
      vec = vec && (srcs[w] == nullptr || aligned16(srcs[w]));
    }
    reduceRange<E, Kind, R>(srcs, n, out, 1, r.lo, r.hi, vec, a.avg != 0);
  };
  if (!runRounds(a, epoch0, p.rounds, &failed, remote, own, local)) return;
  endCall(a, epoch0 + p.rounds - 1, c.ticket);
}

/* The instance for E, Kind and R. The 48 general instances (datatypes x ops, R = SYMM_MAX_RANKS)
 * are the longest compile of the library, so three files compile the instances:
 * reduce_scatter_pull.cu (sum, product) and reduce_scatter_pull_minmax.cu (min, max) the general
 * ones, reduce_scatter_pull_pair.cu the pair's (R = 2, every op). The family (reduce_scatter.cu)
 * sees only the declaration. */
template <typename E, int Kind, int R> KernelFn reduceScatterPullInstance() {
  return reduceScatterPullKernel<E, Kind, R>;
}

}  // namespace symm

#endif
