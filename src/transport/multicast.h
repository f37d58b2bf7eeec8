/* SPDX-License-Identifier: Apache-2.0 */
/* NVLink multicast objects for the multimem kernels, behind environment guards checked first. */
#ifndef SYMMCOLL_TRANSPORT_MULTICAST_H
#define SYMMCOLL_TRANSPORT_MULTICAST_H

#include <stddef.h>

#include "cudriver.h"

/* The safety guard, read from the environment as it is now: 1 only when SYMMCOLL_MULTIMEM=1 asks
 * for multicast and none of NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
 * NVSHMEM_DISABLE_NVLS=1 forbids it. No device query, no driver call. Decisions never read it
 * (they use what setup agreed); it only refuses multicast objects. */
int symmMulticastEnvAllows(void);
/* Env guard first, then the device attribute; 1 only when both allow. */
int symmMulticastUsable(int cudaDev);
/* Times this process entered a multicast create/import (tests prove it stays 0). */
long symmMulticastAttempts(void);

/* Rank 0: creates the object for `nranks` devices and `bytes` (rounded to the multicast
 * granularity, returned in *mcBytes) and exports it as a POSIX fd. */
ncclResult_t symmMulticastCreate(int nranks, size_t bytes, CUmemGenericAllocationHandle* mc,
                                 size_t* mcBytes, int* fd);
/* Other ranks: import rank 0's object (fd is closed here). */
ncclResult_t symmMulticastImport(int fd, CUmemGenericAllocationHandle* mc);
ncclResult_t symmMulticastAddDevice(CUmemGenericAllocationHandle mc, int cudaDev);
/* After every rank added its device: bind our memory and map the multicast address. */
ncclResult_t symmMulticastBindAndMap(CUmemGenericAllocationHandle mc, size_t mcBytes,
                                     CUmemGenericAllocationHandle mem, size_t memOffset,
                                     int cudaDev, CUdeviceptr* mcBase);
/* Reverse of the above; `bound`/`mcBase` say how far setup got. */
void symmMulticastRelease(CUmemGenericAllocationHandle mc, size_t mcBytes, int cudaDev, int bound,
                          CUdeviceptr mcBase);

#endif
