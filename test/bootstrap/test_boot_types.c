/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test of the bootstrap's host reductions: every small-float code round-trips, midpoints
 * round to even, overflow saturates or becomes inf as the format says, integers wrap. */
#include <math.h>
#include <stdint.h>

#include "boot_types.h"
#include "harness.h"

struct fmt {
  ncclDataType_t type;
  int expBits, mantBits, bias, ieee, saturate;
  const char* name;
};

static const struct fmt fmts[] = {
    {ncclFloat16, 5, 10, 15, 1, 0, "fp16"},
    {ncclBfloat16, 8, 7, 127, 1, 0, "bf16"},
    {ncclFloat8e4m3, 4, 3, 7, 0, 1, "e4m3"},
    {ncclFloat8e5m2, 5, 2, 15, 1, 1, "e5m2"},
};

/* Independent decoder (formula, not the bootstrap's table). */
static double decode(const struct fmt* f, uint32_t code) {
  uint32_t mant = code & ((1u << f->mantBits) - 1), e = (code >> f->mantBits) & ((1u << f->expBits) - 1);
  double mag = e == 0 ? ldexp(mant, 1 - f->bias - f->mantBits)
                      : ldexp(mant | (1u << f->mantBits), (int)e - f->bias - f->mantBits);
  return (code >> (f->expBits + f->mantBits)) & 1 ? -mag : mag;
}

static uint32_t nPositiveFinite(const struct fmt* f) {
  return f->ieee ? ((1u << f->expBits) - 1) << f->mantBits : (1u << (f->expBits + f->mantBits)) - 1;
}

static uint32_t reduceCodes(const struct fmt* f, uint32_t a, uint32_t b, ncclRedOp_t op, int nin) {
  uint16_t in[2] = {(uint16_t)a, (uint16_t)b}, out = 0xffff;
  uint8_t in8[2] = {(uint8_t)a, (uint8_t)b}, out8 = 0xff;
  int wide = symmTypeSize(f->type) == 2;
  const void* ptrs[2] = {wide ? (const void*)&in[0] : (const void*)&in8[0],
                         wide ? (const void*)&in[1] : (const void*)&in8[1]};
  ncclResult_t res = bootReduce(wide ? (void*)&out : (void*)&out8, ptrs, nin, 1, f->type, op);
  CHECK_EQ_INT(res, ncclSuccess);
  return wide ? out : out8;
}

int main(void) {
  for (size_t k = 0; k < sizeof(fmts) / sizeof(fmts[0]); k++) {
    const struct fmt* f = &fmts[k];
    uint32_t n = nPositiveFinite(f), sign = 1u << (f->expBits + f->mantBits);
    int roundTrip = 0, ties = 0;
    for (uint32_t c = 0; c < n; c++) {
      /* One input: the value goes to double and back unchanged (both signs). */
      roundTrip += reduceCodes(f, c, 0, ncclSum, 1) != c;
      roundTrip += c != 0 && reduceCodes(f, c | sign, 0, ncclSum, 1) != (c | sign);
      /* avg of neighbours = their exact midpoint: rounds to the even code. */
      if (c + 1 < n) {
        uint32_t want = (c & 1) ? c + 1 : c;
        ties += reduceCodes(f, c, c + 1, ncclAvg, 2) != want;
      }
    }
    if (roundTrip || ties) fprintf(stderr, "%s: %d round trips, %d ties wrong\n", f->name, roundTrip, ties);
    CHECK_EQ_INT(roundTrip, 0);
    CHECK_EQ_INT(ties, 0);
    /* Overflow: largest finite + itself. */
    uint32_t maxCode = n - 1;
    uint32_t sum = reduceCodes(f, maxCode, maxCode, ncclSum, 2);
    CHECK_EQ_INT(sum, f->saturate ? maxCode : ((1u << f->expBits) - 1) << f->mantBits);
    /* min/max keep values exactly (checked with the independent decoder). */
    CHECK(decode(f, reduceCodes(f, maxCode, 0, ncclMax, 2)) == decode(f, maxCode));
    CHECK(decode(f, reduceCodes(f, maxCode | sign, 0, ncclMin, 2)) == -decode(f, maxCode));
  }
  /* Integers wrap in their width; min/max honour signedness; avg truncates toward zero. */
  int8_t a8[2] = {127, 1}, o8 = 0;
  const void* p8[2] = {&a8[0], &a8[1]};
  CHECK_EQ_INT(bootReduce(&o8, p8, 2, 1, ncclInt8, ncclSum), ncclSuccess);
  CHECK_EQ_INT(o8, -128);
  uint8_t u8[2] = {255, 1}, ou8 = 7;
  const void* pu8[2] = {&u8[0], &u8[1]};
  CHECK_EQ_INT(bootReduce(&ou8, pu8, 2, 1, ncclUint8, ncclMax), ncclSuccess);
  CHECK_EQ_INT(ou8, 255);
  CHECK_EQ_INT(bootReduce(&ou8, pu8, 2, 1, ncclUint8, ncclAvg), ncclSuccess);
  CHECK_EQ_INT(ou8, 0); /* 255 + 1 wraps to 0 first, as NCCL's sum-then-divide */
  int32_t a32[3] = {-7, 2, 0}, o32 = 0;
  const void* p32[3] = {&a32[0], &a32[1], &a32[2]};
  CHECK_EQ_INT(bootReduce(&o32, p32, 3, 1, ncclInt32, ncclAvg), ncclSuccess);
  CHECK_EQ_INT(o32, -1);
  CHECK_EQ_INT(bootReduce(&o32, p32, 3, 1, ncclInt32, ncclMin), ncclSuccess);
  CHECK_EQ_INT(o32, -7);
  uint64_t a64[2] = {UINT64_MAX, 3}, o64 = 0;
  const void* p64[2] = {&a64[0], &a64[1]};
  CHECK_EQ_INT(bootReduce(&o64, p64, 2, 1, ncclUint64, ncclSum), ncclSuccess);
  CHECK(o64 == 2);
  CHECK_EQ_INT(bootReduce(&o64, p64, 2, 1, ncclUint64, ncclProd), ncclSuccess);
  CHECK(o64 == UINT64_MAX - 2);
  int64_t s64[2] = {INT64_MIN, -1}, os64 = 0;
  const void* ps64[2] = {&s64[0], &s64[1]};
  CHECK_EQ_INT(bootReduce(&os64, ps64, 2, 1, ncclInt64, ncclMax), ncclSuccess);
  CHECK(os64 == -1);
  /* Doubles: rank order, one rounding. */
  float f[3] = {1e8f, 1.0f, -1e8f}, of = 0;
  const void* pf[3] = {&f[0], &f[1], &f[2]};
  CHECK_EQ_INT(bootReduce(&of, pf, 3, 1, ncclFloat32, ncclSum), ncclSuccess);
  CHECK(of == 1.0f); /* float accumulation would have lost the 1 */
  CHECK_EQ_INT(bootReduce(&of, pf, 3, 1, (ncclDataType_t)42, ncclSum), ncclInvalidArgument);
  CHECK_EQ_INT(bootReduce(&of, pf, 3, 1, ncclFloat32, (ncclRedOp_t)9), ncclInvalidArgument);
  return harnessReport("boot_types");
}
