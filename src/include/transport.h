/* SPDX-License-Identifier: Apache-2.0 */
/* What the rest of libsymmcoll asks of src/transport. */
#ifndef SYMMCOLL_TRANSPORT_H
#define SYMMCOLL_TRANSPORT_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "comm.h"
#include "symm_peers.h"

/* Decides eligibility and, when eligible, builds the peer-mapped memory of each communicator.
 * Collective: every rank of each communicator calls it at the same point; `comms` holds the
 * communicators one thread created together (ncclCommInitAll, a group of inits). Never fails the
 * user's communicator: an ineligible or failed setup leaves comm->transport NULL (forwarding). */
ncclResult_t symmTransportSetup(struct symmComm** comms, int n);

/* How long setup waits for a peer or for a non-blocking communicator to go idle before giving up
 * (forwarding): SYMMCOLL_SETUP_TIMEOUT_MS. */
int64_t symmTransportSetupTimeoutMs(void);

/* Releases everything symmTransportSetup built, in reverse order. `abort` marks an abort. */
void symmTransportTeardown(struct symmComm* comm, int abort);

/* The peer view a kernel launch needs; valid while comm->transport is non-NULL. */
const struct symmPeers* symmTransportPeers(const struct symmComm* comm);

/* Preferred by launchers: returns the peer view and holds the communicator's transport open
 * (an abort or destroy on another thread waits) until symmTransportEndLaunch; NULL when the
 * communicator has no symmetric memory or was aborted/revoked (then forward, and do not call
 * End). End records the launch on `stream` when `launched` (see symmTransportNoteLaunch). */
const struct symmPeers* symmTransportBeginLaunch(struct symmComm* comm);
void symmTransportEndLaunch(struct symmComm* comm, cudaStream_t stream, int launched);

/* If [ptr, ptr+bytes) lies inside a symmetric window registered on `comm` (ncclCommWindowRegister
 * with NCCL_WIN_COLL_SYMMETRIC),
 * fills peerPtrs[r] with rank r's address of the same offset and returns 1; otherwise 0. */
int symmTransportFindWindow(const struct symmComm* comm, const void* ptr, size_t bytes,
                            void* peerPtrs[SYMM_MAX_RANKS]);

/* ncclCommRegister zero-copy: the descriptor this rank publishes to the kernels for an all-reduce
 * input [ptr, ptr+bytes) (see SYMM_USER_REG_DESC): non-zero only when the range lies in a region
 * this rank registered on `comm` and every peer has acknowledged mapping that region; else 0
 * (the input goes through staging). Lock-free; called on every launch. */
uint64_t symmTransportUserInputDesc(const struct symmComm* comm, const void* ptr, size_t bytes);

/* ncclCommRegister after the real NCCL returned `realHandle` (non-NULL): if `buff` is VMM memory
 * exportable as a POSIX fd (ncclMemAlloc), offers its allocation to every peer, which maps it in
 * the background and acknowledges. Local, never blocks on peers, never fails the user's call. */
void symmTransportUserRegister(struct symmComm* comm, void* buff, size_t size, void* realHandle);
/* ncclCommDeregister (inside a group: at the outermost GroupEnd), before forwarding: withdraws
 * the region NCCL named `realHandle`, waits for our last kernel, tells the peers to unmap it. */
void symmTransportUserDeregister(struct symmComm* comm, void* realHandle);
/* Peer regions this rank has mapped now (tests). */
int symmTransportUserRegMappedCount(const struct symmComm* comm);

/* 1 when the multicast path may be used at all on this communicator (device support, size >= 4,
 * and none of NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1,
 * SYMMCOLL_MULTIMEM=0 set). */
int symmTransportMulticastReady(const struct symmComm* comm);

/* How many times this process tried to create or import a multicast object (tests prove 0). */
long symmTransportMulticastAttempts(void);

/* Kernel launchers call this after launching on `stream` (outside graph capture), so teardown
 * can wait for our kernels before unmapping memory they use. */
void symmTransportNoteLaunch(struct symmComm* comm, cudaStream_t stream);

/* ncclCommAbort/ncclCommRevoke: raise the abort flag that every spin loop polls. */
void symmTransportSetAbort(struct symmComm* comm);

/* Our part of ncclCommGetAsyncError: ncclSuccess, or ncclRemoteError when a kernel gave up
 * (peer vanished or abort seen) and raised the error flag. */
ncclResult_t symmTransportAsyncError(const struct symmComm* comm);

/* ncclMemAlloc/ncclMemFree: VMM memory exportable as POSIX fds, accessible from every
 * peer-accessible device. *handled = 0 means "not ours: forward to the real NCCL". */
ncclResult_t symmTransportMemAlloc(void** ptr, size_t size, int* handled);
ncclResult_t symmTransportMemFree(void* ptr, int* handled);

/* One ncclCommWindowRegister the real NCCL accepted. */
struct symmWindowReg {
  struct symmComm* comm;
  void* buff;
  size_t size;
  ncclWindow_t* win; /* the caller's handle: inside a group NCCL may fill it only at GroupEnd */
  int winFlags;
};
/* After the real registrations succeeded: map the peers' windows of every symmetric one
 * (collective, like the registration; one thread may pass one per rank it drives, as a group
 * does). Never fails the user's call; an unmapped window is simply not used. */
void symmTransportWindowsRegistered(const struct symmWindowReg* regs, int n);
/* Before the real ncclCommWindowDeregister: unmap the peers' windows of `win`. */
void symmTransportWindowDeregister(struct symmComm* comm, ncclWindow_t win);

#endif
