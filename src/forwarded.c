/* SPDX-License-Identifier: Apache-2.0 */
/* Calls the real NCCL runs on a communicator of ours (src/include/forwarded.h): under the
 * communicator's device, after its failure check, ordered with our operations on it. */
#include "forwarded.h"

#include <stdlib.h>
#include <string.h>

#include "cudriver.h"
#include "failure.h"
#include "forward.h"
#include "group.h"
#include "init.h"
#include "order.h"
#include "transport.h"

/* ---- the communicator's device ------------------------------------------------------------ */

/* The current device, from the driver where it answers (0.02 us cheaper per call on an H100
 * than the runtime); the runtime when there is no current context. */
static cudaError_t currentDevice(int* dev) {
  CUdevice d;
  if (symmCu.p_cuCtxGetDevice != NULL && symmCu.p_cuCtxGetDevice(&d) == CUDA_SUCCESS) {
    *dev = (int)d;
    return cudaSuccess;
  }
  return cudaGetDevice(dev);
}

ncclResult_t symmDeviceEnter(const struct symmComm* comm, int* saved) {
  *saved = -1;
  if (!comm->attrsKnown) return ncclSuccess;
  int cur = -1;
  if (currentDevice(&cur) != cudaSuccess) {
    /* No device to switch from (none at all, say): the calls below report what is wrong. */
    (void)cudaGetLastError();
    return ncclSuccess;
  }
  if (cur == comm->cudaDev) return ncclSuccess;
  if (cudaSetDevice(comm->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("cannot make device %d current for communicator %p", comm->cudaDev, (void*)comm->real);
    return ncclUnhandledCudaError;
  }
  *saved = cur;
  return ncclSuccess;
}

void symmDeviceLeave(int saved) {
  if (saved >= 0 && cudaSetDevice(saved) != cudaSuccess) (void)cudaGetLastError();
}

/* ---- forwarding ------------------------------------------------------------------------------ */

int symmRealHas(enum symmColl coll) {
  switch (coll) {
    case SYMM_COLL_ALLREDUCE: return symmReal.ncclAllReduce != NULL;
    case SYMM_COLL_ALLGATHER: return symmReal.ncclAllGather != NULL;
    case SYMM_COLL_REDUCESCATTER: return symmReal.ncclReduceScatter != NULL;
    default: return 0;
  }
}

/* As an application's own call would reach it (no SYMM_CALL_REAL accounting): the route's
 * passthrough. */
ncclResult_t symmCallRealUntouched(const struct symmTask* t) {
  switch (t->coll) {
    case SYMM_COLL_ALLREDUCE:
      return symmReal.ncclAllReduce(t->sendbuff, t->recvbuff, t->count, t->datatype, t->op,
                                    t->comm, t->stream);
    case SYMM_COLL_ALLGATHER:
      return symmReal.ncclAllGather(t->sendbuff, t->recvbuff, t->count, t->datatype, t->comm,
                                    t->stream);
    case SYMM_COLL_REDUCESCATTER:
      return symmReal.ncclReduceScatter(t->sendbuff, t->recvbuff, t->count, t->datatype, t->op,
                                        t->comm, t->stream);
    default:
      return ncclSystemError;
  }
}

ncclResult_t symmCallReal(const struct symmTask* t) {
  ncclResult_t res = ncclSystemError;
  switch (t->coll) {
    case SYMM_COLL_ALLREDUCE:
      SYMM_CALL_REAL(res, ncclAllReduce, (t->sendbuff, t->recvbuff, t->count, t->datatype, t->op,
                                          t->comm, t->stream));
      break;
    case SYMM_COLL_ALLGATHER:
      SYMM_CALL_REAL(res, ncclAllGather, (t->sendbuff, t->recvbuff, t->count, t->datatype, t->comm,
                                          t->stream));
      break;
    case SYMM_COLL_REDUCESCATTER:
      SYMM_CALL_REAL(res, ncclReduceScatter, (t->sendbuff, t->recvbuff, t->count, t->datatype,
                                              t->op, t->comm, t->stream));
      break;
    default:
      break;
  }
  /* The real NCCL noted it in its group; so do we (the group's first error). */
  if (res != ncclSuccess) symmGroupNoteError(res);
  return res;
}

/* Whether a forwarded call is ordered: as symmTransportOrdersForwarded says, and a call given
 * windows' aliases (ncclplain) also before staging exists, as a captured one is: the order event
 * then follows it, and a window's deregistration, which waits for that event, unmaps the alias
 * only once the real NCCL is done reading it. Caller holds launchLock. */
static int ordersForwarded(const struct symmComm* comm, int captured, int onAlias) {
  return symmTransportOrdersForwarded(comm, captured || onAlias);
}

/* After an operation forwarded inside a group: ordered once the group has launched it. */
struct forwardedMark {
  struct symmComm* comm;
  cudaStream_t stream;
  struct symmCapture before;
  int onAlias;
};

/* `before`: the stream as symmCaptureOf saw it before the real call (a capture's dependencies
 * are read again here). */
static ncclResult_t orderAfterForwarded(struct symmComm* comm, cudaStream_t stream,
                                        const struct symmCapture* before, int onAlias) {
  int saved = -1;
  ncclResult_t res = symmDeviceEnter(comm, &saved);
  pthread_mutex_lock(&comm->launchLock);
  if (res == ncclSuccess && ordersForwarded(comm, before->active, onAlias))
    res = symmOrderAfter(&comm->order, stream, before);
  symmCommFailOrdering(comm, res);
  pthread_mutex_unlock(&comm->launchLock);
  symmDeviceLeave(saved);
  return res;
}

static ncclResult_t runForwardedMark(void* arg, int launch) {
  struct forwardedMark* m = arg;
  ncclResult_t res =
      launch ? orderAfterForwarded(m->comm, m->stream, &m->before, m->onAlias) : ncclSuccess;
  free(m);
  return res;
}

/* The ordering half of a forwarded call on a communicator of ours, under its device (the
 * caller's current device is restored by forwardLeave). `discarded`: the real NCCL drops the
 * call before it touches the stream (an empty collective): the failure check only. */
static ncclResult_t forwardEnter(struct symmComm* comm, cudaStream_t stream, int discarded,
                                 struct symmForwardScope* s) {
  s->comm = comm;
  s->stream = stream;
  ncclResult_t res = symmDeviceEnter(comm, &s->savedDev);
  if (res != ncclSuccess) return res;
  pthread_mutex_lock(&comm->launchLock);
  res = symmCommHealth(comm);
  /* The group's stream rule over ours and forwarded calls alike (symmGroupUseStream), after the
   * communicator's failure, as NCCL checks them. */
  if (res == ncclSuccess && !discarded) res = symmGroupUseStream(comm, stream);
  if (res == ncclSuccess && !discarded && symmTransportOrdersForwarded(comm, 1)) {
    s->joinable = 1;
    res = symmCaptureOf(stream, &s->capture);
    if (res == ncclSuccess && ordersForwarded(comm, s->capture.active, s->onAlias)) {
      res = symmOrderBefore(&comm->order, stream, &s->capture);
      s->ordered = res == ncclSuccess;
    }
    symmCommFailOrdering(comm, res);
  }
  pthread_mutex_unlock(&comm->launchLock);
  return res;
}

static ncclResult_t runNothing(void* arg, int launch) {
  (void)arg;
  (void)launch;
  return ncclSuccess;
}

/* `realResult`: what the real call returned. On a non-blocking communicator the real NCCL puts
 * even a single call on the stream from its own thread, later (ncclInProgress): the order mark
 * then waits with the operations parked behind it and runs once the real NCCL says it is done. */
static void forwardLeave(struct symmForwardScope* s, ncclResult_t realResult) {
  if (!s->ordered && s->joinable && symmGroupDepth() > 0) {
    /* Not ordered (eager, staging not built yet), but its stream is one of the group's: joined
     * with the others at the group's end (a group may build staging and run ours). */
    (void)symmGroupDeferOp(s->comm, SYMM_DEFERRED_FORWARDED, 0, &s->stream, runNothing, NULL);
  }
  if (s->ordered) {
    const int grouped = symmGroupDepth() > 0;
    if (grouped || realResult == ncclInProgress) {
      struct forwardedMark* m = malloc(sizeof(*m));
      if (m != NULL) {
        *m = (struct forwardedMark){.comm = s->comm, .stream = s->stream, .before = s->capture,
                                    .onAlias = s->onAlias};
        m->before.deps = NULL; /* read again when it runs */
        m->before.ndeps = 0;
        if (!grouped)
          (void)symmGroupParkOp(s->comm, SYMM_DEFERRED_FORWARDED, s->stream, runForwardedMark, m);
        else if (symmGroupDeferOp(s->comm, SYMM_DEFERRED_FORWARDED, 0, &s->stream,
                                  runForwardedMark, m) != ncclSuccess)
          free(m);
      }
    } else {
      (void)orderAfterForwarded(s->comm, s->stream, &s->capture, s->onAlias);
    }
  }
  symmDeviceLeave(s->savedDev);
  s->savedDev = -1;
}

ncclResult_t symmForwardBegin(ncclComm_t real, cudaStream_t stream, int discarded,
                              struct symmForwardScope* s) {
  memset(s, 0, sizeof(*s));
  s->savedDev = -1;
  if (symmRealDepth > 0) return ncclSuccess;
  struct symmComm* comm = symmCommAcquire(real);
  if (comm == NULL) return ncclSuccess;
  s->comm = comm;
  if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
  symmCommWaitJob(comm);
  ncclResult_t res = symmGroupRunParked(comm);
  if (res == ncclInProgress) {
    WARN("a call on communicator %p before the previous operation returned ncclSuccess",
         (void*)real);
    return ncclInvalidArgument;
  }
  if (res == ncclSuccess) res = forwardEnter(comm, stream, discarded, s);
  if (res != ncclSuccess && symmGroupDepth() > 0) symmGroupPoison(real, res);
  return res;
}

void symmForwardEnd(struct symmForwardScope* s, ncclResult_t realResult) {
  if (s->comm == NULL) return;
  /* The real NCCL noted it in its group; so do we (the group's first error). */
  if (realResult != ncclSuccess) symmGroupNoteError(realResult);
  forwardLeave(s, realResult);
  symmCommRelease(s->comm);
  s->comm = NULL;
}

/* Forwarded with ordering, as every other operation on a communicator where ours run (its route
 * checked that it is not gone and ran its parked operations). */
ncclResult_t symmForwardOrdered(struct symmComm* comm, const struct symmTask* task, int onAlias) {
  struct symmForwardScope scope;
  memset(&scope, 0, sizeof(scope));
  scope.onAlias = onAlias;
  ncclResult_t res = forwardEnter(comm, task->stream, 0, &scope);
  if (res == ncclSuccess) res = symmCallReal(task);
  else if (symmGroupDepth() > 0) symmGroupPoison(task->comm, res);
  forwardLeave(&scope, res);
  return res;
}
