/* SPDX-License-Identifier: Apache-2.0 */
/* Host-side element access and reductions for the test bootstrap (every NCCL datatype and op). */
#ifndef SYMM_BOOT_TYPES_H
#define SYMM_BOOT_TYPES_H

#include <stddef.h>

#include "nccl_api.h" /* symmTypeSize: bytes per element, 0 for an unknown datatype */

/* dst[i] = in[0][i] op in[1][i] op ... in rank order, for i < count. Floating types accumulate in
 * double and round once (round-to-nearest-even; fp8 saturates to finite as CUDA's __NV_SATFINITE);
 * integer types wrap in their own width and are exact. Returns ncclInvalidArgument for an unknown
 * type or op. */
ncclResult_t bootReduce(void* dst, const void* const* in, int nin, size_t count, ncclDataType_t type,
                        ncclRedOp_t op);

#endif
