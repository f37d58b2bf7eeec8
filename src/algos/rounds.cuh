/* SPDX-License-Identifier: Apache-2.0 */
/* The staged all-gather (push) and reduce-scatter (pull) kernels' shared skeleton: every rank's
 * share in rounds inside one launch, each round its own epoch and staging half, pipelined with
 * split barriers. The safety argument is here; README.md ("All-gather and reduce-scatter") sums
 * it up. */
#ifndef SYMMCOLL_ROUNDS_CUH
#define SYMMCOLL_ROUNDS_CUH

#include "primitives.cuh"

namespace symm {

/* Round k covers elements [k*S, k*S + c) of every rank's share (count elements: all-gather's
 * input, one slice of reduce-scatter's input; c = S but for the last round). Rank r's staging half
 * (epoch & 1) holds n-1 slots of S elements, slot peerSlot(r, w) for writer w != r; S is fixed for
 * the launch, so block b owns the same staging bytes [b*B, (b+1)*B) of each slot in every round.
 * Rounds are balanced (no short last round); for large messages (block parts of 16+ pages) S and
 * B are whole 4 KiB pages, as in the two-shot (parts at odd 16-byte offsets cost it 7% of the
 * bandwidth at 128 MiB-1 GiB), else whole 16-byte vectors. Identical on every rank: count,
 * sliceMax and the grid are. */
struct RoundPlan {
  size_t S;        /* elements per round of each share = slot stride (multiple of the vector) */
  size_t B;        /* elements of a round's piece per block */
  uint32_t rounds; /* at least 1 (count > 0); the launcher keeps it <= kMaxRounds */
};

__device__ __forceinline__ RoundPlan roundPlan(const KernelArgs& a, size_t esize, int N) {
  RoundPlan p;
  size_t unit = (size_t)N;
  const size_t pageElems = 4096 / esize;
  if (minSize(a.count, a.sliceMax) >= 16 * pageElems * gridDim.x) unit = pageElems;
  const size_t sMax = a.sliceMax / unit * unit; /* >= unit: the host keeps sliceMax >= N */
  const size_t fewest = divUp(a.count, sMax);
  p.S = roundUp(divUp(a.count, fewest), unit); /* <= sMax, so rounds <= fewest */
  p.B = roundUp(divUp(p.S, (size_t)gridDim.x), unit);
  p.rounds = (uint32_t)divUp(a.count, p.S);
  return p;
}

/* Block b's part of round k: elements [first + lo, first + hi) of every share. */
struct RoundPart {
  size_t first, lo, hi;
};
__device__ __forceinline__ RoundPart roundPart(const KernelArgs& a, const RoundPlan& p,
                                               uint32_t k) {
  RoundPart r;
  r.first = (size_t)k * p.S;
  const size_t len = minSize(p.S, a.count - r.first);
  r.lo = minSize((size_t)blockIdx.x * p.B, len);
  r.hi = minSize(r.lo + p.B, len);
  return r;
}

/* The slot of writer w in rank owner's staging half: the other ranks in rank order. */
__device__ __forceinline__ size_t peerSlot(int owner, int writer) {
  return (size_t)(writer - (writer > owner));
}

__device__ __forceinline__ size_t halfOf(const KernelArgs& a, uint64_t epoch) {
  return (size_t)(epoch & 1u) * a.halfBytes;
}

/* Runs the rounds of one launch, epochs e0 .. e0+L (L = rounds-1), round k in staging half
 * (e0+k) & 1. remote(k, half): A(k), store block b's part of round k into our slot of peers'
 * staging (and, all-gather, into our own part of the output: no peer reads that); own(k): local
 * work that needs no peer, after the arrive; local(k, half): B(k), read every peer's slot of our
 * own staging (and our input), write the output. Split barriers: arrive = release our signal (blockArrive), wait = acquire every
 * rank's (blockWait); signal words per (purpose, block, writer), block b pairs with block b.
 *
 *   iteration k:  [k == 1: wait start(0)] [k >= 2: wait mid(k-2)]
 *                 A(k); arrive start(k); own(k);
 *                 [k >= 1: (k >= 2: wait start(k-1)) B(k-1); arrive mid(k-1)]
 *   after:        wait start(L); B(L); [L >= 1: wait mid(L-1)]
 *
 * So A(k+1) overlaps the start barrier of round k, and B(k-1) the pushes of peers' A(k).
 * Why every byte is read only after it was written and overwritten only after it was read
 * (block b's bytes; "peer" = block b of any rank, ourselves included):
 *  - B(k) reads our half (k & 1), written by every peer's A(k) before its arrive start(k), which
 *    B(k) waits for (the acquire and __syncthreads publish the data to the block).
 *  - Within the launch, A(k), k >= 2, overwrites peers' half (k & 1), which each peer read last in
 *    its B(k-2), before its arrive mid(k-2), which we waited for just before A(k).
 *  - A(0) overwrites half e0 & 1, last used with epoch e0-2 (never the launch before's last
 *    round). If e0-2 was the previous kernel's second-last round, that kernel waited for mid
 *    (or, the two-shot, for its last mid, after its reads of both halves) before returning: every
 *    peer had finished reading e0-2. Else e0-2 belongs to an earlier kernel than the previous
 *    one, which waited for every peer's arrival at e0-1 (every kernel waits for every peer at
 *    least once): a peer arriving in a kernel has finished every earlier kernel (stream order).
 *  - A(1) overwrites half (e0+1) & 1 = (e0-1) & 1, which may hold the previous kernel's last
 *    round, still being read by a peer that has not finished that kernel (our kernels do not wait
 *    for the last round's readers before returning). Hence the wait for start(0) first: a peer
 *    that arrived in this launch has finished the previous one.
 *  - The next kernel (any algorithm) writes half (e0+L+1) & 1 = (e0+L-1) & 1 first, maybe before
 *    any wait of its own (the first stores of the two-shot and of the multimem all-gather go to
 *    peers): the final wait for mid(L-1) proves every peer finished B(L-1), the last reader of
 *    that half in this launch. Half (e0+L) & 1 it (or a later kernel) writes only after waiting
 *    for every peer's arrival in it, i.e. after every peer finished this launch (B(L) included).
 *    With one round (L = 0), the wait for start(0) proves every peer finished the kernel before,
 *    the last user of half (e0+1) & 1.
 *  - Nobody waits for mid(L), so nobody arrives there.
 * Deadlock freedom: every wait of iteration k is for an arrival every rank makes in iteration
 * k-1 or earlier (start(0): iteration 0), and the final waits for arrivals of iteration L.
 * Signal words only grow (each writer's block b stores its epochs in increasing order, across
 * kernels too) and every wait is `>= epoch` for an epoch of the running kernel, so a signal left
 * by another kernel, of any algorithm and grid, never satisfies a wait early: it is older than
 * every epoch the waiter uses. */
template <typename Remote, typename Own, typename Local>
__device__ __forceinline__ bool runRounds(const KernelArgs& a, uint64_t e0, uint32_t rounds,
                                          volatile int* failed, Remote remote, Own own,
                                          Local local) {
  for (uint32_t k = 0; k < rounds; k++) {
    const uint64_t e = e0 + k;
    if (k == 1) {
      if (!blockWait(a, kSigStart, e0, failed)) return false;
      refreshOtherParity(a, e0, rounds);
    }
    if (k >= 2 && !blockWait(a, kSigMid, e - 2, failed)) return false;
    remote(k, halfOf(a, e));
    blockArrive(a, kSigStart, e);
    own(k);
    if (k >= 1) {
      if (k >= 2 && !blockWait(a, kSigStart, e - 1, failed)) return false;
      local(k - 1, halfOf(a, e - 1));
      blockArrive(a, kSigMid, e - 1);
    }
  }
  const uint64_t last = e0 + rounds - 1;
  if (!blockWait(a, kSigStart, last, failed)) return false;
  local(rounds - 1, halfOf(a, last));
  return rounds < 2 || blockWait(a, kSigMid, last - 1, failed);
}

}  // namespace symm

#endif
