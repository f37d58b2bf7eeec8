/* SPDX-License-Identifier: Apache-2.0 */
/* ncclGroupStart/End nesting as seen by libsymmcoll, and work deferred to the outermost GroupEnd. */
#ifndef SYMMCOLL_GROUP_H
#define SYMMCOLL_GROUP_H

#include "comm.h"
#include "transport.h"

/* Nesting depth of ncclGroupStart on this thread. */
int symmGroupDepth(void);

/* A communicator created inside a group is set up at the outermost ncclGroupEnd, together with
 * the others created in that group (one thread may create all ranks, as ncclCommInitAll does). */
ncclResult_t symmGroupDeferSetup(struct symmComm* comm);

/* An operation of ours issued inside a group; launched at the outermost GroupEnd, in call order,
 * after the real NCCL's group was launched. `run` owns `arg` and frees it. */
typedef ncclResult_t (*symmDeferredFn)(void* arg);
ncclResult_t symmGroupDeferOp(symmDeferredFn run, void* arg);

/* A symmetric window registered inside a group; peer-mapped at the outermost GroupEnd after the
 * setups and before the deferred operations, all windows of the group in one batch. */
ncclResult_t symmGroupDeferWindow(const struct symmWindowReg* reg);

/* Sets up freshly created communicators (all ranks of each call it collectively). */
ncclResult_t symmCommSetupMany(struct symmComm** comms, int n);

/* A non-blocking communicator: set up right after its first ncclAllReduce (which itself always
 * forwards, on every rank alike), or at the outermost GroupEnd when that call was grouped.
 * Never when the call was captured in a CUDA graph: the communicator then always forwards. */
ncclResult_t symmCommSetupOnFirstUse(struct symmComm* comm, cudaStream_t stream);

#endif
