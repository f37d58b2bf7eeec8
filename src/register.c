/* SPDX-License-Identifier: Apache-2.0 */
/* Memory allocation and registration entry points (peer mapping of windows: src/transport). */
#include "checks.h"
#include "forward.h"

SYMM_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  SYMM_FORWARD(ncclMemAlloc, (ptr, size), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

SYMM_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                          void** handle) {
  SYMM_FORWARD(ncclCommRegister, (comm, buff, size, handle), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommRegister,
                     (const ncclComm_t comm, void* buff, size_t size, void** handle))

SYMM_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  SYMM_FORWARD(ncclCommDeregister, (comm, handle), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))

SYMM_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                ncclWindow_t* win, int winFlags) {
  SYMM_FORWARD(ncclCommWindowRegister, (comm, buff, size, win, winFlags), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommWindowRegister,
                     (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

SYMM_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  SYMM_FORWARD(ncclCommWindowDeregister, (comm, win), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
