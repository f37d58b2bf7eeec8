/* SPDX-License-Identifier: Apache-2.0 */
/* Element types and reduction functors shared by every all-reduce kernel and by the tests' host
 * reference (all __host__ __device__), so every path does the same arithmetic bit for bit. */
#ifndef SYMMCOLL_REDUCE_CUH
#define SYMMCOLL_REDUCE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define SYMM_HD __host__ __device__ __forceinline__

namespace symm {

/* Element traits: storage type T. Narrow floats (fp16, bf16, fp8) are reduced by converting both
 * operands to float, applying the op in float, and rounding back (round-to-nearest-even; fp8
 * saturates to the largest finite value) after EVERY step, as NCCL does element-wise. Integers use
 * wrap-around arithmetic in an unsigned type of the same width (no undefined overflow). */
template <typename T> struct Native {
  typedef T Type;
  static constexpr bool kFloat = false;
};

struct I8 { typedef int8_t T; typedef uint32_t U; static constexpr bool kInt = true; };
struct U8 { typedef uint8_t T; typedef uint32_t U; static constexpr bool kInt = true; };
struct I32 { typedef int32_t T; typedef uint32_t U; static constexpr bool kInt = true; };
struct U32 { typedef uint32_t T; typedef uint32_t U; static constexpr bool kInt = true; };
struct I64 { typedef int64_t T; typedef uint64_t U; static constexpr bool kInt = true; };
struct U64 { typedef uint64_t T; typedef uint64_t U; static constexpr bool kInt = true; };
struct F32 { typedef float T; static constexpr bool kInt = false; };
struct F64 { typedef double T; static constexpr bool kInt = false; };
/* Narrow floats keep their raw bits in an unsigned integer of their width. */
struct F16 {
  typedef uint16_t T;
  static constexpr bool kInt = false;
  static constexpr bool kScalarHalf = false;
  static SYMM_HD float toFloat(T x) {
    __half_raw r;
    r.x = x;
    return __half2float(__half(r));
  }
  static SYMM_HD T fromFloat(float f) {
    __half_raw r = __half_raw(__float2half_rn(f));
    return r.x;
  }
};
struct BF16 {
  typedef uint16_t T;
  static constexpr bool kInt = false;
  static constexpr bool kScalarHalf = false;
  static SYMM_HD float toFloat(T x) {
    __nv_bfloat16_raw r;
    r.x = x;
    return __bfloat162float(__nv_bfloat16(r));
  }
  static SYMM_HD T fromFloat(float f) {
    __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f));
    return r.x;
  }
};
template <__nv_fp8_interpretation_t Kind> struct F8 {
  typedef uint8_t T;
  static constexpr bool kInt = false;
  static constexpr bool kScalarHalf = true; /* NCCL's fp8 PreMulSum scales in half */
  static SYMM_HD float toFloat(T x) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x, Kind);
    return __half2float(__half(h));
  }
  static SYMM_HD T fromFloat(float f) {
    return (T)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, Kind);
  }
};
typedef F8<__NV_E4M3> F8E4M3;
typedef F8<__NV_E5M2> F8E5M2;

/* Narrow float? (has toFloat/fromFloat) */
template <typename E> struct IsNarrow { static constexpr bool value = false; };
template <> struct IsNarrow<F16> { static constexpr bool value = true; };
template <> struct IsNarrow<BF16> { static constexpr bool value = true; };
template <> struct IsNarrow<F8E4M3> { static constexpr bool value = true; };
template <> struct IsNarrow<F8E5M2> { static constexpr bool value = true; };

/* fp8 arithmetic is in hardware from sm_89 on, and NCCL refuses fp8 reductions below sm_90 (so do
 * we: symmArgsCheck, symmTunerAvailable). Images for older GPUs therefore hold no fp8 reduction
 * code, only a trap: emulated in software it made most of their build time. */
template <typename E> struct IsFp8 { static constexpr bool value = false; };
template <> struct IsFp8<F8E4M3> { static constexpr bool value = true; };
template <> struct IsFp8<F8E5M2> { static constexpr bool value = true; };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define SYMM_ARCH_REDUCES_FP8 false
#else
#define SYMM_ARCH_REDUCES_FP8 true
#endif
/* First statement of every reducing kernel: the body after it is unreachable (and compiled
 * away) where this architecture does not reduce E. */
#define SYMM_REDUCING_KERNEL(E)                                        \
  if constexpr (symm::IsFp8<E>::value && !SYMM_ARCH_REDUCES_FP8) {    \
    __trap();                                                          \
    return;                                                            \
  }

/* Binary operations on one element. */
template <typename E, bool Narrow = IsNarrow<E>::value, bool Int = E::kInt> struct Arith;

template <typename E> struct Arith<E, false, true> { /* integers */
  typedef typename E::T T;
  typedef typename E::U U;
  static SYMM_HD T add(T a, T b) { return (T)((U)a + (U)b); }
  static SYMM_HD T mul(T a, T b) { return (T)((U)a * (U)b); }
  static SYMM_HD T min(T a, T b) { return b < a ? b : a; }
  static SYMM_HD T max(T a, T b) { return a < b ? b : a; }
  /* avg (NCCL's SumPostDiv): the wrap-around sum divided by n in the element type. */
  static SYMM_HD T avgPre(T x, int) { return x; }
  static SYMM_HD T avgPost(T sum, int n) { return (T)(sum / (T)n); }
};
template <typename E> struct Arith<E, false, false> { /* float, double */
  typedef typename E::T T;
  static SYMM_HD T add(T a, T b) { return a + b; }
  static SYMM_HD T mul(T a, T b) { return a * b; }
  static SYMM_HD T min(T a, T b) { return b < a ? b : a; }
  static SYMM_HD T max(T a, T b) { return a < b ? b : a; }
  /* avg (NCCL's PreMulSum): every input times 1/n (in T), then the sum in rank order. */
  static SYMM_HD T avgPre(T x, int n) { return x * ((T)1 / (T)n); }
  static SYMM_HD T avgPost(T sum, int) { return sum; }
};
template <typename E> struct Arith<E, true, false> { /* fp16, bf16, fp8 */
  typedef typename E::T T;
  static SYMM_HD T add(T a, T b) { return E::fromFloat(E::toFloat(a) + E::toFloat(b)); }
  static SYMM_HD T mul(T a, T b) { return E::fromFloat(E::toFloat(a) * E::toFloat(b)); }
  /* min/max return one operand unchanged (no rounding). */
  static SYMM_HD T min(T a, T b) { return E::toFloat(b) < E::toFloat(a) ? b : a; }
  static SYMM_HD T max(T a, T b) { return E::toFloat(a) < E::toFloat(b) ? b : a; }
  /* avg (NCCL's PreMulSum): every input times the scalar 1/n, the scalar and the product rounded
   * as NCCL's kernels round them (fp16/bf16: to the element type; fp8: to half, then the product
   * to fp8), then the sum in rank order. Pre-multiplying keeps large inputs from overflowing
   * where NCCL's do not. */
  static SYMM_HD T avgPre(T x, int n) {
    if constexpr (E::kScalarHalf) {
      const float s = __half2float(__float2half_rn(1.0f / (float)n));
      return E::fromFloat(__half2float(__float2half_rn(E::toFloat(x) * s)));
    } else {
      const float s = E::toFloat(E::fromFloat(1.0f / (float)n));
      return E::fromFloat(E::toFloat(x) * s);
    }
  }
  static SYMM_HD T avgPost(T sum, int) { return sum; }
};

/* Reduction functors: apply() folds one more rank in; finish() runs once on the final value
 * (only avg does anything there). The kernels and the host reference use exactly these. */
enum OpKind { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };
template <typename E, int Kind> struct Op;
template <typename E> struct Op<E, kSum> {
  typedef typename E::T T;
  static SYMM_HD T apply(T a, T b) { return Arith<E>::add(a, b); }
};
template <typename E> struct Op<E, kProd> {
  typedef typename E::T T;
  static SYMM_HD T apply(T a, T b) { return Arith<E>::mul(a, b); }
};
template <typename E> struct Op<E, kMin> {
  typedef typename E::T T;
  static SYMM_HD T apply(T a, T b) { return Arith<E>::min(a, b); }
};
template <typename E> struct Op<E, kMax> {
  typedef typename E::T T;
  static SYMM_HD T apply(T a, T b) { return Arith<E>::max(a, b); }
};

/* The reference all-reduce of one element: in rank order 0..n-1, avg's pre-multiply on every
 * input and its post-divide on the sum. Every kernel follows exactly this order. `avg` is only
 * meaningful with kSum. */
template <typename E, int Kind>
SYMM_HD typename E::T reduceInOrder(const typename E::T* values, int n, bool avg) {
  typename E::T acc = avg ? Arith<E>::avgPre(values[0], n) : values[0];
  for (int r = 1; r < n; r++)
    acc = Op<E, Kind>::apply(acc, avg ? Arith<E>::avgPre(values[r], n) : values[r]);
  if (avg) acc = Arith<E>::avgPost(acc, n);
  return acc;
}

}  // namespace symm

/* Calls F::template run<E>(args...) for the element traits of `dtype`; returns false if unknown. */
#define SYMM_DISPATCH_DTYPE(dtype, CALL)             \
  switch (dtype) {                                   \
    case ncclInt8: { typedef symm::I8 E; CALL; } break;        \
    case ncclUint8: { typedef symm::U8 E; CALL; } break;       \
    case ncclInt32: { typedef symm::I32 E; CALL; } break;      \
    case ncclUint32: { typedef symm::U32 E; CALL; } break;     \
    case ncclInt64: { typedef symm::I64 E; CALL; } break;      \
    case ncclUint64: { typedef symm::U64 E; CALL; } break;     \
    case ncclFloat16: { typedef symm::F16 E; CALL; } break;    \
    case ncclFloat32: { typedef symm::F32 E; CALL; } break;    \
    case ncclFloat64: { typedef symm::F64 E; CALL; } break;    \
    case ncclBfloat16: { typedef symm::BF16 E; CALL; } break;  \
    case ncclFloat8e4m3: { typedef symm::F8E4M3 E; CALL; } break; \
    case ncclFloat8e5m2: { typedef symm::F8E5M2 E; CALL; } break; \
    default: break;                                  \
  }

/* The element traits of every datatype, as SYMM_DISPATCH_DTYPE lists them: X(traits) for each.
 * For explicit instantiations of a family whose instances several files compile
 * (reduce_scatter_pull.cuh). */
#define SYMM_DTYPE_TRAITS(X)                                                                  \
  X(symm::I8) X(symm::U8) X(symm::I32) X(symm::U32) X(symm::I64) X(symm::U64) X(symm::F16)    \
  X(symm::F32) X(symm::F64) X(symm::BF16) X(symm::F8E4M3) X(symm::F8E5M2)
#define SYMM_COUNT_TYPE_(traits) +1
static_assert(0 SYMM_DTYPE_TRAITS(SYMM_COUNT_TYPE_) == (int)ncclNumTypes,
              "SYMM_DTYPE_TRAITS names every datatype");
#undef SYMM_COUNT_TYPE_

#endif
