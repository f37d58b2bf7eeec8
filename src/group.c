/* SPDX-License-Identifier: Apache-2.0 */
/* ncclGroupStart/End: track nesting, then run deferred setups and operations at the outermost end. */
#include "group.h"

#include <stdlib.h>

#include "algos.h"
#include "checks.h"
#include "forward.h"
#include "transport.h"

struct deferredOp {
  symmDeferredFn run;
  void* arg;
};

/* Per thread, as NCCL's groups are. */
static __thread int groupDepth;
static __thread struct symmComm** pendingComms;
static __thread int pendingCount, pendingCap;
static __thread struct deferredOp* pendingOps;
static __thread int opCount, opCap;
static __thread struct symmWindowReg* pendingWindows;
static __thread int windowCount, windowCap;

int symmGroupDepth(void) { return groupDepth; }

static int grow(void** array, int* cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int newCap = *cap ? *cap * 2 : 8;
  while (newCap < need) newCap *= 2;
  void* p = realloc(*array, (size_t)newCap * elem);
  if (p == NULL) return -1;
  *array = p;
  *cap = newCap;
  return 0;
}

ncclResult_t symmGroupDeferSetup(struct symmComm* comm) {
  if (grow((void**)&pendingComms, &pendingCap, pendingCount + 1, sizeof(*pendingComms)) != 0) {
    WARN("out of host memory deferring communicator setup");
    return ncclSystemError;
  }
  pendingComms[pendingCount++] = comm;
  return ncclSuccess;
}

ncclResult_t symmGroupDeferWindow(const struct symmWindowReg* reg) {
  if (grow((void**)&pendingWindows, &windowCap, windowCount + 1, sizeof(*pendingWindows)) != 0) {
    WARN("out of host memory deferring a window registration");
    return ncclSystemError;
  }
  pendingWindows[windowCount++] = *reg;
  return ncclSuccess;
}

ncclResult_t symmGroupDeferOp(symmDeferredFn run, void* arg) {
  if (grow((void**)&pendingOps, &opCap, opCount + 1, sizeof(*pendingOps)) != 0) {
    WARN("out of host memory deferring a grouped operation");
    return ncclSystemError;
  }
  pendingOps[opCount].run = run;
  pendingOps[opCount].arg = arg;
  opCount++;
  return ncclSuccess;
}

ncclResult_t symmCommSetupOnFirstUse(struct symmComm* comm, cudaStream_t stream) {
  if (comm->setupDone || comm->blocking) return ncclSuccess;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    comm->setupDone = 1;
    INFO(SYMM_INIT, "comm %p forwards: its first all-reduce was captured in a CUDA graph, where "
         "setting up peer memory is not allowed", (void*)comm->real);
    return ncclSuccess;
  }
  if (symmGroupDepth() > 0) {
    comm->setupDone = 1; /* runs at the outermost GroupEnd */
    return symmGroupDeferSetup(comm);
  }
  /* The real NCCL refuses other calls on the communicator while that all-reduce is launching. */
  const ncclResult_t idle = symmCommWaitIdle(comm, symmTransportSetupTimeoutMs());
  if (idle != ncclSuccess) {
    comm->setupDone = 1;
    INFO(SYMM_INIT, "comm %p forwards: not idle after its first all-reduce (%d)", (void*)comm->real,
         (int)idle);
    return ncclSuccess;
  }
  return symmCommSetupMany(&comm, 1);
}

ncclResult_t symmCommSetupMany(struct symmComm** comms, int n) {
  for (int i = 0; i < n; i++) {
    ncclResult_t res = symmCommReadAttrs(comms[i]);
    if (res != ncclSuccess) {
      /* Not ready (non-blocking) or failed: leave it forwarding; never fail the user's init. */
      INFO(SYMM_INIT, "comm %p attributes unavailable (%d); it forwards", (void*)comms[i]->real,
           (int)res);
      return ncclSuccess;
    }
  }
  /* Before any of our kernels can spin (see symmAlgosLoadKernels); a rank whose kernels do
   * not load says so in its setup record, and the communicator forwards on every rank. */
  for (int i = 0; i < n; i++)
    comms[i]->kernelsLoaded = symmAlgosLoadKernels(comms[i]->cudaDev) == ncclSuccess;
  ncclResult_t res = symmTransportSetup(comms, n);
  for (int i = 0; i < n; i++) comms[i]->setupDone = 1;
  return res;
}

/* Runs what the outermost group deferred: communicator setups, window mappings, then our
 * operations (window deregistrations among them, in call order). */
static ncclResult_t flushDeferred(ncclResult_t groupResult) {
  ncclResult_t res = ncclSuccess;
  if (pendingCount > 0) {
    int n = pendingCount;
    pendingCount = 0;
    for (int i = 0; i < n && groupResult == ncclInProgress; i++)
      if (symmCommWaitIdle(pendingComms[i], symmTransportSetupTimeoutMs()) != ncclSuccess)
        groupResult = ncclSystemError;
    /* ncclInProgress: a non-blocking communicator's group is still being launched; the setup's
     * exchange waits for it. */
    if (groupResult == ncclSuccess || groupResult == ncclInProgress)
      res = symmCommSetupMany(pendingComms, n);
  }
  if (windowCount > 0) {
    int n = windowCount;
    windowCount = 0;
    /* Non-blocking communicators: the handles are filled in once the group has completed, and
     * every rank must map (the mapping is collective), so wait for that first. */
    int ok = groupResult == ncclSuccess || groupResult == ncclInProgress;
    for (int i = 0; i < n && ok && groupResult == ncclInProgress; i++)
      if (pendingWindows[i].comm != NULL)
        ok = symmCommWaitIdle(pendingWindows[i].comm, symmTransportSetupTimeoutMs()) == ncclSuccess;
    if (ok) symmTransportWindowsRegistered(pendingWindows, n);
  }
  int nops = opCount;
  opCount = 0;
  for (int i = 0; i < nops; i++) {
    ncclResult_t r = pendingOps[i].run(pendingOps[i].arg);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  return res;
}

SYMM_EXPORT ncclResult_t ncclGroupStart(void) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclGroupStart, (), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclGroupStart, ());
  if (res == ncclSuccess) groupDepth++;
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGroupStart, (void))

SYMM_EXPORT ncclResult_t ncclGroupEnd(void) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclGroupEnd, (), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclGroupEnd, ());
  if (groupDepth > 0) groupDepth--;
  if (groupDepth > 0) return res;
  ncclResult_t ours = flushDeferred(res);
  return res != ncclSuccess ? res : ours;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGroupEnd, (void))
