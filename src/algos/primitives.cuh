/* SPDX-License-Identifier: Apache-2.0 */
/* Device building blocks every collective's kernels share: sizes, L1-bypassing staging loads,
 * vectorised copies, rank-order reductions, the slice layout, Lamport (LL) lines, and the
 * dispatch from an NCCL datatype/op to the element traits and reduction kind. */
#ifndef SYMMCOLL_PRIMITIVES_CUH
#define SYMMCOLL_PRIMITIVES_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "algos.h"
#include "reduce.cuh"
#include "sync.cuh"

namespace symm {
constexpr int kThreads = 256;
constexpr int kUnroll = 4;       /* 16-byte copies in flight per thread */
constexpr int kReduceUnroll = 2; /* 16-byte vectors per rank in flight per thread (x8 ranks) */

__device__ __forceinline__ size_t divUp(size_t a, size_t b) { return (a + b - 1) / b; }
__device__ __forceinline__ size_t roundUp(size_t a, size_t b) { return divUp(a, b) * b; }
__device__ __forceinline__ size_t minSize(size_t a, size_t b) { return a < b ? a : b; }
__device__ __forceinline__ bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

/* The opening of every kernel of ours, right after its first statement, kernelEntry (sync.cuh:
 * the programmatic-dependent-launch wait, before which nothing touches memory). What openCall
 * hands the kernel: */
struct Call {
  uint64_t epoch;  /* this call's epoch (the first of a kernel in rounds) */
  uint32_t ticket; /* the block's ticket, held by its last thread (endCall) */
  size_t half;     /* byte offset of this call's staging half: (epoch & 1) * halfBytes */
  size_t lo, hi;   /* block b's part [lo, hi) of count elements (N > 0, below) */
};
/* Part width for kernels that divide their work otherwise (in rounds, in Lamport lines, in
 * slices of a staging half): openCall leaves lo and hi unset. */
constexpr int kNoPart = 0;

/* This call's epoch and the block's ticket (beginCall), the Lamport refresh (refreshLamportLine;
 * linesWritten: lines of its own writer slot the kernel writes anyway, Lamport only), the staging
 * half, and, for N > 0, block b's part [lo, hi) of count elements in whole vectors of N elements
 * (the last parts may be short or empty). Between kernelEntry and this, a kernel may only do
 * what needs no epoch (the Lamport kernel loads its first input line, overlapping the epoch's
 * load; push and pull pick their zero-copy path). False: leave at once and store nothing, an
 * earlier kernel of ours on this rank gave up (beginCall; no Lamport refresh either). */
template <int N>
__device__ __forceinline__ bool openCall(const KernelArgs& a, volatile int* failed, Call* c,
                                         size_t linesWritten = 0) {
  c->ticket = 0;
  if (!beginCall(a, &c->epoch, failed, &c->ticket)) return false;
  refreshLamportLine(a, c->epoch, linesWritten);
  c->half = (size_t)(c->epoch & 1u) * a.halfBytes;
  if constexpr (N > 0) {
    const size_t per = roundUp(divUp(a.count, (size_t)gridDim.x), (size_t)N);
    c->lo = minSize((size_t)blockIdx.x * per, a.count);
    c->hi = minSize(c->lo + per, a.count);
  }
  return true;
}

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

/* dsts[d][i] = src[i] for every d < ndst (at most R), elements [lo, hi): copyRange with each load
 * feeding every destination, so a source read once reaches several ranks (and the stores of one
 * load go to all destinations at once rather than one destination after the other). `vec`: lo
 * is a multiple of the vector width and every base is 16-byte aligned. */
template <typename E, int R = SYMM_MAX_RANKS>
__device__ __forceinline__ void copyRangeMulti(char* const* dsts, int ndst, const char* src,
                                               size_t lo, size_t hi, bool vec) {
  typedef typename E::T T;
  constexpr int N = Vec<E>::N;
  if (lo >= hi) return;
  size_t first = lo;
  if (vec) {
    const size_t nvec = (hi - lo) / N;
    const size_t stride = blockDim.x;
    size_t v = threadIdx.x;
    for (; v + (kUnroll - 1) * stride < nvec; v += kUnroll * stride) {
      uint4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++)
        x[u] = *(const uint4*)(src + (lo + (v + u * stride) * N) * sizeof(T));
#pragma unroll
      for (int d = 0; d < R; d++) {
        if (d >= ndst) continue;
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
          *(uint4*)(dsts[d] + (lo + (v + u * stride) * N) * sizeof(T)) = x[u];
      }
    }
    for (; v < nvec; v += stride) {
      const size_t off = (lo + v * N) * sizeof(T);
      const uint4 x = *(const uint4*)(src + off);
#pragma unroll
      for (int d = 0; d < R; d++)
        if (d < ndst) *(uint4*)(dsts[d] + off) = x;
    }
    first = lo + nvec * N;
  }
  for (size_t i = first + threadIdx.x; i < hi; i += blockDim.x) {
    const size_t off = i * sizeof(T);
    const T x = *(const T*)(src + off);
#pragma unroll
    for (int d = 0; d < R; d++)
      if (d < ndst) *(T*)(dsts[d] + off) = x;
  }
}

/* Element-wise reduction of 16 bytes from every rank, in rank order. */
template <typename E, int Kind, int R = SYMM_MAX_RANKS>
__device__ __forceinline__ uint4 reducePacks(const uint4* packs, int n, bool avg) {
  typedef typename Vec<E>::Pack Pack;
  Pack acc, x;
  acc.v = packs[0];
  if (avg) {
#pragma unroll
    for (int k = 0; k < Vec<E>::N; k++) acc.e[k] = Arith<E>::avgPre(acc.e[k], n);
  }
  /* Bounded, fully unrolled loop: packs[] stays in registers (same order as reduceInOrder). */
#pragma unroll
  for (int r = 1; r < R; r++) {
    if (r < n) {
      x.v = packs[r];
#pragma unroll
      for (int k = 0; k < Vec<E>::N; k++)
        acc.e[k] = Op<E, Kind>::apply(acc.e[k], avg ? Arith<E>::avgPre(x.e[k], n) : x.e[k]);
    }
  }
  if (avg) {
#pragma unroll
    for (int k = 0; k < Vec<E>::N; k++) acc.e[k] = Arith<E>::avgPost(acc.e[k], n);
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
    if (avg) acc = Arith<E>::avgPre(acc, n);
#pragma unroll
    for (int r = 1; r < R; r++) {
      if (r >= n) continue;
      const T v = loadStaging<T>(srcs[r] + off);
      acc = Op<E, Kind>::apply(acc, avg ? Arith<E>::avgPre(v, n) : v);
    }
    if (avg) acc = Arith<E>::avgPost(acc, n);
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
 * Lamport (LL) lines: every 8 bytes of payload travel as one 16-byte store {data0, flag, data1,
 * flag} (8-byte halves arrive whole, as NCCL's LL protocol relies on); flag = the low 32 bits of
 * the call's epoch. A writer slot (lamportSlotOf, sync.cuh) holds 2x the largest payload. */

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

}  // namespace symm

/* Runs CALL with `constexpr int Kind` set for a built-in op (avg reduces as a sum, then the
 * kernels finish it); else leaves err as is. */
#define SYMM_DISPATCH_OP(op, CALL)                 \
  switch (op) {                                    \
    case ncclSum:                                  \
    case ncclAvg: {                                \
      constexpr int Kind = symm::kSum;             \
      CALL;                                        \
    } break;                                       \
    case ncclProd: {                               \
      constexpr int Kind = symm::kProd;            \
      CALL;                                        \
    } break;                                       \
    case ncclMin: {                                \
      constexpr int Kind = symm::kMin;             \
      CALL;                                        \
    } break;                                       \
    case ncclMax: {                                \
      constexpr int Kind = symm::kMax;             \
      CALL;                                        \
    } break;                                       \
    default:                                       \
      break;                                       \
  }

#endif
