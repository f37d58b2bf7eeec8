/* SPDX-License-Identifier: Apache-2.0 */
/* Data-check logic of the perf binaries: element codecs, per-rank patterns, expected values
 * (compared with an independent host simulation of each collective rounding in the element
 * type), and the wrong-element count on host arrays with planted errors. */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "harness.h"

/* ---- codecs ------------------------------------------------------------------------- */
static void testCodecs(void) {
  /* known encodings */
  CHECK_EQ_INT(perfEncode(PERF_HALF, 1.0), 0x3c00);
  CHECK_EQ_INT(perfEncode(PERF_HALF, -2.0), 0xc000);
  CHECK_EQ_INT(perfEncode(PERF_HALF, 65504.0), 0x7bff);
  CHECK_EQ_INT(perfEncode(PERF_HALF, 1e6), 0x7c00); /* overflow: infinity */
  CHECK_EQ_INT(perfEncode(PERF_HALF, ldexp(1.0, -24)), 0x0001); /* smallest subnormal */
  CHECK_EQ_INT(perfEncode(PERF_HALF, 2049.0), 0x6800);          /* tie to even: 2048 */
  CHECK_EQ_INT(perfEncode(PERF_HALF, 2051.0), 0x6802);          /* tie to even: 2052 */
  CHECK_EQ_INT(perfEncode(PERF_BF16, 1.0), 0x3f80);
  CHECK_EQ_INT(perfEncode(PERF_BF16, -3.0), 0xc040);
  CHECK_EQ_INT(perfEncode(PERF_BF16, 257.0), 0x4380); /* tie to even: 256 */
  CHECK_EQ_INT(perfEncode(PERF_BF16, 259.0), 0x4382); /* tie to even: 260 */
  CHECK_EQ_INT(perfEncode(PERF_FP8E4M3, 1.0), 0x38);
  CHECK_EQ_INT(perfEncode(PERF_FP8E4M3, 448.0), 0x7e);
  CHECK_EQ_INT(perfEncode(PERF_FP8E4M3, 1000.0), 0x7e); /* saturates */
  CHECK_EQ_INT(perfEncode(PERF_FP8E4M3, -17.0), 0xd8);   /* -16: tie to even */
  CHECK_EQ_INT(perfEncode(PERF_FP8E4M3, ldexp(1.0, -9)), 0x01);
  CHECK_EQ_INT(perfEncode(PERF_FP8E5M2, 1.0), 0x3c);
  CHECK_EQ_INT(perfEncode(PERF_FP8E5M2, 57344.0), 0x7b);
  CHECK_EQ_INT(perfEncode(PERF_FP8E5M2, -0.0), 0x80);
  CHECK_EQ_INT(perfEncode(PERF_INT8, -1.0), 0xff);
  CHECK_EQ_INT(perfEncode(PERF_UINT32, 4294967295.0), 0xffffffffLL);
  CHECK(perfDecode(PERF_FLOAT, perfEncode(PERF_FLOAT, 3.5)) == 3.5);
  CHECK(perfDecode(PERF_DOUBLE, perfEncode(PERF_DOUBLE, -1e300)) == -1e300);
  CHECK(isnan(perfDecode(PERF_FP8E4M3, 0x7f)));
  CHECK(isinf(perfDecode(PERF_FP8E5M2, 0x7c)));
  CHECK(isnan(perfDecode(PERF_HALF, 0xffff)) && isnan(perfDecode(PERF_BF16, 0xffff)));
  CHECK(isnan(perfDecode(PERF_FP8E4M3, 0xff)) && isnan(perfDecode(PERF_FP8E5M2, 0xff)));

  /* every finite pattern decodes and encodes back to itself */
  static const int small[] = {PERF_HALF, PERF_BF16, PERF_FP8E4M3, PERF_FP8E5M2};
  for (size_t k = 0; k < sizeof(small) / sizeof(small[0]); k++) {
    int type = small[k];
    uint32_t n = perfTypeSize(type) == 1 ? 256u : 65536u;
    int bad = 0, finite = 0;
    for (uint32_t b = 0; b < n; b++) {
      double v = perfDecode(type, b);
      if (!isfinite(v)) continue;
      finite++;
      if (perfEncode(type, v) != b) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(finite > (int)n / 2);
  }
  /* the exact-integer limits are real: E exact, E+1 not (for the float types) */
  static const int floats[] = {PERF_HALF, PERF_BF16, PERF_FP8E4M3, PERF_FP8E5M2, PERF_FLOAT};
  for (size_t k = 0; k < sizeof(floats) / sizeof(floats[0]); k++) {
    int type = floats[k];
    double e = (double)perfTypeExactLimit(type);
    for (double v = 0; v <= (e < 4096 ? e : 4096); v += 1.0)
      if (perfDecode(type, perfEncode(type, v)) != v) {
        CHECK(!"integer not exact below the limit");
        break;
      }
    CHECK(perfDecode(type, perfEncode(type, e + 1)) != e + 1);
  }
}

/* ---- independent simulation of the collectives ---------------------------------------- */

/* Rounds to the element type, as a reduction step writing the type does. */
static double roundTo(int type, double v) { return perfDecode(type, perfEncode(type, v)); }

/* Reduces element idx of the host inputs in the order given, rounding in the type at every
 * step as a GPU reduction would (avg: premultiply by 1/n for floats, divide at the end for
 * integers -- NCCL's two implementations). */
static double simulateReduce(void* const* inputs, int type, int op, int nranks, size_t idx, int reverse) {
  double acc = 0;
  int first = 1;
  double inv = roundTo(type, 1.0 / nranks);
  for (int k = 0; k < nranks; k++) {
    int r = reverse ? nranks - 1 - k : k;
    double x = perfDecode(type, perfLoadBits(inputs[r], type, idx));
    if (op == PERF_MULSUM) x = roundTo(type, x * perfMulsumScalar(r));
    if (op == PERF_AVG && perfTypeIsFloat(type)) x = roundTo(type, x * inv);
    if (first) {
      acc = x;
      first = 0;
      continue;
    }
    switch (op) {
      case PERF_PROD: acc = acc * x; break;
      case PERF_MAX: acc = x > acc ? x : acc; break;
      case PERF_MIN: acc = x < acc ? x : acc; break;
      default: acc = acc + x; break;
    }
    acc = perfTypeIsFloat(type) ? roundTo(type, acc) : perfDecode(type, perfEncode(type, acc));
  }
  if (op == PERF_AVG && !perfTypeIsFloat(type)) acc = trunc(acc / nranks);
  return acc;
}

static void testAllReduceAndReduceScatter(void) {
  enum { COUNT = 4096 };
  for (int type = 0; type < PERF_NUM_TYPES; type++) {
    for (int op = 0; op < PERF_NUM_OPS; op++) {
      for (int nranks = 1; nranks <= 8; nranks++) {
        void* inputs[8];
        uint64_t seed = 1000u + (uint64_t)type * 77u + (uint64_t)op * 5u + (uint64_t)nranks;
        size_t elt = (size_t)perfTypeSize(type);
        for (int r = 0; r < nranks; r++) {
          inputs[r] = malloc(COUNT * elt);
          perfFillHost(inputs[r], COUNT, PERF_ALLREDUCE, type, op, nranks, r, seed);
        }
        void* result = malloc(COUNT * elt);
        int mismatch = 0, nonzero = 0, distinct = 0;
        double prev = NAN;
        for (size_t i = 0; i < COUNT; i++) {
          double fwd = simulateReduce(inputs, type, op, nranks, i, 0);
          double rev = simulateReduce(inputs, type, op, nranks, i, 1);
          double want = perfExpected(PERF_ALLREDUCE, type, op, nranks, 0, seed, i, COUNT);
          /* the order of the reduction must not matter (except for rounding float averages) */
          if (!perfElementOk(type, op, nranks, perfEncode(type, fwd), want) ||
              !perfElementOk(type, op, nranks, perfEncode(type, rev), want))
            mismatch++;
          if (fwd != 0) nonzero++;
          if (fwd != prev) distinct++;
          prev = fwd;
          perfStoreBits(result, type, i, perfEncode(type, fwd));
        }
        if (mismatch) {
          fprintf(stderr, "type %s op %s nranks %d: %d mismatches\n", perfTypeName(type), perfOpName(op), nranks,
                  mismatch);
          CHECK_EQ_INT(mismatch, 0);
        }
        /* never all-zero or constant data (prod results are small but vary) */
        CHECK(nonzero > COUNT / 2);
        CHECK(distinct > (op == PERF_PROD ? 16 : 64));
        CHECK_EQ_INT(perfCountWrongHost(result, COUNT, PERF_ALLREDUCE, type, op, nranks, 0, seed, COUNT), 0);

        /* reduce-scatter: rank r's block is elements [r*block, (r+1)*block) of the reduction */
        size_t block = COUNT / (size_t)nranks;
        for (int r = 0; r < nranks; r++) {
          int64_t wrong = perfCountWrongHost((const char*)result + (size_t)r * block * elt, block,
                                             PERF_REDUCESCATTER, type, op, nranks, r, seed, block);
          if (wrong) CHECK_EQ_INT(wrong, 0);
        }
        /* a different seed is a different pattern (float averages have a tolerance: skip) */
        if (nranks > 1 && op != PERF_PROD && !(op == PERF_AVG && perfTypeIsFloat(type)))
          CHECK(perfCountWrongHost(result, COUNT, PERF_ALLREDUCE, type, op, nranks, 0, seed + 1, COUNT) > COUNT / 4);
        for (int r = 0; r < nranks; r++) free(inputs[r]);
        free(result);
      }
    }
  }
}

static void testAllGather(void) {
  enum { BLOCK = 1000 };
  for (int type = 0; type < PERF_NUM_TYPES; type++) {
    int nranks = 3;
    size_t elt = (size_t)perfTypeSize(type);
    char* out = malloc((size_t)nranks * BLOCK * elt);
    for (int r = 0; r < nranks; r++)
      perfFillHost(out + (size_t)r * BLOCK * elt, BLOCK, PERF_ALLGATHER, type, PERF_SUM, nranks, r, 42);
    CHECK_EQ_INT(perfCountWrongHost(out, (size_t)nranks * BLOCK, PERF_ALLGATHER, type, PERF_SUM, nranks, 1, 42, BLOCK),
                 0);
    /* blocks in the wrong order are caught */
    char* swapped = malloc((size_t)nranks * BLOCK * elt);
    for (int r = 0; r < nranks; r++)
      perfFillHost(swapped + (size_t)r * BLOCK * elt, BLOCK, PERF_ALLGATHER, type, PERF_SUM, nranks,
                   (r + 1) % nranks, 42);
    CHECK(perfCountWrongHost(swapped, (size_t)nranks * BLOCK, PERF_ALLGATHER, type, PERF_SUM, nranks, 0, 42, BLOCK) >
          BLOCK);
    free(swapped);
    free(out);
  }
}

/* Planted errors are counted one by one, including a poisoned (NaN / 0xff) element. */
static void testPlantedErrors(void) {
  enum { COUNT = 5000 };
  static const int types[] = {PERF_FLOAT, PERF_BF16, PERF_HALF, PERF_INT32, PERF_FP8E4M3, PERF_UINT8, PERF_DOUBLE};
  for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
    int type = types[k];
    int nranks = 2;
    size_t elt = (size_t)perfTypeSize(type);
    char* buf = malloc(COUNT * elt);
    for (size_t i = 0; i < COUNT; i++)
      perfStoreBits(buf, type, i, perfEncode(type, perfExpected(PERF_ALLREDUCE, type, PERF_SUM, nranks, 0, 7, i, COUNT)));
    CHECK_EQ_INT(perfCountWrongHost(buf, COUNT, PERF_ALLREDUCE, type, PERF_SUM, nranks, 0, 7, COUNT), 0);
    size_t planted[] = {0, 1, 17, 2048, COUNT - 1};
    for (size_t p = 0; p < sizeof(planted) / sizeof(planted[0]); p++) {
      size_t i = planted[p];
      double want = perfExpected(PERF_ALLREDUCE, type, PERF_SUM, nranks, 0, 7, i, COUNT);
      /* off by one unit, or the poison value */
      uint64_t bits = p == 2 ? 0xffffffffffffffffULL : perfEncode(type, want + (want > 0 ? -1.0 : 1.0));
      perfStoreBits(buf, type, i, bits);
    }
    CHECK_EQ_INT(perfCountWrongHost(buf, COUNT, PERF_ALLREDUCE, type, PERF_SUM, nranks, 0, 7, COUNT), 5);
    free(buf);
  }
  /* float average: a value within the rounding tolerance passes, one a unit off does not */
  double want = perfExpected(PERF_ALLREDUCE, PERF_FLOAT, PERF_AVG, 3, 0, 9, 5, 10);
  CHECK(perfElementOk(PERF_FLOAT, PERF_AVG, 3, perfEncode(PERF_FLOAT, want * (1 + 1e-7)), want));
  CHECK(!perfElementOk(PERF_FLOAT, PERF_AVG, 3, perfEncode(PERF_FLOAT, want + 1.0), want));
  /* exact ops have no tolerance at all */
  CHECK(!perfElementOk(PERF_FLOAT, PERF_SUM, 3, perfEncode(PERF_FLOAT, 5.0 + ldexp(1.0, -20)), 5.0));
}

/* Known values: the all-reduce sum of a few elements, spelled out. */
static void testKnownSums(void) {
  for (int type = 0; type < PERF_NUM_TYPES; type++) {
    for (uint64_t i = 0; i < 8; i++) {
      int64_t a = perfInputValue(type, PERF_SUM, 2, 0, 3, i);
      int64_t b = perfInputValue(type, PERF_SUM, 2, 1, 3, i);
      CHECK(perfExpected(PERF_ALLREDUCE, type, PERF_SUM, 2, 0, 3, i, 8) == (double)(a + b));
      CHECK(perfExpected(PERF_ALLREDUCE, type, PERF_MAX, 2, 0, 3, i, 8) ==
            (double)(perfInputValue(type, PERF_MAX, 2, 0, 3, i) > perfInputValue(type, PERF_MAX, 2, 1, 3, i)
                         ? perfInputValue(type, PERF_MAX, 2, 0, 3, i)
                         : perfInputValue(type, PERF_MAX, 2, 1, 3, i)));
      int64_t bound = perfInputBound(type, PERF_SUM, 2);
      CHECK(llabs(a) <= bound && llabs(b) <= bound);
      CHECK(llabs(a + b) <= perfTypeExactLimit(type));
    }
  }
  /* bf16 with 2 ranks: inputs within +-128, so any sum is exact in 8 bits of precision */
  CHECK_EQ_INT(perfInputBound(PERF_BF16, PERF_SUM, 2), 128);
  CHECK_EQ_INT(perfInputBound(PERF_FP8E5M2, PERF_SUM, 8), 1);
  CHECK_EQ_INT(perfInputBound(PERF_HALF, PERF_MULSUM, 2), 512);
  CHECK_EQ_INT(perfInputBound(PERF_FLOAT, PERF_SUM, 2), 1000);
}

int main(void) {
  testCodecs();
  testKnownSums();
  testAllReduceAndReduceScatter();
  testAllGather();
  testPlantedErrors();
  return harnessReport("test_perf_check");
}
