/* SPDX-License-Identifier: Apache-2.0 */
/* Calls the real NCCL runs on a communicator of ours (src/forwarded.c): the forwarded entry
 * points that take a communicator and a stream (ncclBroadcast, ncclSend, ...), and the
 * collectives their route forwards. Every one runs under the communicator's device, after its
 * failure check, ordered with our operations on it. */
#ifndef SYMMCOLL_FORWARDED_H
#define SYMMCOLL_FORWARDED_H

#include <cuda_runtime.h>

#include "comm.h"
#include "nccl_api.h"
#include "order.h"
#include "route.h"

/* Every entry point that makes CUDA calls for a communicator runs them under its device, as
 * NCCL does: one thread may drive several GPUs (ncclCommInitAll, nccl-tests -g N), and events,
 * streams and launches must belong to the communicator's GPU, whatever is current. *saved is
 * what symmDeviceLeave restores (-1: nothing). */
ncclResult_t symmDeviceEnter(const struct symmComm* comm, int* saved);
void symmDeviceLeave(int saved);

/* Whether the real NCCL (loaded) has the collective's entry point, and calling it: through
 * SYMM_CALL_REAL, or untouched (as the application's own call would reach it). */
int symmRealHas(enum symmColl coll);
ncclResult_t symmCallReal(const struct symmTask* task);
ncclResult_t symmCallRealUntouched(const struct symmTask* task);

/* A collective the route forwards with ordering: the communicator's failure (refused, and inside
 * a group the real group failed too), then the real call between our ordering (the caller made
 * sure the communicator is not gone and ran its parked operations). `onAlias`: the task's
 * buffers are windows' aliases (ncclplain): ordered also before staging exists, so that a
 * window's deregistration waits for it before unmapping the alias. */
ncclResult_t symmForwardOrdered(struct symmComm* comm, const struct symmTask* task, int onAlias);

/* Forwarded calls that take a communicator and a stream (ncclBroadcast, ncclSend, ...): the
 * communicator's failure first (NCCL's ncclCommEnsureReady), then ordering before and after the
 * real call where our kernels run on it; `discarded` (an empty collective, which NCCL drops
 * before it touches the stream): the failure check only. */
struct symmForwardScope {
  struct symmComm* comm; /* NULL: not ours, nothing to do */
  cudaStream_t stream;
  int ordered;
  int joinable; /* ours may run on the communicator: its stream joins a group's (group.c) */
  int onAlias;  /* the buffers are windows' aliases (symmForwardOrdered) */
  int savedDev;               /* the caller's device, restored at the end (-1: unchanged) */
  struct symmCapture capture; /* the stream before the real call */
};
ncclResult_t symmForwardBegin(ncclComm_t comm, cudaStream_t stream, int discarded,
                              struct symmForwardScope* scope);
void symmForwardEnd(struct symmForwardScope* scope, ncclResult_t realResult);

#endif
