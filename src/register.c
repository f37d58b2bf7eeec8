/* SPDX-License-Identifier: Apache-2.0 */
/* Memory allocation and registration entry points (peer mapping of windows and of registered
 * buffers: src/transport). */
#include <stdlib.h>

#include "checks.h"
#include "comm.h"
#include "forward.h"
#include "group.h"
#include "init.h"
#include "transport.h"

/* Our VMM memory (shareable by POSIX fd, reachable from every peer-accessible device), or the
 * real NCCL's when we cannot provide it. */
SYMM_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclMemAlloc, (ptr, size), ncclSystemError);
  int handled = 0;
  /* NULL ptr: the real NCCL's answer (its cudaMalloc fallback fails: ncclUnhandledCudaError). */
  if (ptr == NULL) {
    WARN("ncclMemAlloc: ptr is NULL (the real NCCL answers)");
    SYMM_FORWARD(ncclMemAlloc, (ptr, size), ncclSystemError);
  }
  ncclResult_t res = symmTransportMemAlloc(ptr, size, &handled);
  if (handled) return res;
  SYMM_FORWARD(ncclMemAlloc, (ptr, size), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

/* Frees ours; anything else came from the real NCCL. */
SYMM_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclMemFree, (ptr), ncclSystemError);
  int handled = 0;
  ncclResult_t res = symmTransportMemFree(ptr, &handled);
  if (handled) return res;
  SYMM_FORWARD(ncclMemFree, (ptr), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

/* Not collective in NCCL, so nothing is agreed here: the real NCCL registers first (its result is
 * the user's), then we offer the buffer's allocation to every peer, which maps it in the
 * background and acknowledges (src/transport/userreg.c). Until every peer has, and for memory
 * that cannot be shared (cudaMalloc), kernels copy the buffer through the staging buffer. */
SYMM_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                          void** handle) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommRegister, (comm, buff, size, handle), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommRegister, (comm, buff, size, handle));
  /* NULL handles (NCCL_LOCAL_REGISTER=0) cannot name the region at deregistration: not shared. */
  if (res != ncclSuccess || handle == NULL || *handle == NULL) return res;
  struct symmComm* ours = symmCommAcquire(comm);
  if (ours != NULL) symmTransportUserRegister(ours, buff, size, *handle);
  symmCommRelease(ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommRegister,
                     (const ncclComm_t comm, void* buff, size_t size, void** handle))

static void withdraw(ncclComm_t comm, ncclWindow_t win, void* userHandle);

/* Peers unmap the region (after our eager kernels; inside a group at GroupEnd), then forward. */
SYMM_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (!SYMM_CALLED_BY_REAL() && handle != NULL) withdraw(comm, NULL, handle);
  SYMM_FORWARD(ncclCommDeregister, (comm, handle), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))

/* The real NCCL registers first (its own window must keep working); then, for symmetric windows,
 * we map the peers' windows (collective, like the registration). */
SYMM_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                ncclWindow_t* win, int winFlags) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommWindowRegister, (comm, buff, size, win, winFlags),
                              ncclSystemError);
  if (symmRealLoad() != ncclSuccess) return ncclSystemError;
  struct symmComm* ours = symmCommAcquire(comm);
  /* Our job on a non-blocking communicator (its setup or staging, or the mapping of the last
   * window) is its previous operation still in progress, as ncclCommGetAsyncError says; NCCL
   * refuses a call then (but not an empty registration, which it answers before that check),
   * and so do we: a second mapping beside the job's would pair different exchanges. */
  if (ours != NULL && buff != NULL && size != 0 && symmCommJobState(ours) == ncclInProgress) {
    WARN("ncclCommWindowRegister on communicator %p before its previous operation returned "
         "ncclSuccess (poll ncclCommGetAsyncError until it does)", (void*)comm);
    /* Inside a group the group fails, as with NCCL's check; through no communicator (a refused
     * call on this one would leave its error on it, and poll it beside our job). */
    if (symmGroupDepth() > 0) symmGroupPoison(NULL, ncclInvalidArgument);
    symmCommRelease(ours);
    return ncclInvalidArgument;
  }
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommWindowRegister, (comm, buff, size, win, winFlags));
  /* Non-blocking, outside a group: NCCL's registration may still run in its own thread, the
   * handle written when it completes (2.28 returns ncclSuccess then, the communicator saying
   * ncclInProgress; other versions ncclInProgress). It ends in a barrier over every rank, which
   * one thread driving several ranks reaches only after this call returns: so a job of ours
   * waits for it, then maps the peers' windows (collective), and the call returns NCCL's
   * answer at once. Without a job (no thread), waiting here; no mapping if that fails. */
  if ((res == ncclSuccess || res == ncclInProgress) && ours != NULL && !ours->config.blocking &&
      symmGroupDepth() == 0 && win != NULL) {
    const struct symmWindowReg reg = {.comm = ours, .buff = buff, .size = size, .win = win,
                                      .winFlags = winFlags};
    if (symmCommStartWindowJob(ours, &reg)) {
      symmCommRelease(ours);
      return res;
    }
    if (symmCommWaitIdle(ours, -1) != ncclSuccess) {
      symmCommRelease(ours);
      return res;
    }
    res = ncclSuccess;
  }
  if (res != ncclSuccess || win == NULL) {
    symmCommRelease(ours);
    return res;
  }
  const struct symmWindowReg reg = {.comm = ours, .buff = buff, .size = size,
                                    .win = win, .winFlags = winFlags};
  /* Inside a group the peers' registrations (maybe issued by this same thread) come later.
   * Every window of a communicator of ours takes part in the mapping's exchange, whatever its
   * flags; only windows symmetric on every rank are mapped (src/transport/window.c). */
  if (symmGroupDepth() > 0)
    (void)symmGroupDeferWindow(&reg);
  else
    symmTransportWindowsRegistered(&reg, 1);
  symmCommRelease(ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommWindowRegister,
                     (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

/* A window (win) or an ncclCommRegister region (userHandle) to withdraw at GroupEnd (the group
 * holds a reference on comm). */
struct deferredDeregister {
  struct symmComm* comm;
  ncclWindow_t win;
  void* userHandle;
};

/* Unmaps a window (win) or an ncclCommRegister region (userHandle) on the peers. */
static void unmapNow(struct symmComm* comm, ncclWindow_t win, void* userHandle) {
  if (comm == NULL) return;
  if (win != NULL) symmCommWaitJob(comm); /* a window job may be mapping it still */
  if (userHandle != NULL)
    symmTransportUserDeregister(comm, userHandle);
  else
    symmTransportWindowDeregister(comm, win);
}

static ncclResult_t runDeferredDeregister(void* arg, int launch) {
  (void)launch; /* the real NCCL deregistered already: always ours too */
  struct deferredDeregister* d = arg;
  unmapNow(d->comm, d->win, d->userHandle);
  free(d);
  return ncclSuccess;
}

/* Inside a group our unmapping waits for the group's end: operations deferred before it in the
 * same group may read through the mapping. 0 when it could not be deferred. */
static int deferDeregister(struct symmComm* comm, ncclWindow_t win, void* userHandle) {
  if (comm == NULL || symmGroupDepth() == 0) return 0;
  struct deferredDeregister* d = malloc(sizeof(*d));
  if (d == NULL) return 0;
  *d = (struct deferredDeregister){.comm = comm, .win = win, .userHandle = userHandle};
  if (symmGroupDeferOp(comm, SYMM_DEFERRED_UNREGISTER, 0, NULL, runDeferredDeregister, d) == ncclSuccess)
    return 1;
  free(d);
  return 0;
}

/* Withdraws a window (win) or an ncclCommRegister region (userHandle) from the peers: inside a
 * group at GroupEnd, else now, after our parked operations. */
static void withdraw(ncclComm_t comm, ncclWindow_t win, void* userHandle) {
  struct symmComm* ours = symmCommAcquire(comm);
  if (!deferDeregister(ours, win, userHandle)) {
    if (ours != NULL) (void)symmGroupRunParked(ours); /* they may read through it */
    unmapNow(ours, win, userHandle);
  }
  symmCommRelease(ours);
}

SYMM_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (!SYMM_CALLED_BY_REAL()) withdraw(comm, win, NULL);
  SYMM_FORWARD(ncclCommWindowDeregister, (comm, win), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
