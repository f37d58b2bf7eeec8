/* SPDX-License-Identifier: Apache-2.0 */
/* Test kernels for peer-mapped memory: pattern fill/verify and a signal ping-pong (C launchers). */
#ifndef SYMM_TEST_GPU_KERNELS_H
#define SYMM_TEST_GPU_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "symm_peers.h"

#ifdef __CUDACC__
#define TEST_HOST_DEVICE __host__ __device__
#else
#define TEST_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The word every test writes at index i of rank `rank`'s memory; differs per rank and seed. */
static inline TEST_HOST_DEVICE uint32_t testPattern(uint32_t seed, uint32_t rank, uint64_t i) {
  uint64_t x = ((uint64_t)seed << 32) ^ ((uint64_t)rank * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return (uint32_t)x ^ (uint32_t)(x >> 32);
}

struct verifyResult {
  unsigned long long mismatches;
  unsigned long long firstBad; /* lowest mismatching word index (~0 when none) */
  unsigned long long nonzero;  /* launchCountNonzero */
};

struct pingResult {
  unsigned int rounds;    /* rounds completed, summed over peers */
  unsigned int badData;   /* payload words that did not match after the acquire */
  unsigned int timeouts;  /* waits that hit the deadline */
  unsigned int aborted;   /* waits that saw the abort flag */
};

cudaError_t testLaunchFill(uint32_t* dst, size_t words, uint32_t seed, uint32_t rank, cudaStream_t s);
/* Compares src[0..words) with testPattern(seed, rank, firstIndex + i); res zeroed by the caller. */
cudaError_t testLaunchVerify(const uint32_t* src, size_t words, uint32_t seed, uint32_t rank,
                             uint64_t firstIndex, struct verifyResult* res, cudaStream_t s);
cudaError_t testLaunchCountNonzero(const uint32_t* src, size_t words, struct verifyResult* res,
                                   cudaStream_t s);
/* Every pair of ranks exchanges `rounds` messages: a payload word in the peer's staging buffer at
 * word offset `dataWord` + writer rank, then a flag in the peer's signal pad (word = writer rank)
 * stored with st.release.sys; the receiver spins with ld.acquire.sys (bounded by timeoutNs,
 * polling the abort flag) and checks the payload. res zeroed by the caller. */
cudaError_t testLaunchPingPong(struct symmPeers peers, int rounds, size_t dataWord,
                               unsigned long long timeoutNs, struct pingResult* res, cudaStream_t s);
/* Every peer warp waits for a flag value nobody writes, polling the abort flag: returns only
 * through abort (res->aborted) or the deadline (res->timeouts). */
cudaError_t testLaunchWaitForAbort(struct symmPeers peers, unsigned long long timeoutNs,
                                   struct pingResult* res, cudaStream_t s);
/* Loads every kernel on the current device now (no lazy loading while peers spin). */
cudaError_t testPrewarmKernels(void);

#ifdef __cplusplus
}
#endif

#endif
