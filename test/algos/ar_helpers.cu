/* SPDX-License-Identifier: Apache-2.0 */
/* Host reference (same functors as the kernels), data generation and device helpers for tests. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../src/algos/launch.h"
#include "../../src/algos/reduce.cuh"
#include "ar_helpers.h"
#include "nccl_api.h"
#include "symm_peers.h"

extern "C" const char* arTypeName(ncclDataType_t dtype) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "half", "float", "double", "bf16", "fp8e4m3", "fp8e5m2"};
  return (int)dtype >= 0 && (int)dtype < 12 ? names[dtype] : "?";
}

extern "C" const char* arOpName(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && (int)op < 5 ? names[op] : "?";
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

template <typename E> static typename E::T fromDouble(double v) {
  if constexpr (symm::IsNarrow<E>::value) return E::fromFloat((float)v);
  else return (typename E::T)v;
}
template <typename E> static double toDouble(typename E::T v) {
  if constexpr (symm::IsNarrow<E>::value) return (double)E::toFloat(v);
  else return (double)v;
}

template <typename E> struct Fill {
  static void run(ncclDataType_t dtype, ncclRedOp_t op, int nranks, int rank, uint64_t seed,
                  int real, void* host, size_t count) {
    typedef typename E::T T;
    T* out = (T*)host;
    const bool isUnsigned = dtype == ncclUint8 || dtype == ncclUint32 || dtype == ncclUint64;
    /* Largest |value| so that a sum over nranks stays exact in this type. */
    int range = 8;
    if (dtype == ncclFloat8e4m3) range = 16 / nranks > 0 ? 16 / nranks : 1;
    if (dtype == ncclFloat8e5m2) range = 8 / nranks > 0 ? 8 / nranks : 1;
    if (dtype == ncclBfloat16) range = 32;
    if (dtype == ncclInt8) range = 127 / nranks;
    if (dtype == ncclUint8) range = 255 / nranks;
    if (op == ncclMin || op == ncclMax) range = (dtype == ncclInt8 || dtype == ncclFloat8e5m2 || dtype == ncclFloat8e4m3) ? 100 : 1000;
    for (size_t i = 0; i < count; i++) {
      const uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0x100000001b3ull + i);
      double v;
      if (real && !E::kInt) {
        v = ((double)(h >> 11) / 9007199254740992.0) * 2.0 - 1.0;
      } else if (op == ncclProd) {
        static const int signedSet[4] = {1, -1, 2, 1}, unsignedSet[4] = {1, 2, 1, 1};
        v = isUnsigned ? unsignedSet[h & 3] : signedSet[h & 3];
      } else {
        const int span = isUnsigned ? range + 1 : 2 * range + 1;
        v = (double)(int)(h % (uint64_t)span) - (isUnsigned ? 0 : range);
      }
      out[i] = fromDouble<E>(v);
    }
  }
};

extern "C" void arFillInput(ncclDataType_t dtype, ncclRedOp_t op, int nranks, int rank,
                            uint64_t seed, int real, void* host, size_t count) {
  SYMM_DISPATCH_DTYPE(dtype, Fill<E>::run(dtype, op, nranks, rank, seed, real, host, count));
}

template <typename E> static void addHost(void* host, size_t count, int delta) {
  typedef typename E::T T;
  T* p = (T*)host;
  for (size_t i = 0; i < count; i++) p[i] = fromDouble<E>(toDouble<E>(p[i]) + delta);
}
extern "C" void arAddHost(ncclDataType_t dtype, void* host, size_t count, int delta) {
  SYMM_DISPATCH_DTYPE(dtype, addHost<E>(host, count, delta));
}

template <typename E, int Kind>
static void reference(int nranks, const void* const* inputs, void* out, size_t count, bool avg) {
  typedef typename E::T T;
  T vals[SYMM_MAX_RANKS] = {}; /* nranks >= 1: initialised only to quiet GCC */
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < nranks; r++) vals[r] = ((const T*)inputs[r])[i];
    ((T*)out)[i] = symm::reduceInOrder<E, Kind>(vals, nranks, avg);
  }
}

template <typename E>
static void referenceOp(ncclRedOp_t op, int nranks, const void* const* inputs, void* out,
                        size_t count) {
  switch (op) {
    case ncclSum: reference<E, symm::kSum>(nranks, inputs, out, count, false); break;
    case ncclAvg: reference<E, symm::kSum>(nranks, inputs, out, count, true); break;
    case ncclProd: reference<E, symm::kProd>(nranks, inputs, out, count, false); break;
    case ncclMin: reference<E, symm::kMin>(nranks, inputs, out, count, false); break;
    case ncclMax: reference<E, symm::kMax>(nranks, inputs, out, count, false); break;
    default: break;
  }
}

extern "C" void arHostReference(ncclDataType_t dtype, ncclRedOp_t op, int nranks,
                                const void* const* inputs, void* out, size_t count) {
  SYMM_DISPATCH_DTYPE(dtype, referenceOp<E>(op, nranks, inputs, out, count));
}

extern "C" double arToDouble(ncclDataType_t dtype, const void* base, size_t i) {
  double v = NAN;
  SYMM_DISPATCH_DTYPE(dtype, v = toDouble<E>(((const typename E::T*)base)[i]));
  return v;
}

extern "C" size_t arCompare(ncclDataType_t dtype, const void* expect, const void* got,
                            size_t count, double tol, const char* label) {
  const size_t es = symmTypeSize(dtype);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    bool ok;
    if (tol < 0) {
      ok = memcmp((const char*)expect + i * es, (const char*)got + i * es, es) == 0;
    } else {
      const double a = arToDouble(dtype, expect, i), b = arToDouble(dtype, got, i);
      ok = fabs(a - b) <= tol * fmax(1.0, fabs(a)) || (isnan(a) && isnan(b));
    }
    if (!ok) {
      if (bad < 8)
        fprintf(stderr, "  MISMATCH %s: index %zu of %zu expected %.9g got %.9g\n", label, i,
                count, arToDouble(dtype, expect, i), arToDouble(dtype, got, i));
      bad++;
    }
  }
  if (bad > 8) fprintf(stderr, "  MISMATCH %s: %zu elements differ in total\n", label, bad);
  return bad;
}

template <typename T> __global__ void addOneKernel(T* buf, size_t count) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    buf[i] = buf[i] + (T)1;
}

extern "C" cudaError_t arAddOneDevice(void* buf, size_t count, ncclDataType_t dtype,
                                      cudaStream_t stream) {
  const unsigned blocks = (unsigned)((count + 255) / 256 < 1024 ? (count + 255) / 256 : 1024);
  if (count == 0) return cudaSuccess;
  if (dtype == ncclFloat32)
    addOneKernel<float><<<blocks, 256, 0, stream>>>((float*)buf, count);
  else if (dtype == ncclInt32)
    addOneKernel<int32_t><<<blocks, 256, 0, stream>>>((int32_t*)buf, count);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

__global__ void compareKernel(const unsigned char* a, const unsigned char* b, size_t bytes,
                              unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes;
       i += (size_t)gridDim.x * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(mismatches, local);
}

extern "C" cudaError_t arLoadKernels(void) {
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, (const void*)addOneKernel<float>);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, (const void*)addOneKernel<int32_t>);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, (const void*)compareKernel);
  return err;
}

extern "C" cudaError_t arCompareDevice(const void* a, const void* b, size_t bytes,
                                       unsigned long long* mismatches, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const unsigned blocks = (unsigned)((bytes + 255) / 256 < 256 ? (bytes + 255) / 256 : 256);
  compareKernel<<<blocks, 256, 0, stream>>>((const unsigned char*)a, (const unsigned char*)b,
                                            bytes, mismatches);
  return cudaGetLastError();
}

extern "C" size_t arTwoShotRoundElems(const struct symmPeers* peers, size_t esize) {
  return symm::twoShotSliceMax(peers, symm::halfBytesOf(peers), esize) * (size_t)peers->nranks;
}

extern "C" int arHasLamportRegion(const struct symmPeers* peers) {
  return symm::hasLamportRegion(peers->bufferBytes);
}
