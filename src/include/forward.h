/* SPDX-License-Identifier: Apache-2.0 */
/* The real NCCL: found and loaded once, its entry points kept in one table. */
#ifndef SYMMCOLL_FORWARD_H
#define SYMMCOLL_FORWARD_H

#include <stdint.h>

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
 * its own exported functions through the PLT (ncclMemAlloc, ncclCommRegister, ...); when we
 * are linked or preloaded those land in our entry points, which must then forward untouched. */
extern __thread int symmRealDepth;
/* Where the real NCCL's code is mapped, [symmRealLo, symmRealHi) (0, 0 until it is loaded).
 * Its own threads make such calls too (a non-blocking communicator's group job calls
 * ncclCommRegister and ncclMemAlloc; its teardown ncclMemFree), with symmRealDepth 0 there:
 * the call's return address tells. */
extern uintptr_t symmRealLo, symmRealHi;

/* `addr` lies in the real NCCL's code (Hi is stored last, with release, once per process). */
static inline int symmAddressInReal(const void* addr) {
  const uintptr_t a = (uintptr_t)addr, hi = __atomic_load_n(&symmRealHi, __ATOMIC_ACQUIRE);
  return a < hi && a >= symmRealLo;
}

/* 1 when the real NCCL called the entry point this expands in: on this thread under a call of
 * ours, or from its own code on any thread. A macro: the return address must be that of the
 * exported function's own frame. */
#define SYMM_CALLED_BY_REAL() \
  (symmRealDepth > 0 || symmAddressInReal(__builtin_return_address(0)))

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
/* The same in an exported function, with the real NCCL's calls from its own threads. */
#define SYMM_PASSTHROUGH() (SYMM_CALLED_BY_REAL() || symmDisabled())

/* At the top of an intercepted entry point (the collectives' route asks symmPassthrough
 * itself): forward untouched as above; fail with `fail` when there is no real NCCL or it lacks
 * `name`, so that the code below may call SYMM_CALL_REAL(name) safely. */
#define SYMM_FORWARD_IF_PASSTHROUGH(name, args, fail)                                         \
  do {                                                                                        \
    if (SYMM_PASSTHROUGH() || symmRealLoad() != ncclSuccess || symmReal.name == NULL)         \
      SYMM_FORWARD(name, args, fail);                                                         \
  } while (0)

/* The same for entry points that create communicators, delimit groups (where creations are
 * deferred to) or report a communicator's readiness: SYMMCOLL_DISABLE does not skip them. A
 * disabled rank still takes part in each communicator's setup exchange, reporting itself
 * disabled, so that every rank forwards; skipping it would leave its peers' exchange to meet
 * its first real collective. */
#define SYMM_FORWARD_IF_CALLBACK(name, args, fail)                                            \
  do {                                                                                        \
    if (SYMM_CALLED_BY_REAL() || symmRealLoad() != ncclSuccess || symmReal.name == NULL)      \
      SYMM_FORWARD(name, args, fail);                                                         \
  } while (0)
#endif
