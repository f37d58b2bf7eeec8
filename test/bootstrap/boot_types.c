/* SPDX-License-Identifier: Apache-2.0 */
/* Host-side element decoding, rounding and reductions for the test bootstrap. */
#include "boot_types.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- small floating formats: decode by formula, encode by nearest positive code --------------- */

/* A binary format with `expBits` exponent bits, `mantBits` mantissa bits and IEEE-style
 * inf/NaN (e4m3 is the exception: no inf, only the all-ones code is NaN). */
struct smallFloat {
  int expBits, mantBits, bias;
  int ieeeSpecials;   /* 1: top exponent = inf/NaN; 0: e4m3fn (only S.1111.111 is NaN) */
  int saturate;       /* 1: out-of-range rounds to the largest finite (fp8, as __NV_SATFINITE) */
  uint32_t nanCode;   /* canonical quiet NaN */
  uint32_t nPositive; /* number of non-negative finite codes, ordered by value */
  double* values;     /* values[code] for code < nPositive */
};

static double smallDecodeMagnitude(const struct smallFloat* f, uint32_t code) {
  uint32_t mant = code & ((1u << f->mantBits) - 1);
  uint32_t expo = code >> f->mantBits;
  if (expo == 0) return ldexp((double)mant, 1 - f->bias - f->mantBits);
  return ldexp((double)(mant | (1u << f->mantBits)), (int)expo - f->bias - f->mantBits);
}

static struct smallFloat fmtHalf = {5, 10, 15, 1, 0, 0x7e00, 0, NULL};
static struct smallFloat fmtBf16 = {8, 7, 127, 1, 0, 0x7fc0, 0, NULL};
static struct smallFloat fmtE4m3 = {4, 3, 7, 0, 1, 0x7f, 0, NULL};
static struct smallFloat fmtE5m2 = {5, 2, 15, 1, 1, 0x7e, 0, NULL};
static pthread_once_t tablesOnce = PTHREAD_ONCE_INIT;
static int tablesOk;

static int buildTable(struct smallFloat* f) {
  uint32_t topExp = (1u << f->expBits) - 1;
  /* IEEE: every code below the top exponent is finite; e4m3fn: all but the all-ones code. */
  f->nPositive = f->ieeeSpecials ? topExp << f->mantBits : (1u << (f->expBits + f->mantBits)) - 1;
  f->values = malloc(f->nPositive * sizeof(double));
  if (f->values == NULL) return 0;
  for (uint32_t c = 0; c < f->nPositive; c++) f->values[c] = smallDecodeMagnitude(f, c);
  return 1;
}

static void buildTables(void) {
  tablesOk = buildTable(&fmtHalf) && buildTable(&fmtBf16) && buildTable(&fmtE4m3) &&
             buildTable(&fmtE5m2);
}

static double smallDecode(const struct smallFloat* f, uint32_t code) {
  uint32_t signBit = 1u << (f->expBits + f->mantBits);
  uint32_t mag = code & (signBit - 1);
  double sign = (code & signBit) ? -1.0 : 1.0;
  if (mag >= f->nPositive) {
    if (f->ieeeSpecials && mag == ((1u << f->expBits) - 1) << f->mantBits) return sign * INFINITY;
    return NAN;
  }
  return sign * f->values[mag];
}

/* Round-to-nearest-even of v onto the format. */
static uint32_t smallEncode(const struct smallFloat* f, double v) {
  uint32_t signBit = 1u << (f->expBits + f->mantBits);
  if (isnan(v)) return f->nanCode;
  uint32_t sign = signbit(v) ? signBit : 0;
  double a = fabs(v);
  uint32_t maxCode = f->nPositive - 1;
  double maxVal = f->values[maxCode];
  if (a >= maxVal) {
    if (f->saturate || a == maxVal) return sign | maxCode;
    /* The next value past the largest finite one, as if the exponent range went on. */
    double beyond = ldexp(1.0, (int)((1u << f->expBits) - 1) - f->bias);
    if (a < (maxVal + beyond) / 2) return sign | maxCode;
    return sign | (((1u << f->expBits) - 1) << f->mantBits); /* infinity (ties go to even: inf) */
  }
  /* Largest code with value <= a (values ascend with the code). */
  uint32_t lo = 0, hi = maxCode;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo + 1) / 2;
    if (f->values[mid] <= a) lo = mid; else hi = mid - 1;
  }
  uint32_t code = lo;
  double below = f->values[lo], above = f->values[lo + 1];
  if (a - below > above - a || (a - below == above - a && (lo & 1))) code = lo + 1;
  return sign | code;
}

/* --- elements as double / wrapped integers ---------------------------------------------------- */

static int isFloatType(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 ||
         t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
}
static int isSignedInt(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }

static double loadFloat(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return smallDecode(&fmtHalf, ((const uint16_t*)p)[i]);
    case ncclBfloat16: return smallDecode(&fmtBf16, ((const uint16_t*)p)[i]);
    case ncclFloat8e4m3: return smallDecode(&fmtE4m3, ((const uint8_t*)p)[i]);
    case ncclFloat8e5m2: return smallDecode(&fmtE5m2, ((const uint8_t*)p)[i]);
    case ncclFloat32: return ((const float*)p)[i];
    default: return ((const double*)p)[i];
  }
}

static void storeFloat(void* p, size_t i, ncclDataType_t t, double v) {
  switch (t) {
    case ncclFloat16: ((uint16_t*)p)[i] = (uint16_t)smallEncode(&fmtHalf, v); break;
    case ncclBfloat16: ((uint16_t*)p)[i] = (uint16_t)smallEncode(&fmtBf16, v); break;
    case ncclFloat8e4m3: ((uint8_t*)p)[i] = (uint8_t)smallEncode(&fmtE4m3, v); break;
    case ncclFloat8e5m2: ((uint8_t*)p)[i] = (uint8_t)smallEncode(&fmtE5m2, v); break;
    case ncclFloat32: ((float*)p)[i] = (float)v; break;
    default: ((double*)p)[i] = v; break;
  }
}

/* Integers sign- or zero-extended to 64 bits; arithmetic wraps, truncation restores the width. */
static uint64_t loadInt(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return (uint64_t)(int64_t)((const int8_t*)p)[i];
    case ncclUint8: return ((const uint8_t*)p)[i];
    case ncclInt32: return (uint64_t)(int64_t)((const int32_t*)p)[i];
    case ncclUint32: return ((const uint32_t*)p)[i];
    default: return ((const uint64_t*)p)[i];
  }
}

static void storeInt(void* p, size_t i, ncclDataType_t t, uint64_t v) {
  switch (t) {
    case ncclInt8: case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case ncclInt32: case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((uint64_t*)p)[i] = v; break;
  }
}

/* Value of a wrapped result in the type's own width, as signed (for min/max/avg). */
static int64_t asSigned(uint64_t v, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return (int8_t)(uint8_t)v;
    case ncclInt32: return (int32_t)(uint32_t)v;
    default: return (int64_t)v;
  }
}
static uint64_t asUnsigned(uint64_t v, ncclDataType_t t) {
  switch (t) {
    case ncclUint8: return (uint8_t)v;
    case ncclUint32: return (uint32_t)v;
    default: return v;
  }
}

static double floatOp(double a, double b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMin: return b < a ? b : a;
    case ncclMax: return b > a ? b : a;
    default: return a + b; /* sum, avg */
  }
}

static uint64_t intOp(uint64_t a, uint64_t b, ncclRedOp_t op, ncclDataType_t t) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMin:
      if (isSignedInt(t)) return asSigned(b, t) < asSigned(a, t) ? b : a;
      return asUnsigned(b, t) < asUnsigned(a, t) ? b : a;
    case ncclMax:
      if (isSignedInt(t)) return asSigned(b, t) > asSigned(a, t) ? b : a;
      return asUnsigned(b, t) > asUnsigned(a, t) ? b : a;
    default: return a + b;
  }
}

ncclResult_t bootReduce(void* dst, const void* const* in, int nin, size_t count, ncclDataType_t type,
                        ncclRedOp_t op) {
  if (symmTypeSize(type) == 0 || (int)op < 0 || (int)op >= (int)ncclNumOps || nin <= 0)
    return ncclInvalidArgument;
  pthread_once(&tablesOnce, buildTables);
  if (!tablesOk) return ncclSystemError;
  if (isFloatType(type)) {
    for (size_t i = 0; i < count; i++) {
      double acc = loadFloat(in[0], i, type);
      for (int r = 1; r < nin; r++) acc = floatOp(acc, loadFloat(in[r], i, type), op);
      if (op == ncclAvg) acc /= nin;
      storeFloat(dst, i, type, acc);
    }
    return ncclSuccess;
  }
  for (size_t i = 0; i < count; i++) {
    uint64_t acc = loadInt(in[0], i, type);
    for (int r = 1; r < nin; r++) acc = intOp(acc, loadInt(in[r], i, type), op, type);
    if (op == ncclAvg) {
      /* NCCL sums in the type's width, then divides (C truncation toward zero). */
      if (isSignedInt(type)) acc = (uint64_t)(asSigned(acc, type) / nin);
      else acc = asUnsigned(acc, type) / (uint64_t)nin;
    }
    storeInt(dst, i, type, acc);
  }
  return ncclSuccess;
}
