/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA driver entry points, looked up at run time through the runtime (we never link libcuda). */
#ifndef SYMMCOLL_CUDRIVER_H
#define SYMMCOLL_CUDRIVER_H

#include <cuda.h>

#include "debug.h"
#include "nccl_api.h"

/* X(name, cudaVersion, required): every driver call the library makes (the
 * transport's, the copy-engine all-gather's stream memory operations, and on the launch path
 * our kernel launches (cuLaunchKernelEx: with programmatic dependent launch) and the device,
 * stream queries and event record around them, which fall back to the runtime without them). `cudaVersion` is the
 * ABI version we ask the driver for; optional entries (multicast) may be missing. */
#define SYMM_CU_FUNCS(X)                           \
  X(cuGetErrorString, 6000, 1)                     \
  X(cuDeviceGet, 2000, 1)                          \
  X(cuDeviceGetAttribute, 2000, 1)                 \
  X(cuMemCreate, 10020, 1)                         \
  X(cuMemRelease, 10020, 1)                        \
  X(cuMemAddressReserve, 10020, 1)                 \
  X(cuMemAddressFree, 10020, 1)                    \
  X(cuMemMap, 10020, 1)                            \
  X(cuMemUnmap, 10020, 1)                          \
  X(cuMemSetAccess, 10020, 1)                      \
  X(cuMemGetAllocationGranularity, 10020, 1)       \
  X(cuMemExportToShareableHandle, 10020, 1)        \
  X(cuMemImportFromShareableHandle, 10020, 1)      \
  X(cuMemRetainAllocationHandle, 11000, 1)         \
  X(cuMemGetAllocationPropertiesFromHandle, 10020, 1) \
  X(cuMemGetAddressRange, 3020, 1)                 \
  X(cuStreamWriteValue32, 12000, 1)                \
  X(cuStreamBatchMemOp, 12000, 1)                  \
  X(cuLaunchKernel, 12000, 0)                      \
  X(cuLaunchKernelEx, 12000, 0)                    \
  X(cuKernelGetFunction, 12000, 0)                 \
  X(cuCtxGetDevice, 2000, 0)                       \
  X(cuStreamGetId, 12000, 0)                       \
  X(cuEventRecord, 2000, 0)                        \
  X(cuMulticastCreate, 12010, 0)                   \
  X(cuMulticastAddDevice, 12010, 0)                \
  X(cuMulticastBindMem, 12010, 0)                  \
  X(cuMulticastUnbind, 12010, 0)                   \
  X(cuMulticastGetGranularity, 12010, 0)

/* cuStreamGetCaptureInfo with edge data (the ABI of CUDA 12.3 on; its name in cuda.h differs
 * between toolkits, so the type is spelled out). */
typedef CUresult (*symmCuCaptureInfoFn)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                        const CUgraphNode**, const CUgraphEdgeData**, size_t*);

struct symmCuDriver {
#define SYMM_CU_SLOT(name, ver, required) __typeof__(&name) p_##name;
  SYMM_CU_FUNCS(SYMM_CU_SLOT)
#undef SYMM_CU_SLOT
  symmCuCaptureInfoFn p_cuStreamGetCaptureInfo; /* optional, as the launch path's others */
};

extern struct symmCuDriver symmCu;

/* Looks every entry point up once (thread-safe). ncclSuccess, or ncclSystemError with one WARN
 * (no driver, or a required entry point missing). Safe to call on machines without a GPU. */
ncclResult_t symmCuLoad(void);

/* Logs a failed driver call at `level` (call text and the driver's error string); returns `res`. */
CUresult symmCuReport(CUresult res, enum symmLogLevel level, const char* callText, const char* file,
                      int line);

/* One expression per driver call: CU_CALL(SYMM_LOG_WARN, cuMemMap, (ptr, size, 0, h, 0)) yields
 * the CUresult and logs the call's text on failure at the chosen level (INFO for probes,
 * WARN for real failures, cleanup paths choose too). symmCuLoad() must have succeeded. */
#define CU_CALL(level, name, args) \
  symmCuReport(symmCu.p_##name args, (level), #name #args, __FILE__, __LINE__)

/* The goto twin: on failure sets res = ncclUnhandledCudaError and jumps to label (WARN). */
#define CUCHECKGOTO(name, args, res, label)                                   \
  do {                                                                        \
    if (CU_CALL(SYMM_LOG_WARN, name, args) != CUDA_SUCCESS) {                 \
      (res) = ncclUnhandledCudaError;                                         \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#define CUCHECK(name, args)                                                   \
  do {                                                                        \
    if (CU_CALL(SYMM_LOG_WARN, name, args) != CUDA_SUCCESS)                   \
      return ncclUnhandledCudaError;                                          \
  } while (0)

#endif
