/* SPDX-License-Identifier: Apache-2.0 */
/* Resolves CUDA driver entry points through cudaGetDriverEntryPointByVersion, once, on first use. */
#include "cudriver.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

struct symmCuDriver symmCu;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static ncclResult_t loadResult = ncclSystemError;

static void loadAll(void) {
  /* Initialises the runtime (and through it the driver); fails cleanly without a GPU. */
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    INFO(SYMM_TRANSPORT, "no usable CUDA device (%s); symmetric memory unavailable",
         cudaGetErrorString(err));
    (void)cudaGetLastError();
    return;
  }
#define SYMM_CU_LOOKUP_INTO(slot, name, ver, required)                                           \
  do {                                                                                           \
    void* fn = NULL;                                                                             \
    enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;            \
    err = cudaGetDriverEntryPointByVersion(name, &fn, (ver), cudaEnableDefault, &status);        \
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == NULL) {             \
      (void)cudaGetLastError();                                                                  \
      if (required) {                                                                            \
        WARN("driver entry point %s (version %d) not found; symmetric memory unavailable", name, \
             (ver));                                                                             \
        return;                                                                                  \
      }                                                                                          \
      INFO(SYMM_TRANSPORT, "optional driver entry point %s not found", name);                   \
      fn = NULL;                                                                                 \
    }                                                                                            \
    /* ISO C has no object-to-function pointer cast; copy the bits (POSIX guarantees they fit). */ \
    memcpy(&symmCu.slot, &fn, sizeof(fn));                                                       \
  } while (0);
#define SYMM_CU_LOOKUP(name, ver, required) SYMM_CU_LOOKUP_INTO(p_##name, #name, ver, required)
  SYMM_CU_FUNCS(SYMM_CU_LOOKUP)
  SYMM_CU_LOOKUP_INTO(p_cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo", 12030, 0)
#undef SYMM_CU_LOOKUP
#undef SYMM_CU_LOOKUP_INTO
  loadResult = ncclSuccess;
}

ncclResult_t symmCuLoad(void) {
  pthread_once(&loadOnce, loadAll);
  return loadResult;
}

CUresult symmCuReport(CUresult res, enum symmLogLevel level, const char* callText, const char* file,
                      int line) {
  if (res == CUDA_SUCCESS) return res;
  const char* text = NULL;
  if (symmCu.p_cuGetErrorString == NULL || symmCu.p_cuGetErrorString(res, &text) != CUDA_SUCCESS ||
      text == NULL)
    text = "unknown error";
  if (level <= SYMM_LOG_WARN)
    symmLog(SYMM_LOG_WARN, SYMM_ALL, file, line, "driver call %s failed: %s (%d)", callText, text,
            (int)res);
  else if (symmLogLevel() >= level && (symmLogSubsysMask() & SYMM_TRANSPORT))
    symmLog(level, SYMM_TRANSPORT, file, line, "driver call %s failed: %s (%d)", callText, text,
            (int)res);
  return res;
}
