/* SPDX-License-Identifier: Apache-2.0 */
/* Host reference, data generation and device helpers for the all-reduce tests (ar_helpers.cu). */
#ifndef SYMMCOLL_TEST_AR_HELPERS_H
#define SYMMCOLL_TEST_AR_HELPERS_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char* arTypeName(ncclDataType_t dtype);
const char* arOpName(ncclRedOp_t op);

/* Fills host[0..count) with data for `rank`: integer-valued in a range where NCCL's result is
 * exact for this dtype/op and world size (real = 0), or uniform reals in [-1, 1] (real = 1). */
void arFillInput(ncclDataType_t dtype, ncclRedOp_t op, int nranks, int rank, uint64_t seed,
                 int real, void* host, size_t count);
/* host[i] += delta for every element (graph test: the captured input update). */
void arAddHost(ncclDataType_t dtype, void* host, size_t count, int delta);
/* out = all-reduce of inputs[0..nranks) with the kernels' exact arithmetic (rank order). */
void arHostReference(ncclDataType_t dtype, ncclRedOp_t op, int nranks, const void* const* inputs,
                     void* out, size_t count);
/* Bitwise (tol < 0) or |a-b| <= tol * max(1, |a|) comparison. Prints up to 8 mismatches as
 * "label: index i expected X got Y" and returns the number of mismatching elements. */
size_t arCompare(ncclDataType_t dtype, const void* expect, const void* got, size_t count,
                 double tol, const char* label);
double arToDouble(ncclDataType_t dtype, const void* base, size_t i);

/* Loads this file's kernels into the current device's context now: with several ranks per
 * process, a lazy load while a rank's kernel spins can stall the launches it waits for. */
cudaError_t arLoadKernels(void);
/* Device: buf[i] += 1 (float32, int32 only); graph-captured input update. */
cudaError_t arAddOneDevice(void* buf, size_t count, ncclDataType_t dtype, cudaStream_t stream);
/* Device: *mismatches += number of bytes where a and b differ. */
cudaError_t arCompareDevice(const void* a, const void* b, size_t bytes,
                            unsigned long long* mismatches, cudaStream_t stream);

struct symmPeers;
/* Elements of one two-shot round (all ranks' slices) with this staging, for esize-byte elements:
 * the launcher's own rule (src/algos/launch.h), so a test can ask for a call of k rounds. */
size_t arTwoShotRoundElems(const struct symmPeers* peers, size_t esize);
/* Whether these peers' staging buffers have a Lamport region (the library's rule). */
int arHasLamportRegion(const struct symmPeers* peers);

#ifdef __cplusplus
}
#endif

#endif
