/* SPDX-License-Identifier: Apache-2.0 */
/* All-reduce kernels (one-shot, two-shot, Lamport, multimem and its emulation) and the C launcher. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "algos.h"
#include "reduce.cuh"
#include "sync.cuh"

extern "C" {
#include "debug.h"
#include "param.h"
}

SYMMCOLL_PARAM_FULL(SpinDeadlineMs, "SPIN_DEADLINE_MS", 0, 0, 86400000, SYMM_PARAM_AGREED,
                    "debugging only: ms a kernel waits for a peer before failing the whole "
                    "communicator (0 = wait like NCCL, forever)")
/* Measured on 2x H200 (perf/RESULTS.md): the push two-shot moves 1.07-1.17x the bytes with 128
 * blocks as with 64 from 16 MiB up, and 2 KiB per block halves the one-shot/Lamport latency at
 * 16 KiB against 16 KiB per block. */
SYMMCOLL_PARAM_FULL(ArMaxBlocks, "AR_MAX_BLOCKS", 128, 1, SYMM_MAX_BLOCKS, SYMM_PARAM_AGREED,
                    "most thread blocks per all-reduce kernel (1..128)")
SYMMCOLL_PARAM_FULL(ArRoundBytes, "AR_ROUND_BYTES", 0, 0, INT64_MAX, SYMM_PARAM_AGREED,
                    "two-shot: most message bytes per round inside a launch (0: what staging holds)")
SYMMCOLL_PARAM_FULL(ArBytesPerBlock, "AR_BYTES_PER_BLOCK", 2048, 1024, INT64_MAX,
                    SYMM_PARAM_AGREED,
                    "all-reduce bytes per thread block before another block is added")

namespace symm {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;       /* 16-byte copies in flight per thread */
constexpr int kReduceUnroll = 2; /* 16-byte vectors per rank in flight per thread (x8 ranks) */

__device__ __forceinline__ size_t divUp(size_t a, size_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ size_t roundUp(size_t a, size_t b) { return divUp(a, b) * b; }
__device__ __forceinline__ size_t minSize(size_t a, size_t b) { return a < b ? a : b; }
__device__ __forceinline__ bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

/* Loads that bypass L1: staging memory is written by other GPUs between our reads. */
__device__ __forceinline__ uint4 loadStaging16(const char* p) { return __ldcg((const uint4*)p); }
template <typename T> __device__ __forceinline__ T loadStaging(const char* p) {
  if constexpr (sizeof(T) == 1) {
    unsigned char v = __ldcg((const unsigned char*)p);
    T r;
    memcpy(&r, &v, 1);
    return r;
  } else if constexpr (sizeof(T) == 2) {
    unsigned short v = __ldcg((const unsigned short*)p);
    T r;
    memcpy(&r, &v, 2);
    return r;
  } else if constexpr (sizeof(T) == 4) {
    unsigned int v = __ldcg((const unsigned int*)p);
    T r;
    memcpy(&r, &v, 4);
    return r;
  } else {
    unsigned long long v = __ldcg((const unsigned long long*)p);
    T r;
    memcpy(&r, &v, 8);
    return r;
  }
}

template <typename E> struct Vec {
  typedef typename E::T T;
  static constexpr int N = 16 / sizeof(T);
  union Pack {
    uint4 v;
    T e[N];
  };
};

/* dst[i] = src[i] for elements [lo, hi): 16-byte vectors when `vec` (lo is a multiple of the
 * vector width and both bases are 16-byte aligned), scalar tail. */
template <typename E>
__device__ __forceinline__ void copyRange(char* dst, const char* src, size_t lo, size_t hi,
                                          bool vec, bool srcIsStaging) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  if (lo >= hi) return;
  size_t first = lo;
  if (vec) {
    const size_t nvec = (hi - lo) / N;
    const size_t stride = blockDim.x;
    size_t v = threadIdx.x;
    /* kUnroll vectors in flight per thread: NVLink latency needs many outstanding loads. */
    for (; v + (kUnroll - 1) * stride < nvec; v += kUnroll * stride) {
      uint4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const size_t off = (lo + (v + u * stride) * N) * sizeof(T);
        x[u] = srcIsStaging ? loadStaging16(src + off) : *(const uint4*)(src + off);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; u++)
        *(uint4*)(dst + (lo + (v + u * stride) * N) * sizeof(T)) = x[u];
    }
    for (; v < nvec; v += stride) {
      const size_t off = (lo + v * N) * sizeof(T);
      uint4 x = srcIsStaging ? loadStaging16(src + off) : *(const uint4*)(src + off);
      *(uint4*)(dst + off) = x;
    }
    first = lo + nvec * N;
  }
  for (size_t i = first + threadIdx.x; i < hi; i += blockDim.x) {
    const size_t off = i * sizeof(T);
    T x = srcIsStaging ? loadStaging<T>(src + off) : *(const T*)(src + off);
    *(T*)(dst + off) = x;
  }
}

/* Element-wise reduction of 16 bytes from every rank, in rank order. */
template <typename E, int Kind, int R = SYMM_MAX_RANKS>
__device__ __forceinline__ uint4 reducePacks(const uint4* packs, int n, bool avg) {
  typedef typename Vec<E>::Pack Pack;
  Pack acc, x;
  acc.v = packs[0];
  /* Bounded, fully unrolled loop: packs[] stays in registers (same order as reduceInOrder). */
#pragma unroll
  for (int r = 1; r < R; r++) {
    if (r < n) {
      x.v = packs[r];
#pragma unroll
      for (int k = 0; k < Vec<E>::N; k++) acc.e[k] = Op<E, Kind>::apply(acc.e[k], x.e[k]);
    }
  }
  if (avg) {
#pragma unroll
    for (int k = 0; k < Vec<E>::N; k++) acc.e[k] = Arith<E>::avgFinish(acc.e[k], n);
  }
  return acc.v;
}

/* dsts[d][i] = reduce over ranks r of srcs[r][i] for every d < ndst, elements [lo, hi).
 * Sources are staging buffers or (zero-copy) peers' user buffers, read with L1-bypassing loads;
 * destinations are our output and, for the two-shot, peers' staging (remote stores). */
template <typename E, int Kind, int R = SYMM_MAX_RANKS>
__device__ __forceinline__ void reduceRange(const char* const* srcs, int n, char* const* dsts,
                                            int ndst, size_t lo, size_t hi, bool vec, bool avg) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  if (lo >= hi) return;
  size_t first = lo;
  if (vec) {
    const size_t nvec = (hi - lo) / N;
    const size_t stride = blockDim.x;
    size_t v = threadIdx.x;
    /* kReduceUnroll vectors from every rank in flight before any arithmetic. */
    for (; v + (kReduceUnroll - 1) * stride < nvec; v += kReduceUnroll * stride) {
      uint4 packs[kReduceUnroll][R];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; u++) {
        const size_t off = (lo + (v + u * stride) * N) * sizeof(T);
#pragma unroll
        for (int r = 0; r < R; r++)
          if (r < n) packs[u][r] = loadStaging16(srcs[r] + off);
      }
#pragma unroll
      for (int u = 0; u < kReduceUnroll; u++) {
        const size_t off = (lo + (v + u * stride) * N) * sizeof(T);
        const uint4 out = reducePacks<E, Kind, R>(packs[u], n, avg);
#pragma unroll
        for (int d = 0; d < R; d++)
          if (d < ndst) *(uint4*)(dsts[d] + off) = out;
      }
    }
    for (; v < nvec; v += stride) {
      const size_t off = (lo + v * N) * sizeof(T);
      uint4 packs[R];
#pragma unroll
      for (int r = 0; r < R; r++)
        if (r < n) packs[r] = loadStaging16(srcs[r] + off);
      const uint4 out = reducePacks<E, Kind, R>(packs, n, avg);
#pragma unroll
      for (int d = 0; d < R; d++)
        if (d < ndst) *(uint4*)(dsts[d] + off) = out;
    }
    first = lo + nvec * N;
  }
  for (size_t i = first + threadIdx.x; i < hi; i += blockDim.x) {
    const size_t off = i * sizeof(T);
    /* reduceInOrder's arithmetic, unrolled so nothing goes through local memory. */
    T acc = loadStaging<T>(srcs[0] + off);
#pragma unroll
    for (int r = 1; r < R; r++)
      if (r < n) acc = Op<E, Kind>::apply(acc, loadStaging<T>(srcs[r] + off));
    if (avg) acc = Arith<E>::avgFinish(acc, n);
#pragma unroll
    for (int d = 0; d < R; d++)
      if (d < ndst) *(T*)(dsts[d] + off) = acc;
  }
}

/* Two-shot/multimem layout: rank q owns slice [q*S, (q+1)*S); block b handles the part
 * [b*B, (b+1)*B) of every slice, so block b pairs with block b on every peer. S and B are
 * multiples of the vector width, which keeps every part 16-byte aligned in staging. */
struct SliceLayout {
  size_t S, B, count;
  __device__ SliceLayout(size_t cnt, int nranks, int vecElems) : count(cnt) {
    S = roundUp(divUp(cnt, (size_t)nranks), (size_t)vecElems);
    B = roundUp(divUp(S, (size_t)gridDim.x), (size_t)vecElems);
  }
  __device__ size_t lo(int q) const {
    return minSize(q * S + minSize((size_t)blockIdx.x * B, S), count);
  }
  __device__ size_t hi(int q) const {
    return minSize(q * S + minSize(((size_t)blockIdx.x + 1) * B, S), count);
  }
};

/* ---------------------------------------------------------------------------------------------
 * Staging double-buffering (no end barrier): call k uses staging half (epoch & 1). A rank writes
 * a half again only in call k+2, after its call k+1 waited for every peer to arrive in call k+1;
 * a peer arriving in k+1 has finished its whole kernel k (same stream, kernels in order), so no
 * reader of call k's half remains. The same holds across algorithms: every kernel uses the same
 * epoch counter and waits for all peers at least once before it returns. */

/* One-shot: copy our input into staging, barrier, every rank reduces everything. */
template <typename E, int Kind>
__global__ void __launch_bounds__(kThreads, 1) oneShotKernel(KernelArgs a) {
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
  /* Staging is always 16-byte aligned: only the user's pointer decides each loop's width. */
  copyRange<E>(a.staging[a.rank] + half, (const char*)a.send, lo, hi, aligned16(a.send), false);
  if (!blockBarrier(a, kSigStart, epoch, &failed)) return;
  const char* srcs[SYMM_MAX_RANKS];
#pragma unroll
  for (int r = 0; r < SYMM_MAX_RANKS; r++) srcs[r] = r < a.nranks ? a.staging[r] + half : nullptr;
  char* const out[1] = {(char*)a.recv};
  reduceRange<E, Kind>(srcs, a.nranks, out, 1, lo, hi, aligned16(a.recv), a.avg != 0);
  (void)sizeof(T);
  endCall(a, epoch, ticket);
}

/* Two-shot, push style, in rounds inside one launch (no host-side chunking).
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
 * Every remote byte travels as a store; nothing is copied in. Zero-copy (inputs[] from a
 * registered symmetric window): no A, B reads peers' user buffers directly; B never reads the
 * slice another rank writes in its B, and C(k) comes after wait mid(k), so in-place is safe.
 * Reuse of half p = k & 1 (block b's bytes):
 *   - A(k) overwrites scatter slots the peer read in B(k-2), which precedes the peer's arrive
 *     mid(k-2); we waited mid(k-2) before C(k-2), before A(k).
 *   - B(k) overwrites gather slots the peer read in C(k-2), which precedes the peer's A(k) and
 *     arrive start(k); we wait start(k) before B(k).
 * Across launches the same holds with the rounds of the previous kernel (see the
 * double-buffering note above: a peer arriving in this kernel has finished its last one). */
struct TwoShotPlan {
  size_t S;        /* staging stride of one slice (elements, multiple of the vector width) */
  size_t B;        /* elements of a slice per block */
  size_t C;        /* elements per round */
  uint32_t rounds;
};

__device__ __forceinline__ TwoShotPlan twoShotPlan(const KernelArgs& a, size_t esize, int N) {
  TwoShotPlan p;
  /* Large messages (block parts of 16+ pages): slices and parts start on 4 KiB boundaries
   * (parts at odd 16-byte offsets cost 7% of the bandwidth at 128 MiB-1 GiB on H200), at most
   * 1/16 of imbalance between blocks; smaller ones: 16 bytes. */
  size_t unit = (size_t)N;
  const size_t pageElems = 4096 / esize;
  const size_t sMaxRaw = a.twoShotSliceMax; /* host: staging and SYMMCOLL_AR_ROUND_BYTES */
  if (minSize(a.count / (size_t)a.nranks, sMaxRaw) >= 16 * pageElems * gridDim.x) unit = pageElems;
  const size_t sMax = sMaxRaw / unit * unit; /* host checked sMax >= N */
  /* As few rounds as the staging allows, all about the same size (no short last round). */
  const size_t fewest = divUp(a.count, sMax * (size_t)a.nranks);
  p.S = roundUp(divUp(divUp(a.count, fewest), (size_t)a.nranks), unit);
  p.B = roundUp(divUp(p.S, (size_t)gridDim.x), unit);
  p.C = p.S * (size_t)a.nranks;
  p.rounds = (uint32_t)divUp(a.count, p.C);
  return p;
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

template <typename E>
__device__ __forceinline__ void twoShotGather(const KernelArgs& a, const TwoShotPlan& p,
                                              uint32_t round, uint64_t epoch) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  const char* half = a.staging[a.rank] + (size_t)(epoch & 1u) * a.halfBytes;
  const size_t peers = (size_t)a.nranks - 1;
  const bool recvVec = aligned16(a.recv);
  for (int q = 0; q < a.nranks; q++) {
    if (q == a.rank) continue;
    const TwoShotSlice s = twoShotSlice(a, p, round, q, N);
    const size_t slot = (size_t)(q - (q > a.rank));
    copyRange<E>((char*)a.recv + s.first * sizeof(T), half + (peers + slot) * p.S * sizeof(T),
                 s.lo, s.hi, recvVec, true);
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
    atomicOr((unsigned int*)a.errorFlag, SYMM_ERR_BAD_DESC);
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
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  __shared__ const char* pulled[SYMM_MAX_RANKS];
  uint64_t epoch0;
  uint32_t ticket = 0;
  if (!beginCall(a, &epoch0, &failed, &ticket)) return;
  refreshLamportLine(a, epoch0, 0);
  const TwoShotPlan p = twoShotPlan(a, sizeof(T), N);
  const int me = a.rank, n = a.nranks;
  const size_t peers = (size_t)n - 1;
  const bool recvVec = aligned16(a.recv);
  /* Our input reaches the peers through their scatter slots unless they read it in place. */
  const bool push = !a.zeroCopy && a.inputDesc == 0;
  bool srcVec = aligned16(a.send); /* every reduce source 16-byte aligned */
  if (a.zeroCopy)
    for (int r = 0; r < n; r++) srcVec = srcVec && aligned16(a.inputs[r]);
  /* Our descriptor travels ahead of our start signal (same thread, release store after it). */
  if (a.exchangeDescs && threadIdx.x < n && threadIdx.x != me)
    *descSlot(a.signals[threadIdx.x], blockIdx.x, me) = a.inputDesc;
  for (uint32_t round = 0; round < p.rounds; round++) {
    const uint64_t epoch = epoch0 + round;
    const size_t half = (size_t)(epoch & 1u) * a.halfBytes;
    /* A: our input slice q into rank q's scatter slot for us. */
    if (push) {
      for (int q = 0; q < n; q++) {
        if (q == me) continue;
        const TwoShotSlice s = twoShotSlice(a, p, round, q, N);
        const size_t slot = (size_t)(me - (me > q));
        copyRange<E>(a.staging[q] + half + slot * p.S * sizeof(T),
                     (const char*)a.send + s.first * sizeof(T), s.lo, s.hi, aligned16(a.send),
                     false);
      }
    }
    blockArrive(a, kSigStart, epoch);
    if (round > 0) {
      if (!blockWait(a, kSigMid, epoch - 1, &failed)) return;
      twoShotGather<E>(a, p, round - 1, epoch - 1);
    }
    if (round == 0 && a.exchangeDescs) {
      /* Each waiting thread resolves its writer's descriptor right after the acquire, so the
       * block's one barrier publishes both. */
      if (!blockWait(a, kSigStart, epoch, &failed,
                     [&](int t) { pulled[t] = peerInput(a, t, &failed); }))
        return;
      for (int r = 0; r < n; r++) srcVec = srcVec && aligned16(pulled[r]);
    } else if (!blockWait(a, kSigStart, epoch, &failed)) {
      return;
    }
    /* B: reduce our slice in rank order; write the output and every peer's gather slot. */
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
      if (a.zeroCopy)
        srcs[r] = a.inputs[r] + at;
      else if (r == me)
        srcs[r] = (const char*)a.send + at;
      else if (a.exchangeDescs && pulled[r] != nullptr)
        srcs[r] = pulled[r] + at;
      else
        srcs[r] = a.staging[me] + half + (size_t)(r - (r > me)) * p.S * sizeof(T);
      if (r != me)
        dsts[ndst++] = a.staging[r] + half + (peers + (size_t)(me - (me > r))) * p.S * sizeof(T);
    }
    reduceRange<E, Kind, R>(srcs, n, dsts, ndst, s.lo, s.hi, recvVec && srcVec, a.avg != 0);
    blockArrive(a, kSigMid, epoch);
  }
  if (!blockWait(a, kSigMid, epoch0 + p.rounds - 1, &failed)) return;
  twoShotGather<E>(a, p, p.rounds - 1, epoch0 + p.rounds - 1);
  endCall(a, epoch0 + p.rounds - 1, ticket);
}

/* ---------------------------------------------------------------------------------------------
 * Lamport one-shot (no barrier): every 8 bytes of our input travel to every rank's Lamport
 * region as one 16-byte store {data0, epoch, data1, epoch} into our writer slot; a reader polls
 * its own region until both flags of a line equal this call's epoch (8-byte halves arrive whole,
 * as NCCL's LL protocol relies on), then reduces in rank order. Region half (epoch & 1):
 * a writer reuses a half in call k+2 only after finishing call k+1, which needed every rank's
 * k+1 data, so every reader had finished call k. Flags are epochs, so nothing is ever cleared
 * and stale lines (older epochs) never match. Two passes: wait for all our lines first, so a
 * block that gives up has written nothing to user memory. */
constexpr size_t kLamportSlot = 2 * SYMM_LAMPORT_MAX_BYTES;

__device__ __forceinline__ uint4 loadVolatile16(const char* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void storeVolatile16(char* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

/* Bytes [8*line, 8*line + 8) of a buffer of `bytes` bytes, zero past its end. */
__device__ __forceinline__ uint2 loadLine(const char* src, size_t line, size_t bytes) {
  const size_t off = line * 8;
  if (off + 8 <= bytes && ((uintptr_t)(src + off) & 7u) == 0) return *(const uint2*)(src + off);
  union {
    uint2 v;
    unsigned char b[8];
  } u;
  u.v = make_uint2(0, 0);
  for (size_t k = 0; k < 8 && off + k < bytes; k++) u.b[k] = (unsigned char)src[off + k];
  return u.v;
}

__device__ __forceinline__ void storeLine(char* dst, size_t line, size_t bytes, uint2 v) {
  const size_t off = line * 8;
  if (off + 8 <= bytes && ((uintptr_t)(dst + off) & 7u) == 0) {
    *(uint2*)(dst + off) = v;
    return;
  }
  union {
    uint2 v;
    unsigned char b[8];
  } u;
  u.v = v;
  for (size_t k = 0; k < 8 && off + k < bytes; k++) dst[off + k] = (char)u.b[k];
}

template <typename E, int Kind>
__global__ void __launch_bounds__(kThreads, 1) lamportKernel(KernelArgs a) {
  typedef typename E::T T;
  constexpr int kPer = 8 / sizeof(T);
  __shared__ volatile int failed;
  const size_t bytes = a.count * sizeof(T);
  const size_t lines = divUp(bytes, 8);
  const size_t per = divUp(lines, (size_t)gridDim.x);
  const size_t lo = minSize((size_t)blockIdx.x * per, lines);
  const size_t hi = minSize(lo + per, lines);
  const size_t firstLine = lo + threadIdx.x;
  /* Our first input line is loaded while beginCall fetches the epoch: two memory latencies
   * overlap instead of adding up (the input is ready: earlier work on the stream is done). */
  const uint2 firstData = firstLine < hi ? loadLine((const char*)a.send, firstLine, bytes)
                                         : make_uint2(0, 0);
  uint64_t epoch;
  uint32_t ticket = 0;
  if (!beginCall(a, &epoch, &failed, &ticket)) return;
  refreshLamportLine(a, epoch, lines);
  const size_t half = a.lamportOffset + (size_t)(epoch & 1u) * SYMM_MAX_RANKS * kLamportSlot;
  const size_t mySlot = half + (size_t)a.rank * kLamportSlot;
  /* Lines carry the epoch's low 32 bits (8-byte halves arrive whole; see README for why a stale
   * line never matches). */
  const uint32_t flag = (uint32_t)epoch;
  for (size_t i = firstLine; i < hi; i += blockDim.x) {
    const uint2 d = i == firstLine ? firstData : loadLine((const char*)a.send, i, bytes);
    const uint4 line = make_uint4(d.x, flag, d.y, flag);
#pragma unroll
    for (int r = 0; r < SYMM_MAX_RANKS; r++)
      if (r < a.nranks) storeVolatile16(a.staging[r] + mySlot + i * 16, line);
  }
  /* Pass 1: wait until every line of every writer arrived, polling all writers of a line at
   * once; the data of each thread's first line stays in registers for pass 2 (at the sizes
   * where time matters every thread has one line). */
  const char* region = a.staging[a.rank] + half;
  uint2 kept[SYMM_MAX_RANKS];
  uint64_t start = 0;
  uint32_t why = 0, polls = 0;
  for (size_t i = firstLine; i < hi && why == 0; i += blockDim.x) {
    uint32_t pending = (1u << a.nranks) - 1u;
    while (pending != 0) {
      uint4 v[SYMM_MAX_RANKS];
#pragma unroll
      for (int r = 0; r < SYMM_MAX_RANKS; r++)
        if ((pending >> r) & 1u) v[r] = loadVolatile16(region + (size_t)r * kLamportSlot + i * 16);
#pragma unroll
      for (int r = 0; r < SYMM_MAX_RANKS; r++) {
        if (((pending >> r) & 1u) && v[r].y == flag && v[r].w == flag) {
          pending &= ~(1u << r);
          if (i == firstLine) kept[r] = make_uint2(v[r].x, v[r].z);
        }
      }
      if (pending == 0) break;
      if ((++polls & 2047u) == 0 && (why = shouldGiveUp(a, &start)) != 0) break;
      if (failed) {
        why = 3;
        break;
      }
    }
  }
  if (why != 0) failed = 1;
  __syncthreads();
  if (failed) {
    if (why == SYMM_ERR_DEADLINE)
      reportDeadline(a.rank, (unsigned long long)(a.deadlineNs / 1000000u), -1, 3,
                     (unsigned long long)epoch, 0);
    return;
  }
  /* Pass 2: everything is here; reduce in rank order and write the output. */
  for (size_t i = firstLine; i < hi; i += blockDim.x) {
    union Line {
      uint2 v;
      T e[kPer];
    } acc, x;
    uint2 d[SYMM_MAX_RANKS];
#pragma unroll
    for (int r = 0; r < SYMM_MAX_RANKS; r++) {
      if (r >= a.nranks) continue;
      if (i == firstLine) {
        d[r] = kept[r];
      } else {
        const uint4 v = loadVolatile16(region + (size_t)r * kLamportSlot + i * 16);
        d[r] = make_uint2(v.x, v.z);
      }
    }
    acc.v = d[0];
#pragma unroll
    for (int r = 1; r < SYMM_MAX_RANKS; r++) {
      if (r < a.nranks) {
        x.v = d[r];
#pragma unroll
        for (int k = 0; k < kPer; k++) acc.e[k] = Op<E, Kind>::apply(acc.e[k], x.e[k]);
      }
    }
    if (a.avg) {
#pragma unroll
      for (int k = 0; k < kPer; k++) acc.e[k] = Arith<E>::avgFinish(acc.e[k], a.nranks);
    }
    storeLine((char*)a.recv, i, bytes, acc.v);
  }
  endCall(a, epoch, ticket);
}

/* multimem.ld_reduce / multimem.st on 16 bytes, for the types and ops the instruction has.
 * Mm<E,Kind>::kOk says whether a kernel exists (real and emulated alike). */
template <typename E, int Kind> struct Mm {
  static constexpr bool kOk = false;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SYMM_MULTIMEM_ASM 1
#endif

__device__ __forceinline__ void multimemStore16(char* mc, uint4 v) {
#ifdef SYMM_MULTIMEM_ASM
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(mc),
               "f"(__uint_as_float(v.x)), "f"(__uint_as_float(v.y)), "f"(__uint_as_float(v.z)),
               "f"(__uint_as_float(v.w))
               : "memory");
#else
  (void)mc;
  (void)v;
  __trap();
#endif
}

#ifdef SYMM_MULTIMEM_ASM
#define SYMM_MM_V4(name, ptxop)                                                              \
  __device__ __forceinline__ uint4 name(const char* mc) {                                    \
    uint4 v;                                                                                 \
    asm volatile("multimem.ld_reduce.relaxed.sys.global." ptxop " {%0, %1, %2, %3}, [%4];"   \
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                \
                 : "l"(mc)                                                                   \
                 : "memory");                                                                \
    return v;                                                                                \
  }
#define SYMM_MM_S32(name, ptxop)                                                             \
  __device__ __forceinline__ uint4 name(const char* mc) {                                    \
    uint4 v;                                                                                 \
    asm volatile("multimem.ld_reduce.relaxed.sys.global." ptxop " %0, [%4];\n\t"             \
                 "multimem.ld_reduce.relaxed.sys.global." ptxop " %1, [%5];\n\t"             \
                 "multimem.ld_reduce.relaxed.sys.global." ptxop " %2, [%6];\n\t"             \
                 "multimem.ld_reduce.relaxed.sys.global." ptxop " %3, [%7];"                 \
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                \
                 : "l"(mc), "l"(mc + 4), "l"(mc + 8), "l"(mc + 12)                           \
                 : "memory");                                                                \
    return v;                                                                                \
  }
#define SYMM_MM_S64(name, ptxop)                                                             \
  __device__ __forceinline__ uint4 name(const char* mc) {                                    \
    unsigned long long lo, hi;                                                               \
    asm volatile("multimem.ld_reduce.relaxed.sys.global." ptxop " %0, [%2];\n\t"             \
                 "multimem.ld_reduce.relaxed.sys.global." ptxop " %1, [%3];"                 \
                 : "=l"(lo), "=l"(hi)                                                        \
                 : "l"(mc), "l"(mc + 8)                                                      \
                 : "memory");                                                                \
    uint4 v;                                                                                 \
    v.x = (unsigned)lo;                                                                      \
    v.y = (unsigned)(lo >> 32);                                                              \
    v.z = (unsigned)hi;                                                                      \
    v.w = (unsigned)(hi >> 32);                                                              \
    return v;                                                                                \
  }
#else
#define SYMM_MM_STUB(name)                                \
  __device__ __forceinline__ uint4 name(const char* mc) { \
    (void)mc;                                             \
    __trap();                                             \
    return make_uint4(0, 0, 0, 0);                        \
  }
#define SYMM_MM_V4(name, ptxop) SYMM_MM_STUB(name)
#define SYMM_MM_S32(name, ptxop) SYMM_MM_STUB(name)
#define SYMM_MM_S64(name, ptxop) SYMM_MM_STUB(name)
#endif

SYMM_MM_V4(mmAddF32, "add.v4.f32")
SYMM_MM_V4(mmAddF16, "add.acc::f32.v4.f16x2")
SYMM_MM_V4(mmMinF16, "min.v4.f16x2")
SYMM_MM_V4(mmMaxF16, "max.v4.f16x2")
SYMM_MM_V4(mmAddBF16, "add.acc::f32.v4.bf16x2")
SYMM_MM_V4(mmMinBF16, "min.v4.bf16x2")
SYMM_MM_V4(mmMaxBF16, "max.v4.bf16x2")
SYMM_MM_S32(mmAddS32, "add.s32")
SYMM_MM_S32(mmMinS32, "min.s32")
SYMM_MM_S32(mmMaxS32, "max.s32")
SYMM_MM_S32(mmAddU32, "add.u32")
SYMM_MM_S32(mmMinU32, "min.u32")
SYMM_MM_S32(mmMaxU32, "max.u32")
SYMM_MM_S64(mmAddU64, "add.u64")
SYMM_MM_S64(mmMinS64, "min.s64")
SYMM_MM_S64(mmMaxS64, "max.s64")
SYMM_MM_S64(mmMinU64, "min.u64")
SYMM_MM_S64(mmMaxU64, "max.u64")

#define SYMM_MM_OK(E, Kind, fn)                                                      \
  template <> struct Mm<E, Kind> {                                                   \
    static constexpr bool kOk = true;                                                \
    static __device__ __forceinline__ uint4 ldReduce(const char* mc) { return fn(mc); } \
  };
SYMM_MM_OK(F32, kSum, mmAddF32)
SYMM_MM_OK(F16, kSum, mmAddF16)
SYMM_MM_OK(F16, kMin, mmMinF16)
SYMM_MM_OK(F16, kMax, mmMaxF16)
SYMM_MM_OK(BF16, kSum, mmAddBF16)
SYMM_MM_OK(BF16, kMin, mmMinBF16)
SYMM_MM_OK(BF16, kMax, mmMaxBF16)
SYMM_MM_OK(I32, kSum, mmAddS32)
SYMM_MM_OK(I32, kMin, mmMinS32)
SYMM_MM_OK(I32, kMax, mmMaxS32)
SYMM_MM_OK(U32, kSum, mmAddU32)
SYMM_MM_OK(U32, kMin, mmMinU32)
SYMM_MM_OK(U32, kMax, mmMaxU32)
SYMM_MM_OK(I64, kSum, mmAddU64)
SYMM_MM_OK(I64, kMin, mmMinS64)
SYMM_MM_OK(I64, kMax, mmMaxS64)
SYMM_MM_OK(U64, kSum, mmAddU64)
SYMM_MM_OK(U64, kMin, mmMinU64)
SYMM_MM_OK(U64, kMax, mmMaxU64)

/* Orders writes made through the multicast alias against unicast accesses to the same memory. */
__device__ __forceinline__ void fenceProxyAlias() {
#ifdef SYMM_MULTIMEM_ASM
  asm volatile("fence.proxy.alias;" ::: "memory");
#endif
}

/* Multimem: copy our input into staging, barrier, each rank reduces its slice across all ranks
 * with one multimem.ld_reduce per 16 bytes and broadcasts it with multimem.st into every rank's
 * staging, barrier, each rank copies the whole result out of its own staging. The last 16-byte
 * unit may run past `count`: staging has room, the extra lanes are never copied out.
 * Emulate: the same structure, the multicast load/store replaced by loops over peer pointers
 * (rank-order reduction, so bit-identical to the other kernels). */
template <typename E, int Kind, bool Emulate>
__global__ void __launch_bounds__(kThreads, 1) multimemKernel(KernelArgs a) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  __shared__ volatile int failed;
  uint64_t epoch;
  uint32_t ticket = 0;
  if (!beginCall(a, &epoch, &failed, &ticket)) return;
  refreshLamportLine(a, epoch, 0);
  const size_t half = (size_t)(epoch & 1u) * a.halfBytes;
  const SliceLayout L(a.count, a.nranks, N);
  char* mine = a.staging[a.rank] + half;
  const bool sendVec = aligned16(a.send), recvVec = aligned16(a.recv);
  for (int q = 0; q < a.nranks; q++)
    copyRange<E>(mine, (const char*)a.send, L.lo(q), L.hi(q), sendVec, false);
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
        for (int k = 0; k < N; k++) p.e[k] = Arith<E>::avgFinish(p.e[k], a.nranks);
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
  endCall(a, epoch, ticket);
}

/* ------------------------------------------------------------------------------------------ */
/* Host side. */

template <typename E, int Kind>
static cudaError_t launchTyped(enum symmAlgo algo, bool emulate, int blocks, cudaStream_t stream,
                               const KernelArgs& args) {
  switch (algo) {
    case SYMM_ALGO_ONESHOT:
      oneShotKernel<E, Kind><<<blocks, kThreads, 0, stream>>>(args);
      break;
    case SYMM_ALGO_TWOSHOT:
      /* 2 ranks: the instance for 2 (about 110 registers instead of 240; 1-2% faster at
       * 8 MiB-1 GiB on 2x H200). */
      if (args.nranks == 2)
        twoShotKernel<E, Kind, 2><<<blocks, kThreads, 0, stream>>>(args);
      else
        twoShotKernel<E, Kind, SYMM_MAX_RANKS><<<blocks, kThreads, 0, stream>>>(args);
      break;
    case SYMM_ALGO_LAMPORT:
      lamportKernel<E, Kind><<<blocks, kThreads, 0, stream>>>(args);
      break;
    case SYMM_ALGO_MULTIMEM:
      if constexpr (Mm<E, Kind>::kOk) {
        if (emulate)
          multimemKernel<E, Kind, true><<<blocks, kThreads, 0, stream>>>(args);
        else
          multimemKernel<E, Kind, false><<<blocks, kThreads, 0, stream>>>(args);
        break;
      } else {
        return cudaErrorInvalidValue;
      }
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename E>
static cudaError_t launchOp(ncclRedOp_t op, enum symmAlgo algo, bool emulate, int blocks,
                            cudaStream_t stream, const KernelArgs& args) {
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return launchTyped<E, kSum>(algo, emulate, blocks, stream, args);
    case ncclProd:
      return launchTyped<E, kProd>(algo, emulate, blocks, stream, args);
    case ncclMin:
      return launchTyped<E, kMin>(algo, emulate, blocks, stream, args);
    case ncclMax:
      return launchTyped<E, kMax>(algo, emulate, blocks, stream, args);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename E> static bool multimemOk(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return Mm<E, kSum>::kOk;
    case ncclProd:
      return Mm<E, kProd>::kOk;
    case ncclMin:
      return Mm<E, kMin>::kOk;
    case ncclMax:
      return Mm<E, kMax>::kOk;
    default:
      return false;
  }
}

/* Loads every kernel instance of one datatype into the current device's context. */
template <typename E, int Kind> static cudaError_t loadTyped() {
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, (const void*)oneShotKernel<E, Kind>);
  if (err == cudaSuccess)
    err = cudaFuncGetAttributes(&attr, (const void*)twoShotKernel<E, Kind, SYMM_MAX_RANKS>);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, (const void*)twoShotKernel<E, Kind, 2>);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, (const void*)lamportKernel<E, Kind>);
  if constexpr (Mm<E, Kind>::kOk) {
    /* Loading only: nothing here touches a multicast object. */
    if (err == cudaSuccess)
      err = cudaFuncGetAttributes(&attr, (const void*)multimemKernel<E, Kind, true>);
    if (err == cudaSuccess)
      err = cudaFuncGetAttributes(&attr, (const void*)multimemKernel<E, Kind, false>);
  }
  return err;
}

template <typename E> static cudaError_t loadAllOps() {
  cudaError_t err = loadTyped<E, kSum>();
  if (err == cudaSuccess) err = loadTyped<E, kProd>();
  if (err == cudaSuccess) err = loadTyped<E, kMin>();
  if (err == cudaSuccess) err = loadTyped<E, kMax>();
  return err;
}

}  // namespace symm

/* Devices whose context has every kernel loaded (bit = device ordinal), and its lock. */
static pthread_mutex_t loadLock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t loadedDevices;

extern "C" ncclResult_t symmAlgosLoadKernels(int device) {
  if (device < 0 || device >= 64) return ncclInvalidArgument;
  pthread_mutex_lock(&loadLock);
  ncclResult_t res = ncclSuccess;
  if (!(loadedDevices & (1ull << device))) {
    int oldDev = -1;
    cudaError_t err = cudaGetDevice(&oldDev);
    if (err == cudaSuccess && oldDev != device) err = cudaSetDevice(device);
    for (int dt = 0; dt < (int)ncclNumTypes && err == cudaSuccess; dt++)
      SYMM_DISPATCH_DTYPE((ncclDataType_t)dt, err = symm::loadAllOps<E>());
    if (err == cudaSuccess) {
      loadedDevices |= 1ull << device;
    } else {
      /* One line per process: the communicator then forwards on every rank. */
      static int warned;
      if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        WARN("libsymmcoll's kernels cannot run on device %d (%s): its communicators forward to "
             "NCCL", device, cudaGetErrorString(err));
      (void)cudaGetLastError();
      res = ncclUnhandledCudaError;
    }
    if (oldDev >= 0 && oldDev != device) (void)cudaSetDevice(oldDev);
  }
  pthread_mutex_unlock(&loadLock);
  return res;
}

extern "C" int symmAlgoExists(enum symmColl coll, enum symmAlgo algo, ncclDataType_t datatype,
                              ncclRedOp_t op) {
  if (coll != SYMM_COLL_ALLREDUCE) return 0;
  if (symmTypeSize(datatype) == 0 || (int)op < 0 || (int)op >= (int)ncclNumOps) return 0;
  switch (algo) {
    case SYMM_ALGO_ONESHOT:
    case SYMM_ALGO_TWOSHOT:
    case SYMM_ALGO_LAMPORT:
      return 1;
    case SYMM_ALGO_MULTIMEM: {
      bool ok = false;
      SYMM_DISPATCH_DTYPE(datatype, ok = symm::multimemOk<E>(op));
      return ok ? 1 : 0;
    }
    default:
      return 0;
  }
}

/* Blocks all ranks sharing one GPU may use together (see symmCollLaunch). */
static const int64_t kSharedGpuBlocks = 64;

/* Lamport region: 2 parities x SYMM_MAX_RANKS writer slots x 2x the largest payload (each 8
 * bytes travel as 4 data + 4 flag + 4 data + 4 flag), present when the staging buffer holds at
 * least 4x the region. */
static const size_t kLamportRegionBytes = (size_t)2 * SYMM_MAX_RANKS * 2 * SYMM_LAMPORT_MAX_BYTES;

static bool hasLamportRegion(size_t bufferBytes) { return bufferBytes >= 4 * kLamportRegionBytes; }

extern "C" int symmAlgoFits(enum symmColl coll, enum symmAlgo algo, size_t bytes, int nranks,
                            size_t stagingBytes) {
  (void)nranks;
  if (coll != SYMM_COLL_ALLREDUCE) return 0;
  if (algo == SYMM_ALGO_LAMPORT)
    return bytes <= SYMM_LAMPORT_MAX_BYTES && hasLamportRegion(stagingBytes);
  return 1;
}

/* Staging layout: [half 0][half 1][Lamport region, when the buffer is large enough]. */
static size_t chunkBytesOf(const struct symmPeers* peers) {
  const size_t usable =
      peers->bufferBytes - (hasLamportRegion(peers->bufferBytes) ? kLamportRegionBytes : 0);
  return (usable / 2) & ~(size_t)15;
}

extern "C" size_t symmAlgosStagingBytes(int nranks, size_t largestMessage) {
  (void)nranks;
  /* Two halves holding the largest message plus the Lamport region; at least 4x the region. */
  const size_t halves = largestMessage > ((size_t)1 << 40) ? ((size_t)1 << 40) : 2 * largestMessage;
  const size_t want = halves + kLamportRegionBytes;
  return want < 4 * kLamportRegionBytes ? 4 * kLamportRegionBytes : want;
}

extern "C" size_t symmAlgosPadBytes(void) { return symm::kPadBytes; }

/* Words 0-1: epoch and ticket; the userRegTable (src/transport/userreg.c) sits at 4 KiB. */
extern "C" size_t symmAlgosLocalStateBytes(void) { return (size_t)64 << 10; }

static ncclResult_t allReduceLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                    cudaStream_t stream) {
  const size_t esize = symmTypeSize(call->datatype);
  if (esize == 0 || !symmAlgoExists(call->coll, call->algo, call->datatype, call->op)) {
    WARN("all-reduce: no %d kernel for datatype %d op %d", (int)call->algo, (int)call->datatype,
         (int)call->op);
    return ncclInvalidArgument;
  }
  if (call->count == 0) return ncclSuccess;
  if (peers->nranks < 1 || peers->nranks > SYMM_MAX_RANKS ||
      peers->signalBytes < symm::kPadBytes || peers->localStateBytes < 2 * sizeof(uint64_t)) {
    WARN("all-reduce: peer memory too small or bad rank count (%d ranks)", peers->nranks);
    return ncclInternalError;
  }
  if (!symmAlgoFits(call->coll, call->algo, call->count * esize, peers->nranks,
                    peers->bufferBytes)) {
    WARN("all-reduce: %zu bytes do not fit the Lamport kernel (staging %zu bytes)",
         call->count * esize, peers->bufferBytes);
    return ncclInvalidArgument;
  }
  const bool realMultimem = call->algo == SYMM_ALGO_MULTIMEM && !call->emulateMultimem;
  if (realMultimem && peers->multicastBuffer == NULL) {
    WARN("all-reduce: multimem requested without a multicast mapping");
    return ncclInternalError;
  }
  const size_t chunkBytes = chunkBytesOf(peers);
  const size_t chunkElems = chunkBytes / esize; /* multiple of 16/esize: chunks stay aligned */
  if (chunkElems == 0) {
    WARN("all-reduce: staging buffer of %zu bytes is too small", peers->bufferBytes);
    return ncclInternalError;
  }

  symm::KernelArgs args;
  memset(&args, 0, sizeof(args));
  for (int r = 0; r < peers->nranks; r++) {
    args.staging[r] = (char*)peers->buffers[r];
    args.signals[r] = peers->signals[r];
  }
  args.localState = peers->localState;
  args.abortFlag = peers->abortFlag;
  args.errorFlag = peers->errorFlag;
  args.multicast = (char*)peers->multicastBuffer;
  args.halfBytes = chunkBytes;
  {
    /* Two-shot rounds: 2(n-1) slices of staging per round, and the round-size knob. */
    const size_t peerCount = peers->nranks > 1 ? (size_t)peers->nranks - 1 : 1;
    size_t sliceMax = chunkBytes / (2 * peerCount * esize);
    const int64_t roundBytes = symmParamArRoundBytes();
    if (roundBytes > 0 && (size_t)roundBytes / ((size_t)peers->nranks * esize) < sliceMax)
      sliceMax = (size_t)roundBytes / ((size_t)peers->nranks * esize);
    if (sliceMax < 16 / esize) sliceMax = 16 / esize;
    args.twoShotSliceMax = sliceMax;
  }
  args.lamportOffset = 2 * chunkBytes;
  args.lamportRegion = hasLamportRegion(peers->bufferBytes);
  args.deadlineNs = (uint64_t)symmParamSpinDeadlineMs() * 1000000ull;
  args.rank = peers->rank;
  args.nranks = peers->nranks;
  args.avg = call->op == ncclAvg;
  args.zeroCopy = call->algo == SYMM_ALGO_TWOSHOT && call->windowPeers != NULL;
  /* The call's flag and the pad size are the same on all ranks. A rank without a table (its
   * registration receiver is off) never acknowledges a region, so no peer ever publishes a
   * descriptor that rank would not read: it pushes and reads scatter slots as usual. */
  args.exchangeDescs = call->algo == SYMM_ALGO_TWOSHOT && call->exchangeDescs && !args.zeroCopy &&
                       peers->userRegTable != NULL;
  args.inputDesc = args.exchangeDescs ? call->inputDesc : 0;
  args.userRegTable = peers->userRegTable;

  int64_t maxBlocks = symmParamArMaxBlocks();
  if (maxBlocks < 1) maxBlocks = 1;
  if (maxBlocks > SYMM_MAX_BLOCKS) maxBlocks = SYMM_MAX_BLOCKS;
  if (call->maxBlocks > 0 && maxBlocks > call->maxBlocks) maxBlocks = call->maxBlocks;
  /* Several ranks on one GPU (tests only): their spinning blocks must all be resident together,
   * beside whatever else runs there; the two-shot's 200+ registers per thread allow only one
   * block per SM, so the ranks share at most 64 blocks (128 on 4 ranks per GPU hung). */
  if (peers->ranksPerDevice > 1) {
    if (maxBlocks > kSharedGpuBlocks) maxBlocks = kSharedGpuBlocks;
    maxBlocks = maxBlocks / peers->ranksPerDevice > 0 ? maxBlocks / peers->ranksPerDevice : 1;
  }
  int64_t bytesPerBlock = symmParamArBytesPerBlock();
  if (bytesPerBlock < 1024) bytesPerBlock = 1024;

  if (call->algo == SYMM_ALGO_TWOSHOT && chunkBytes < 2 * (size_t)peers->nranks * 16) {
    WARN("all-reduce: staging buffer of %zu bytes is too small for the two-shot kernel",
         peers->bufferBytes);
    return ncclInternalError;
  }
  /* The two-shot kernel runs the whole message in rounds itself; the others launch once per
   * staging half. */
  const size_t launchElems = call->algo == SYMM_ALGO_TWOSHOT ? call->count : chunkElems;
  for (size_t done = 0; done < call->count; done += launchElems) {
    const size_t n = call->count - done < launchElems ? call->count - done : launchElems;
    const size_t offset = done * esize;
    args.send = (const char*)call->sendbuff + offset;
    args.recv = (char*)call->recvbuff + offset;
    args.count = n;
    if (args.zeroCopy)
      for (int r = 0; r < peers->nranks; r++)
        args.inputs[r] = (const char*)call->windowPeers[r] + offset;
    const size_t bytes = n * esize;
    /* Lamport moves twice the bytes (flags): size its grid by what travels. */
    const size_t moved = call->algo == SYMM_ALGO_LAMPORT ? 2 * bytes : bytes;
    int64_t blocks = (int64_t)((moved + (size_t)bytesPerBlock - 1) / (size_t)bytesPerBlock);
    if (blocks > maxBlocks) blocks = maxBlocks;
    if (blocks < 1) blocks = 1;
    TRACE(SYMM_COLL, "rank %d: all-reduce kernel %d, %zu elements, %lld blocks, stream %p",
          peers->rank, (int)call->algo, n, (long long)blocks, (void*)stream);
    cudaError_t err = cudaErrorInvalidValue;
    SYMM_DISPATCH_DTYPE(call->datatype,
                        err = symm::launchOp<E>(call->op, call->algo, call->emulateMultimem != 0,
                                                (int)blocks, stream, args));
    if (err != cudaSuccess) {
      WARN("all-reduce kernel launch failed: %s", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

extern "C" ncclResult_t symmCollLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                       cudaStream_t stream) {
  switch (call->coll) {
    case SYMM_COLL_ALLREDUCE:
      return allReduceLaunch(call, peers, stream);
    default:
      WARN("%s has no kernels of ours yet", symmCollName(call->coll));
      return ncclInvalidArgument;
  }
}
