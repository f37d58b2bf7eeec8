/* SPDX-License-Identifier: Apache-2.0 */
/* The all-reduce two-shot kernel (a reduce-scatter phase and an all-gather phase in rounds inside
 * one launch). Its instances are the heaviest code to compile, so two translation units share
 * this header: all_reduce_twoshot.cu holds the instances for up to SYMM_MAX_RANKS ranks,
 * all_reduce_twoshot_pair.cu those for exactly 2, and a parallel build compiles them side by
 * side. */
#ifndef SYMM_ALL_REDUCE_TWOSHOT_CUH
#define SYMM_ALL_REDUCE_TWOSHOT_CUH
#include "family.cuh"
#include "launch.h"
#include "primitives.cuh"

namespace symm {

/* Two-shot, push style, in rounds inside one launch (the launcher splits only messages of more
 * than kMaxRounds rounds, launch.h, each piece a launch of its own).
 *
 * Round i covers elements [i*C, i*C + c) of the message (C = n*S, c <= C); rank q owns slice q
 * (Si = roundup(ceil(c/n), 16 B) elements, the last slice shorter), block b part b of every slice.
 * Staging half (epoch_i & 1) of rank r, in elements of stride S (fixed for the whole launch, so a
 * block owns the same staging bytes in every round):
 *   scatter area, slot s(w): writer w's input slice r          (n-1 slots)
 *   gather area,  slot s(q): owner q's reduced slice q         (n-1 slots)
 * where s(x) = x - (x > r) skips our own rank. Round k (epoch e0+k, staging half (e0+k) & 1),
 * rank r, with split barriers (arrive = release our signal, wait = acquire everyone's):
 *   A(k)  pushes its input slice q to rank q's scatter slot s_q(r), every q != r (remote stores);
 *   arrive start(k);
 *   wait mid(k-1), then C(k-1): copies the gather area of round k-1 to its output (local);
 *   wait start(k);
 *   B(k)  reduces slice r in rank order from its own input and its scatter slots, writes the
 *         output and pushes the result into every peer's gather slot (remote stores);
 *   arrive mid(k).
 * After the last round: wait mid, C. The waits come as late as the data allows, so the pushes
 * of A(k+1) overlap the mid barrier of round k and C(k-1) overlaps the start barrier of round k.
 * Every remote byte travels as a store; nothing is copied in. Zero-copy on the inputs
 * (windows[] are the peers' inputs, small calls): no A, B reads peers' user buffers directly; B
 * never reads the slice another rank writes in its B, and C(k) comes after wait mid(k), so
 * in-place is safe. Zero-copy on the outputs (windowsOut, large calls): B stores the result
 * into every peer's output instead of its gather slot, and there is no C (the last wait mid
 * still comes before the call ends: every peer's stores into our output are done). In place,
 * rank q's B(k) overwrites our slice q of round k, which we read in A(k) before arrive
 * start(k), which q waits for; our own slice only we read and write. Our output is free once
 * our kernel runs, and a peer stores into it only after waiting for our start(0).
 * Reuse of half p = k & 1 (block b's bytes):
 *   - A(k) overwrites scatter slots the peer read in B(k-2), which precedes the peer's arrive
 *     mid(k-2); we waited mid(k-2) before C(k-2), before A(k).
 *   - B(k) overwrites gather slots the peer read in C(k-2), which precedes the peer's A(k) and
 *     arrive start(k); we wait start(k) before B(k).
 * Across launches the same holds with the rounds of the previous kernel (the double-buffering
 * note in all_reduce.cu: a peer arriving in this kernel has finished its last one).
 * Split rounds (SYMMCOLL_TWOSHOT_SPLIT=1 or 2; off by default until timed on a pair): each block
 * part is cut in two pieces (twoShotSplitAt). A(k) pushes the first piece, arrives start(k), pushes
 * the rest, arrives start-rest(k); B(k) reduces the first piece after wait start(k) and the rest
 * after wait start-rest(k). Without it the link idled between A(k) and B(k) for a signal's round
 * trip (about 2 us per round on NVLink); now that wait overlaps the rest's pushes. Every argument
 * above holds per piece with that piece's start signal: a piece is read (B), and in place
 * overwritten by its owner's B, only after the signal its writer released after writing (reading)
 * it; start(k) still precedes everything else B(k) does, and start-rest(k) is released after
 * start(k), so no other ordering changes.
 * With SYMMCOLL_TWOSHOT_SPLIT=2 and staged outputs (no windowsOut), B(k) also arrives mid-first(k)
 * between its pieces, and C(k) copies the first pieces after wait mid-first(k), the rest after wait
 * mid(k): the copy-out after the last barrier shrinks to the second pieces. C(k)'s first pieces
 * were written by their owners' B(k) before mid-first(k); in place with inputs read where they lie,
 * C(k) overwrites our slice q's first piece, which q read in its B(k) before mid-first(k), never
 * the second piece q may still read. Everything that follows C(k) in the reuse arguments still
 * comes after wait mid(k). */
struct TwoShotPlan {
  size_t S;        /* staging stride of one slice (elements, multiple of the vector width) */
  size_t B;        /* elements of a slice per block */
  size_t C;        /* elements per round */
  size_t unit;     /* S and B are multiples of it (the vector, or a 4 KiB page) */
  uint32_t rounds;
  bool split;      /* each round pushed in two pieces (twoShotSplitAt) */
  bool splitMid;   /* and reduced pieces signalled apart (staged outputs only) */
};

__device__ __forceinline__ TwoShotPlan twoShotPlan(const KernelArgs& a, size_t esize, int N) {
  TwoShotPlan p;
  /* Large messages (block parts of 16+ pages): slices and parts start on 4 KiB boundaries
   * (parts at odd 16-byte offsets cost 7% of the bandwidth at 128 MiB-1 GiB on H200), at most
   * 1/16 of imbalance between blocks; smaller ones: 16 bytes. */
  size_t unit = (size_t)N;
  const size_t pageElems = 4096 / esize;
  const size_t sMaxRaw = a.sliceMax; /* host: staging and SYMMCOLL_AR_ROUND_BYTES */
  if (minSize(a.count / (size_t)a.nranks, sMaxRaw) >= 16 * pageElems * gridDim.x) unit = pageElems;
  const size_t sMax = sMaxRaw / unit * unit; /* host checked sMax >= N */
  /* As few rounds as the staging allows, all about the same size (no short last round). */
  const size_t fewest = divUp(a.count, sMax * (size_t)a.nranks);
  p.S = roundUp(divUp(divUp(a.count, fewest), (size_t)a.nranks), unit);
  p.B = roundUp(divUp(p.S, (size_t)gridDim.x), unit);
  p.C = p.S * (size_t)a.nranks;
  p.rounds = (uint32_t)divUp(a.count, p.C);
  p.unit = unit;
  /* Only where the round pushes (inputs read from the peers' windows leave nothing in flight
   * to overlap: a split would only add a signal's trip). */
  p.split = a.splitRounds != 0 && p.B >= 2 * unit && !(a.zeroCopy && !a.windowsOut);
  p.splitMid = p.split && a.splitRounds >= 2 && !(a.zeroCopy && a.windowsOut);
  return p;
}

/* Where block parts of a slice split into the round's two pieces: at half the part, rounded up
 * to the plan's unit (hi when the plan does not split). The same on every rank for the same
 * slice and block, so a piece a rank reduces is exactly the piece its writers signalled. */
__device__ __forceinline__ size_t twoShotSplitAt(const TwoShotPlan& p, size_t lo, size_t hi) {
  if (!p.split) return hi;
  return lo + minSize(roundUp(divUp(hi - lo, (size_t)2), p.unit), hi - lo);
}

/* Slice q of round `round`: first element in the message, and block b's part [lo, hi) of it. */
struct TwoShotSlice {
  size_t first, lo, hi;
};
__device__ __forceinline__ TwoShotSlice twoShotSlice(const KernelArgs& a, const TwoShotPlan& p,
                                                     uint32_t round, int q, int N) {
  const size_t base = (size_t)round * p.C;
  const size_t c = minSize(p.C, a.count - base);
  const size_t Si = roundUp(divUp(c, (size_t)a.nranks), (size_t)N);
  const size_t start = minSize((size_t)q * Si, c);
  const size_t len = minSize(Si, c - start);
  TwoShotSlice s;
  s.first = base + start;
  s.lo = minSize((size_t)blockIdx.x * p.B, len);
  s.hi = minSize(s.lo + p.B, len);
  return s;
}

/* C: the peers' reduced slices of `round`, from our gather slots into the output; piece 0 or
 * 1 of each block part (twoShotSplitAt), or the whole part (-1). */
template <typename E>
__device__ __forceinline__ void twoShotGather(const KernelArgs& a, const TwoShotPlan& p,
                                              uint32_t round, uint64_t epoch, int piece) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  const char* half = a.staging[a.rank] + (size_t)(epoch & 1u) * a.halfBytes;
  const size_t peers = (size_t)a.nranks - 1;
  const bool recvVec = aligned16(a.recv);
  for (int q = 0; q < a.nranks; q++) {
    if (q == a.rank) continue;
    const TwoShotSlice s = twoShotSlice(a, p, round, q, N);
    const size_t cut = twoShotSplitAt(p, s.lo, s.hi);
    const size_t slot = (size_t)(q - (q > a.rank));
    copyRange<E>((char*)a.recv + s.first * sizeof(T), half + (peers + slot) * p.S * sizeof(T),
                 piece == 1 ? cut : s.lo, piece == 0 ? cut : s.hi, recvVec, true);
  }
}

/* ncclCommRegister zero-copy: writer t's input as mapped here when t published a descriptor (it
 * did not push), else NULL. Called by the thread that acquired t's start(0) signal, so the
 * descriptor it reads is this call's. */
__device__ __forceinline__ const char* peerInput(const KernelArgs& a, int t, volatile int* failed) {
  if (t == a.rank) return nullptr;
  const uint64_t d = *(volatile const uint64_t*)descSlot(a.signals[a.rank], blockIdx.x, t);
  if (d == 0) return nullptr;
  const int slot = SYMM_USER_REG_DESC_SLOT(d);
  const unsigned long long base =
      slot >= 0 && slot < SYMM_USER_REG_SLOTS
          ? __ldcg((const unsigned long long*)a.userRegTable + t * SYMM_USER_REG_SLOTS + slot)
          : 0ull;
  if (base == 0) {
    /* Only if the writer deregistered memory still in use: give up rather than guess. */
    giveUp(a, SYMM_ERR_BAD_DESC);
    failEverywhere(a, SYMM_ERR_BAD_DESC);
    *failed = 1;
    return nullptr;
  }
  return (const char*)(uintptr_t)(base + SYMM_USER_REG_DESC_OFFSET(d));
}

/* R: most ranks this instance handles (its arrays and unrolled loops; 2 needs far fewer
 * registers). */
template <typename E, int Kind, int R>
__global__ void __launch_bounds__(kThreads, 1) twoShotKernel(KernelArgs a) {
  kernelEntry();
  SYMM_REDUCING_KERNEL(E)
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  __shared__ const char* pulled[SYMM_MAX_RANKS];
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c)) return;
  const uint64_t epoch0 = c.epoch;
  const TwoShotPlan p = twoShotPlan(a, sizeof(T), N);
  const int me = a.rank, n = a.nranks;
  const size_t peers = (size_t)n - 1;
  const bool writeWindows = a.zeroCopy && a.windowsOut;
  const bool readWindows = a.zeroCopy && !a.windowsOut;
  /* Every source and destination of the reduction 16-byte aligned (staging always is). */
  bool vec = aligned16(a.recv) && aligned16(a.send);
  if (a.zeroCopy)
    for (int r = 0; r < n; r++) vec = vec && aligned16(a.windows[r]);
  /* Our input reaches the peers through their scatter slots unless they read it in place. */
  const bool push = !readWindows && a.inputDesc == 0;
  /* Wait mid(k), then C(k) (no C where B stored into the outputs); with p.splitMid the first
   * pieces after mid-first(k), the rest after mid(k). */
  auto finishRound = [&](uint32_t k) -> bool {
    const uint64_t e = epoch0 + k;
    if (p.splitMid) {
      if (!blockWait(a, kSigMidFirst, e, &failed)) return false;
      twoShotGather<E>(a, p, k, e, 0);
    }
    if (!blockWait(a, kSigMid, e, &failed)) return false;
    if (!writeWindows) twoShotGather<E>(a, p, k, e, p.splitMid ? 1 : -1);
    return true;
  };
  /* Our descriptor travels ahead of our start signal (same thread, release store after it). */
  if (a.exchangeDescs && threadIdx.x < n && threadIdx.x != me)
    *descSlot(a.signals[threadIdx.x], blockIdx.x, me) = a.inputDesc;
  for (uint32_t round = 0; round < p.rounds; round++) {
    const uint64_t epoch = epoch0 + round;
    const size_t half = (size_t)(epoch & 1u) * a.halfBytes;
    /* A: our input slice q into rank q's scatter slot for us; with a split plan the first
     * piece, start, the rest, start-rest. */
    for (int piece = 0; piece < (p.split ? 2 : 1); piece++) {
      if (push) {
        for (int q = 0; q < n; q++) {
          if (q == me) continue;
          const TwoShotSlice s = twoShotSlice(a, p, round, q, N);
          const size_t cut = twoShotSplitAt(p, s.lo, s.hi);
          const size_t slot = (size_t)(me - (me > q));
          copyRange<E>(a.staging[q] + half + slot * p.S * sizeof(T),
                       (const char*)a.send + s.first * sizeof(T), piece == 0 ? s.lo : cut,
                       piece == 0 ? cut : s.hi, aligned16(a.send), false);
        }
      }
      blockArrive(a, piece == 0 ? kSigStart : kSigStartRest, epoch);
    }
    if (round > 0 && !finishRound(round - 1)) return;
    if (round == 0 && a.exchangeDescs) {
      /* Each waiting thread resolves its writer's descriptor right after the acquire, so the
       * block's one barrier publishes both. */
      if (!blockWait(a, kSigStart, epoch, &failed,
                     [&](int t) { pulled[t] = peerInput(a, t, &failed); }))
        return;
      for (int r = 0; r < n; r++) vec = vec && aligned16(pulled[r]);
    } else if (!blockWait(a, kSigStart, epoch, &failed)) {
      return;
    }
    if (round == 0) refreshOtherParity(a, epoch0, p.rounds);
    /* B: reduce our slice in rank order; write the output and every peer's gather slot (or
     * output). */
    const TwoShotSlice s = twoShotSlice(a, p, round, me, N);
    const char* srcs[SYMM_MAX_RANKS];
    char* dsts[SYMM_MAX_RANKS];
    int ndst = 0;
    dsts[ndst++] = (char*)a.recv + s.first * sizeof(T);
#pragma unroll
    for (int r = 0; r < R; r++) {
      srcs[r] = nullptr;
      if (r >= n) continue;
      const size_t at = s.first * sizeof(T);
      if (readWindows)
        srcs[r] = a.windows[r] + at;
      else if (r == me)
        srcs[r] = (const char*)a.send + at;
      else if (a.exchangeDescs && pulled[r] != nullptr)
        srcs[r] = pulled[r] + at;
      else
        srcs[r] = a.staging[me] + half + (size_t)(r - (r > me)) * p.S * sizeof(T);
      if (r != me)
        dsts[ndst++] = writeWindows ? a.windows[r] + at
                                    : a.staging[r] + half +
                                          (peers + (size_t)(me - (me > r))) * p.S * sizeof(T);
    }
    /* The first piece while the writers' rest may still be in flight, then the rest. */
    const size_t cut = twoShotSplitAt(p, s.lo, s.hi);
    reduceRange<E, Kind, R>(srcs, n, dsts, ndst, s.lo, cut, vec, a.avg != 0);
    if (p.splitMid) blockArrive(a, kSigMidFirst, epoch);
    if (p.split) {
      if (!blockWait(a, kSigStartRest, epoch, &failed)) return;
      reduceRange<E, Kind, R>(srcs, n, dsts, ndst, cut, s.hi, vec, a.avg != 0);
    }
    blockArrive(a, kSigMid, epoch);
  }
  if (!finishRound(p.rounds - 1)) return;
  endCall(a, epoch0 + p.rounds - 1, c.ticket);
}

/* The instances for at most R ranks (family.cuh). */
template <int R> struct TwoShotFamily {
  static constexpr bool kReduces = true;
  template <typename E, int Kind> static KernelFn of(bool) { return twoShotKernel<E, Kind, R>; }
};

}  // namespace symm

#endif
