/* SPDX-License-Identifier: Apache-2.0 */
/* The copy-engine all-gather (copyengine.c): peer copies and stream memory operations, no kernel. */
#ifndef SYMMCOLL_ALGOS_COPYENGINE_H
#define SYMMCOLL_ALGOS_COPYENGINE_H

#include <cuda_runtime.h>

#include "algos.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues an all-gather of call->count elements per rank on `stream`: cudaMemcpyAsync into
 * the first `stagingArea` bytes of every peer's staging (both halves; or, with
 * call->windowPeers, straight into every peer's registered output) and barriers made of stream
 * memory operations on constant values (capturable). */
ncclResult_t symmCopyEngineAllGather(const struct symmLaunch* call, const struct symmPeers* peers,
                                     size_t stagingArea, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
