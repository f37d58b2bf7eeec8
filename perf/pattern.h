/* SPDX-License-Identifier: Apache-2.0 */
/* Data-check patterns shared by the host (CPU tests, host checks) and the device kernels: per-rank
 * inputs, independently computed expected outputs, and the element codecs for every NCCL type.
 *
 * Inputs are small integers chosen so that every partial sum, product or premultiplied sum any
 * reduction order can produce is exact in the element type: results are then exact whatever
 * algorithm ran, and we compare value for value. Only float averages (NCCL premultiplies by 1/n,
 * which rounds) are compared with a tolerance. */
#ifndef PERF_PATTERN_H
#define PERF_PATTERN_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PERF_HD __host__ __device__
#else
#define PERF_HD
#endif

/* Element types: the same codes as ncclDataType_t (the driver asserts it). */
enum perfType {
  PERF_INT8 = 0, PERF_UINT8, PERF_INT32, PERF_UINT32, PERF_INT64, PERF_UINT64,
  PERF_HALF, PERF_FLOAT, PERF_DOUBLE, PERF_BF16, PERF_FP8E4M3, PERF_FP8E5M2, PERF_NUM_TYPES
};
/* Reductions: ncclRedOp_t codes, plus mulsum (ncclRedOpCreatePreMulSum with a per-rank scalar). */
enum perfOp { PERF_SUM = 0, PERF_PROD, PERF_MAX, PERF_MIN, PERF_AVG, PERF_MULSUM, PERF_NUM_OPS };
enum perfCollKind { PERF_ALLREDUCE = 0, PERF_ALLGATHER, PERF_REDUCESCATTER };

PERF_HD static inline int perfTypeSize(int type) {
  switch (type) {
    case PERF_INT8: case PERF_UINT8: case PERF_FP8E4M3: case PERF_FP8E5M2: return 1;
    case PERF_HALF: case PERF_BF16: return 2;
    case PERF_INT32: case PERF_UINT32: case PERF_FLOAT: return 4;
    case PERF_INT64: case PERF_UINT64: case PERF_DOUBLE: return 8;
    default: return 0;
  }
}
PERF_HD static inline int perfTypeIsFloat(int type) {
  return type == PERF_HALF || type == PERF_FLOAT || type == PERF_DOUBLE || type == PERF_BF16 ||
         type == PERF_FP8E4M3 || type == PERF_FP8E5M2;
}
PERF_HD static inline int perfTypeIsUnsigned(int type) {
  return type == PERF_UINT8 || type == PERF_UINT32 || type == PERF_UINT64;
}
/* Explicit mantissa bits of a float type (precision of the average tolerance). */
PERF_HD static inline int perfTypeMantissaBits(int type) {
  switch (type) {
    case PERF_HALF: return 10;
    case PERF_FLOAT: return 23;
    case PERF_DOUBLE: return 52;
    case PERF_BF16: return 7;
    case PERF_FP8E4M3: return 3;
    case PERF_FP8E5M2: return 2;
    default: return 63;
  }
}
/* Largest E such that every integer in [-E, E] (or [0, E]) is exact in the type. */
PERF_HD static inline int64_t perfTypeExactLimit(int type) {
  switch (type) {
    case PERF_INT8: return 127;
    case PERF_UINT8: return 255;
    case PERF_INT32: return 2147483647LL;
    case PERF_UINT32: return 4294967295LL;
    case PERF_INT64: case PERF_UINT64: case PERF_DOUBLE: return 1LL << 53;
    case PERF_HALF: return 2048;
    case PERF_FLOAT: return 1LL << 24;
    case PERF_BF16: return 256;
    case PERF_FP8E4M3: return 16;
    case PERF_FP8E5M2: return 8;
    default: return 1;
  }
}

/* Largest magnitude an input takes, so that no partial result of nranks inputs leaves the
 * exact range. Capped at 1000 to keep patterns readable in a dump; at least 1. */
PERF_HD static inline int64_t perfInputBound(int type, int op, int nranks) {
  int64_t limit = perfTypeExactLimit(type);
  int64_t terms = nranks < 1 ? 1 : nranks;
  if (op == PERF_MULSUM) terms *= 2; /* scalars are 1 or 2 */
  int64_t bound = (op == PERF_MAX || op == PERF_MIN) ? limit : limit / terms;
  if (bound > 1000) bound = 1000;
  return bound < 1 ? 1 : bound;
}

/* The premultiplied-sum scalar of a rank (mulsum): 1 or 2, exact in every type. */
PERF_HD static inline int perfMulsumScalar(int rank) { return 1 + (rank & 1); }

PERF_HD static inline uint64_t perfHash(uint64_t seed, uint64_t rank, uint64_t idx) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL ^ (rank + 1) * 0xD1B54A32D192ED03ULL ^ idx;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Input element idx of `rank`, as an exact integer. nranks is the number of contributions that
 * get combined (1 for all-gather, whose data is only copied). */
PERF_HD static inline int64_t perfInputValue(int type, int op, int nranks, int rank, uint64_t seed,
                                             uint64_t idx) {
  uint64_t h = perfHash(seed, (uint64_t)rank, idx);
  if (op == PERF_PROD) {
    /* At most one rank contributes 2 and one -1 per element: products stay within {+-1, +-2}. */
    int n = nranks < 1 ? 1 : nranks;
    int64_t v = 1;
    if ((int)(idx % (uint64_t)n) == rank && (h & 1)) v = 2;
    if (!perfTypeIsUnsigned(type) && (int)((idx + 1) % (uint64_t)n) == rank && (h & 2)) v = -v;
    return v;
  }
  int64_t bound = perfInputBound(type, op, nranks);
  if (op == PERF_SUM || op == PERF_AVG || op == PERF_MULSUM) {
    /* Tiny types on many ranks (fp8): even inputs of +-1 could leave the exact range, so only
     * limit/scale ranks (a different set per element) contribute non-zero values. */
    int64_t scale = op == PERF_MULSUM ? 2 : 1;
    int64_t terms = (nranks < 1 ? 1 : nranks) * scale;
    int64_t limit = perfTypeExactLimit(type);
    if (limit < terms && (int64_t)((idx + (uint64_t)rank) % (uint64_t)nranks) >= limit / scale) return 0;
  }
  /* Unsigned types, and integer averages (so that truncating division needs no sign rule). */
  if (perfTypeIsUnsigned(type) || (op == PERF_AVG && !perfTypeIsFloat(type)))
    return (int64_t)(h % (uint64_t)(bound + 1));
  return (int64_t)(h % (uint64_t)(2 * bound + 1)) - bound;
}

/* Exact combination over all ranks of input element idx (for avg: the sum; see perfExpected). */
PERF_HD static inline int64_t perfReduceExact(int type, int op, int nranks, uint64_t seed, uint64_t idx) {
  int64_t acc = perfInputValue(type, op, nranks, 0, seed, idx);
  if (op == PERF_MULSUM) acc *= perfMulsumScalar(0);
  for (int r = 1; r < nranks; r++) {
    int64_t v = perfInputValue(type, op, nranks, r, seed, idx);
    switch (op) {
      case PERF_PROD: acc *= v; break;
      case PERF_MAX: acc = v > acc ? v : acc; break;
      case PERF_MIN: acc = v < acc ? v : acc; break;
      case PERF_MULSUM: acc += perfMulsumScalar(r) * v; break;
      default: acc += v; break; /* sum, avg */
    }
  }
  return acc;
}

/* What element j of `rank`'s result must be, as a real number. `blockCount` is the per-rank
 * count (all-gather: input count; reduce-scatter: output count). */
PERF_HD static inline double perfExpected(int kind, int type, int op, int nranks, int rank, uint64_t seed,
                                          uint64_t j, uint64_t blockCount) {
  if (kind == PERF_ALLGATHER) {
    uint64_t owner = blockCount ? j / blockCount : 0;
    return (double)perfInputValue(type, PERF_SUM, 1, (int)owner, seed, blockCount ? j % blockCount : j);
  }
  uint64_t idx = kind == PERF_REDUCESCATTER ? (uint64_t)rank * blockCount + j : j;
  int64_t exact = perfReduceExact(type, op, nranks, seed, idx);
  if (op == PERF_AVG) {
    if (!perfTypeIsFloat(type)) return (double)(exact / nranks); /* non-negative: truncation */
    return (double)exact / nranks;
  }
  return (double)exact;
}

/* ---- element codecs (bit patterns held in uint64_t, low bytes used) ---------------------- */

union perfF32 { float f; uint32_t u; };
union perfF64 { double d; uint64_t u; };

/* Small IEEE-style floats: half (5,10), e5m2 (5,2) and e4m3 (4,3, no infinities, one NaN per
 * sign, top exponent usable). Round to nearest even; fp8 saturates to the largest finite value
 * (CUDA's __NV_SATFINITE), half overflows to infinity. */
PERF_HD static inline uint32_t perfEncodeMini(double x, int expBits, int mantBits, int ieeeLike) {
  uint32_t sign = signbit(x) ? 1u << (expBits + mantBits) : 0u;
  uint32_t expMask = (1u << expBits) - 1;
  int bias = (1 << (expBits - 1)) - 1;
  if (isnan(x)) return sign | (expMask << mantBits) | ((1u << mantBits) - 1);
  double a = fabs(x);
  int maxExp = ieeeLike ? bias : bias + 1;
  double maxFinite = ieeeLike ? ldexp(2.0 - ldexp(1.0, -mantBits), maxExp)
                              : ldexp(2.0 - ldexp(1.0, 1 - mantBits), maxExp);
  int minNormalExp = 1 - bias;
  int e;
  if (a >= ldexp(1.0, minNormalExp)) {
    (void)frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
  } else {
    e = minNormalExp;
  }
  double quantum = ldexp(1.0, e - mantBits);
  double q = a / quantum;
  double fl = floor(q), frac = q - fl;
  if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
  double v = fl * quantum;
  if (v > maxFinite || isinf(a)) {
    if (ieeeLike && expBits == 5 && mantBits == 10) return sign | (expMask << mantBits); /* half: inf */
    v = maxFinite;
  }
  if (v < ldexp(1.0, minNormalExp)) /* subnormal (or rounded up to the smallest normal) */
    return sign | (uint32_t)(v / ldexp(1.0, minNormalExp - mantBits));
  (void)frexp(v, &e);
  e -= 1;
  uint32_t mant = (uint32_t)((v / ldexp(1.0, e) - 1.0) * (double)(1u << mantBits));
  return sign | ((uint32_t)(e + bias) << mantBits) | mant;
}

PERF_HD static inline double perfDecodeMini(uint32_t bits, int expBits, int mantBits, int ieeeLike) {
  uint32_t expMask = (1u << expBits) - 1, mantMask = (1u << mantBits) - 1;
  int bias = (1 << (expBits - 1)) - 1;
  double s = (bits >> (expBits + mantBits)) & 1 ? -1.0 : 1.0;
  uint32_t ex = (bits >> mantBits) & expMask, m = bits & mantMask;
  if (ieeeLike && ex == expMask) return m ? NAN : s * INFINITY;
  if (!ieeeLike && ex == expMask && m == mantMask) return NAN;
  if (ex == 0) return s * ldexp((double)m, 1 - bias - mantBits);
  return s * ldexp(1.0 + (double)m / (double)(1u << mantBits), (int)ex - bias);
}

/* float -> bfloat16, round to nearest even (NaN stays a quiet NaN). */
PERF_HD static inline uint32_t perfEncodeBf16(float f) {
  union perfF32 c;
  c.f = f;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return ((c.u >> 16) | 0x40u) & 0xffffu;
  return ((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16) & 0xffffu;
}

/* Bit pattern of x in `type` (integers: two's-complement truncation, as NCCL's wrapping math). */
PERF_HD static inline uint64_t perfEncode(int type, double x) {
  switch (type) {
    case PERF_INT8: case PERF_INT32: case PERF_INT64:
    case PERF_UINT8: case PERF_UINT32: case PERF_UINT64: {
      uint64_t u = (uint64_t)(int64_t)x;
      int bits = 8 * perfTypeSize(type);
      return bits == 64 ? u : u & ((1ULL << bits) - 1);
    }
    case PERF_HALF: return perfEncodeMini(x, 5, 10, 1);
    case PERF_BF16: return perfEncodeBf16((float)x);
    case PERF_FP8E4M3: return perfEncodeMini(x, 4, 3, 0);
    case PERF_FP8E5M2: return perfEncodeMini(x, 5, 2, 1);
    case PERF_FLOAT: { union perfF32 c; c.f = (float)x; return c.u; }
    case PERF_DOUBLE: { union perfF64 c; c.d = x; return c.u; }
    default: return 0;
  }
}

/* The value of a bit pattern of `type` (low bytes of `bits`). */
PERF_HD static inline double perfDecode(int type, uint64_t bits) {
  switch (type) {
    case PERF_INT8: return (double)(int8_t)(uint8_t)bits;
    case PERF_UINT8: return (double)(uint8_t)bits;
    case PERF_INT32: return (double)(int32_t)(uint32_t)bits;
    case PERF_UINT32: return (double)(uint32_t)bits;
    case PERF_INT64: return (double)(int64_t)bits;
    case PERF_UINT64: return (double)bits;
    case PERF_HALF: return perfDecodeMini((uint32_t)bits & 0xffffu, 5, 10, 1);
    case PERF_BF16: { union perfF32 c; c.u = ((uint32_t)bits & 0xffffu) << 16; return c.f; }
    case PERF_FP8E4M3: return perfDecodeMini((uint32_t)bits & 0xffu, 4, 3, 0);
    case PERF_FP8E5M2: return perfDecodeMini((uint32_t)bits & 0xffu, 5, 2, 1);
    case PERF_FLOAT: { union perfF32 c; c.u = (uint32_t)bits; return c.f; }
    case PERF_DOUBLE: { union perfF64 c; c.u = bits; return c.d; }
    default: return 0.0;
  }
}

/* Loads element i of a typed buffer as a bit pattern. */
PERF_HD static inline uint64_t perfLoadBits(const void* buf, int type, uint64_t i) {
  switch (perfTypeSize(type)) {
    case 1: return ((const uint8_t*)buf)[i];
    case 2: return ((const uint16_t*)buf)[i];
    case 4: return ((const uint32_t*)buf)[i];
    default: return ((const uint64_t*)buf)[i];
  }
}
PERF_HD static inline void perfStoreBits(void* buf, int type, uint64_t i, uint64_t bits) {
  switch (perfTypeSize(type)) {
    case 1: ((uint8_t*)buf)[i] = (uint8_t)bits; break;
    case 2: ((uint16_t*)buf)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t*)buf)[i] = (uint32_t)bits; break;
    default: ((uint64_t*)buf)[i] = bits; break;
  }
}

/* Does `bits` hold `expected`? Exact, except float averages: NCCL premultiplies each input by
 * 1/n in the element type, so allow (n + 1) roundings at the magnitude of the partial sums. */
PERF_HD static inline int perfElementOk(int type, int op, int nranks, uint64_t bits, double expected) {
  if (!perfTypeIsFloat(type)) {
    int width = 8 * perfTypeSize(type);
    uint64_t mask = width == 64 ? ~0ULL : (1ULL << width) - 1;
    return perfEncode(type, expected) == (bits & mask);
  }
  double got = perfDecode(type, bits);
  if (op == PERF_AVG) {
    /* rounding errors are at the scale of the partial sums (up to the input bound), even when
     * the average itself is small */
    double mag = (double)perfInputBound(type, op, nranks);
    if (fabs(expected) > mag) mag = fabs(expected);
    double tol = (nranks + 1) * ldexp(mag, -perfTypeMantissaBits(type));
    return fabs(got - expected) <= tol;
  }
  return got == expected;
}

#endif
