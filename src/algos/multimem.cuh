/* SPDX-License-Identifier: Apache-2.0 */
/* NVLink SHARP access through a multicast mapping (sm_90 and newer): multimem.ld_reduce and
 * multimem.st on 16 bytes, and the proxy fence between multicast and unicast accesses. Used by
 * the multimem kernels of all three collectives. Below sm_90 every wrapper traps; kernels built
 * there never run one (the tuner offers multimem only with a multicast mapping, or emulated). */
#ifndef SYMM_MULTIMEM_CUH
#define SYMM_MULTIMEM_CUH

#include <stdint.h>

#include "reduce.cuh"

namespace symm {

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

}  // namespace symm

#endif
