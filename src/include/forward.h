/* SPDX-License-Identifier: Apache-2.0 */
/* The real NCCL: found and loaded once, its entry points kept in one table. */
#ifndef SYMMCOLL_FORWARD_H
#define SYMMCOLL_FORWARD_H

#include "nccl_api.h"

struct symmRealNccl {
#define SYMM_REAL_SLOT(ret, name, params, args, fail) ret(*name) params;
  SYMMCOLL_ALL_FUNCS(SYMM_REAL_SLOT)
#undef SYMM_REAL_SLOT
  void* handle;
  char path[4096];
};

extern struct symmRealNccl symmReal;

/* Loads the real NCCL once (thread-safe). ncclSuccess, or ncclSystemError with one WARN line. */
ncclResult_t symmRealLoad(void);

/* Forward `name(args)` to the real NCCL, returning `fail` when it cannot be loaded or lacks it. */
#define SYMM_FORWARD(name, args, fail)                                 \
  do {                                                                 \
    if (symmRealLoad() != ncclSuccess || symmReal.name == NULL) return fail; \
    return symmReal.name args;                                         \
  } while (0)

/* Depth of calls from libsymmcoll into the real NCCL on this thread. The real NCCL calls some of
 * its own exported functions through the PLT (ncclMemAlloc, ncclCommRegister, ...); under
 * LD_PRELOAD those land in our entry points, which must then forward untouched. */
extern __thread int symmRealDepth;

/* Call the real NCCL from an intercepted entry point (the real library must be loaded). */
#define SYMM_CALL_REAL(result, name, args) \
  do {                                     \
    symmRealDepth++;                       \
    (result) = symmReal.name args;         \
    symmRealDepth--;                       \
  } while (0)

/* Calls that go to the real NCCL untouched: its own calls back into us, and every call under
 * SYMMCOLL_DISABLE (but see SYMM_FORWARD_IF_CALLBACK). */
int symmDisabled(void);
static inline int symmPassthrough(void) { return symmRealDepth > 0 || symmDisabled(); }

/* At the top of an intercepted entry point (the collectives' route asks symmPassthrough
 * itself): forward untouched as above; fail with `fail` when there is no real NCCL or it lacks
 * `name`, so that the code below may call SYMM_CALL_REAL(name) safely. */
#define SYMM_FORWARD_IF_PASSTHROUGH(name, args, fail)                                         \
  do {                                                                                        \
    if (symmPassthrough() || symmRealLoad() != ncclSuccess || symmReal.name == NULL)          \
      SYMM_FORWARD(name, args, fail);                                                         \
  } while (0)

/* The same for entry points that create communicators, delimit groups (where creations are
 * deferred to) or report a communicator's readiness: SYMMCOLL_DISABLE does not skip them. A
 * disabled rank still takes part in each communicator's setup exchange, reporting itself
 * disabled, so that every rank forwards; skipping it would leave its peers' exchange to meet
 * its first real collective. */
#define SYMM_FORWARD_IF_CALLBACK(name, args, fail)                                            \
  do {                                                                                        \
    if (symmRealDepth > 0 || symmRealLoad() != ncclSuccess || symmReal.name == NULL)          \
      SYMM_FORWARD(name, args, fail);                                                         \
  } while (0)
#endif
