/* SPDX-License-Identifier: Apache-2.0 */
/* Exported entry points that we only forward, generated from the one symbol list. */
#include <stdio.h>
#include <string.h>

#include "debug.h"
#include "enqueue.h"
#include "forward.h"
#include "nccl_api.h"
#include "param.h"
#include "symmcoll.h"

#define SYMM_DEFINE_FORWARDER(ret, name, params, args, fail) \
  SYMM_EXPORT ret name params;                               \
  ret name params { SYMM_FORWARD(name, args, fail); }        \
  SYMM_PROFILING_ALIAS(ret, name, params)
SYMMCOLL_FORWARDED_PLAIN_FUNCS(SYMM_DEFINE_FORWARDER)
#undef SYMM_DEFINE_FORWARDER

/* NCCL discards an empty collective before it looks at its stream (taskAppend), so it orders
 * nothing and joins no group stream; empty sends and receives are kept (a peer matches them). */
static inline int discardedByNccl(const char* name, size_t count) {
  return count == 0 && strcmp(name, "ncclSend") != 0 && strcmp(name, "ncclRecv") != 0;
}

/* Operations on a communicator: its failure first, then ordered with our kernels on it (every
 * one of them takes a count). */
#define SYMM_DEFINE_COMM_FORWARDER(ret, name, params, args, fail)          \
  SYMM_EXPORT ret name params;                                             \
  ret name params {                                                        \
    if (symmRealLoad() != ncclSuccess || symmReal.name == NULL) return fail; \
    if (SYMM_PASSTHROUGH()) return symmReal.name args;                     \
    struct symmForwardScope scope;                                         \
    ret res = symmForwardBegin(comm, stream, discardedByNccl(#name, count), &scope); \
    if (res == ncclSuccess) res = symmReal.name args;                      \
    symmForwardEnd(&scope, res);                                           \
    return res;                                                            \
  }                                                                        \
  SYMM_PROFILING_ALIAS(ret, name, params)
SYMMCOLL_FORWARDED_COMM_FUNCS(SYMM_DEFINE_COMM_FORWARDER)
#undef SYMM_DEFINE_COMM_FORWARDER

SYMM_EXPORT ncclResult_t ncclGetVersion(int* version) {
  SYMM_FORWARD(ncclGetVersion, (version), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

/* Works without a real NCCL too, so that error paths can always print a reason. */
SYMM_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  if (symmRealLoad() == ncclSuccess && symmReal.ncclGetErrorString != NULL)
    return symmReal.ncclGetErrorString(result);
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
SYMM_PROFILING_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

/* Resets our own logging too (SYMMCOLL_DEBUG* are read again; every other knob keeps the value
 * the process read first, which its communicators agreed on), then the real NCCL's. */
SYMM_EXPORT void ncclResetDebugInit(void) {
  symmParamResetLogging();
  symmLogReset();
  if (symmRealLoad() == ncclSuccess && symmReal.ncclResetDebugInit != NULL)
    symmReal.ncclResetDebugInit();
}
SYMM_PROFILING_ALIAS(void, ncclResetDebugInit, (void))

/* Internal NCCL symbol with no profiling twin; exported because NCCL exports it. */
SYMM_EXPORT void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) {
  if (symmRealLoad() == ncclSuccess && symmReal.ncclResetDebugInitInternal != NULL)
    symmReal.ncclResetDebugInitInternal();
}

/* Not part of NCCL's ABI: lists every SYMMCOLL_* knob with its value, default and help. */
SYMM_EXPORT void symmcollPrintParams(FILE* out) { symmParamPrintAll(out ? out : stdout); }

SYMM_EXPORT int symmcollGetVersion(int* version) {
  if (version == NULL) return 1;
  *version = SYMMCOLL_VERSION_CODE;
  return 0;
}
