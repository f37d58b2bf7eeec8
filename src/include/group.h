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

/* What a deferred operation is, which decides what happens to it when the group does not launch
 * (the real ncclGroupEnd failed, or ncclGroupSimulateEnd): */
enum symmDeferredKind {
  SYMM_DEFERRED_LAUNCH = 0,     /* a kernel of ours: dropped (the communicator fails) */
  SYMM_DEFERRED_FORWARDED = 1,  /* ordering after an operation forwarded inside the group: run */
  SYMM_DEFERRED_UNREGISTER = 2, /* a deregistration the real NCCL already did: run */
};
/* `run(arg, launch)` launches (launch = 1) or only frees (launch = 0) its argument; it owns
 * `arg` either way. The group holds a reference on `comm` until then. Operations run at the
 * outermost GroupEnd, in call order, after the real NCCL's group; `needsStaging`: a launch that
 * is the communicator's first call given to our kernels (staging is built first, for every
 * communicator of the group at once). `stream`: the stream it puts work on, NULL for none; a
 * communicator whose operations in the group use several streams has them joined as NCCL
 * does (symmOrderJoinStreams). */
typedef ncclResult_t (*symmDeferredFn)(void* arg, int launch);
ncclResult_t symmGroupDeferOp(struct symmComm* comm, enum symmDeferredKind kind, int needsStaging,
                              const cudaStream_t* stream, symmDeferredFn run, void* arg);

/* Outside a group: parks one operation behind what the real NCCL is still launching on a
 * non-blocking communicator (a call that returned ncclInProgress), as a group's are (see
 * symmGroupRunParked). ncclInProgress when parked; else (out of memory) it ran at once. Owns
 * `arg` either way. */
ncclResult_t symmGroupParkOp(struct symmComm* comm, enum symmDeferredKind kind,
                             cudaStream_t stream, symmDeferredFn run, void* arg);

/* A symmetric window registered inside a group; peer-mapped at the outermost GroupEnd after the
 * setups and before the deferred operations, all windows of the group in one batch. */
ncclResult_t symmGroupDeferWindow(const struct symmWindowReg* reg);

/* NCCL's rule for the calls of one communicator in a group: their streams are all uncaptured or
 * all captured by one graph. The real NCCL checks only the calls it is given, so every call on a
 * communicator of ours (ours and forwarded alike; not empty collectives, which NCCL drops before
 * it looks at their stream) passes its stream here: ncclSuccess outside a group and while the
 * rule holds (the stream is remembered until the outermost GroupEnd; captures are read once a
 * communicator's calls use a second stream), ncclInvalidUsage with a WARN where it breaks, or the
 * error of reading a stream's capture. The caller refuses the call
 * and fails the real group (symmGroupPoison), as NCCL's own check does. */
ncclResult_t symmGroupUseStream(const struct symmComm* comm, cudaStream_t stream);

/* Inside a group, a call we refuse must fail the real NCCL's group too, as NCCL's own argument
 * errors do (ncclGroupErrCheck: the group then launches nothing): issues one real call that the
 * real NCCL refuses on `real`, and notes `why` (symmGroupNoteError). */
void symmGroupPoison(ncclComm_t real, ncclResult_t why);
/* Notes the error of a call inside a group (refused by us, or by the real NCCL): NCCL's
 * ncclGroupEnd returns its group's first error, so the outermost ncclGroupEnd returns the first
 * noted one where the real group failed (rather than the answer to our poisoning call). */
void symmGroupNoteError(ncclResult_t why);

/* Non-blocking communicators: our operations of a group the real NCCL is still launching
 * (ncclInProgress) wait on the communicator, behind NCCL's, and launch once the real NCCL says
 * it is done; ncclSuccess when none wait, ncclInProgress while they do, else the error. Called
 * by ncclCommGetAsyncError and at every entry point that uses the communicator, before it
 * issues anything: while one thread runs them (a watchdog polling ncclCommGetAsyncError, say)
 * the others wait here, so they always launch first, in call order. Takes comm->parkLock
 * (never call it holding launchLock). */
ncclResult_t symmGroupRunParked(struct symmComm* comm);
/* Tests only: called by the thread that runs parked operations, once it holds them and before
 * the first one runs. */
extern void (*symmGroupParkedHook)(struct symmComm* comm);
/* Drops what waits on a communicator that goes away. */
void symmGroupDropParked(struct symmComm* comm);

#endif
