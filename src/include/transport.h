/* SPDX-License-Identifier: Apache-2.0 */
/* What the rest of libsymmcoll asks of src/transport. */
#ifndef SYMMCOLL_TRANSPORT_H
#define SYMMCOLL_TRANSPORT_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "algos.h"
#include "comm.h"
#include "symm_peers.h"

/* ---- creation: the mechanisms communicator setup (src/setup.c) uses; it decides, we build --- */

/* Bytes of the secret rank 0 draws at setup: the first half keys socket names, the second half
 * authenticates requests. Never logged. */
#define SYMM_SECRET_BYTES 32

/* One all-gather over the real communicator, for every comm of `comms` that takes part
 * (`inExchange[i]`); one thread may drive all of them (grouped). Each sends `bytes` from
 * send[i] and receives nranks*bytes into recv[i]. A failed exchange clears inExchange[i]. */
ncclResult_t symmExchange(struct symmComm** comms, int n, int* inExchange,
                          const void* const* send, void* const* recv, size_t bytes);

/* What this rank's device offers peer memory, for its setup record: VMM with POSIX fd handles
 * and its allocation granularity; multicast only when `askMulticast` (the environment guard is
 * checked before any device query). All 0 without the CUDA driver. */
struct symmDeviceCaps {
  int vmm;
  size_t granularity;
  int multicast;
};
void symmTransportDeviceCaps(int cudaDev, int askMulticast, struct symmDeviceCaps* caps);

/* Releases the stream waits of the copy-engine all-gather on `stream` (src/algos provides it:
 * symmCopyEngineRelease); the transport calls it while an aborted communicator drains. */
typedef void (*symmReleaseWaitsFn)(const struct symmPeers* peers, cudaStream_t stream);

/* What setup agreed for one communicator's peer memory (identical on every rank). */
struct symmTransportPlan {
  int ranksPerDevice;
  uint32_t uid;
  int32_t pids[SYMM_MAX_RANKS];
  uint8_t secret[SYMM_SECRET_BYTES]; /* rank 0's; wiped by the caller after attaching */
  size_t granularity;                /* largest of every rank's */
  int multicastAgreed;
  size_t stagingBytes;               /* per rank, a multiple of granularity */
  size_t padBytes;                   /* signal pad per rank (src/algos' layout) */
  symmReleaseWaitsFn releaseWaits;
};

/* A rank's private state for `comm` (private stream, host-mapped words, `localStateBytes` of
 * zeroed device state), not yet the communicator's; NULL without host memory. *ok: the private
 * state was built (its peers must agree before it is attached). */
struct symmTransport* symmTransportCreate(const struct symmComm* comm, size_t localStateBytes,
                                          int* ok);
/* Frees a transport that was never attached. */
void symmTransportDiscard(struct symmTransport* t);
/* The communicator's from now on (ours: staging follows at the first call given to our
 * kernels), with what setup agreed. */
void symmTransportAttach(struct symmComm* comm, struct symmTransport* t,
                         const struct symmTransportPlan* plan);

/* 1 when comm has a transport whose staging is not built yet: the first call the tuner gives
 * to our kernels builds it (symmTransportStage) on every rank alike. */
int symmTransportNeedsStaging(const struct symmComm* comm);
/* Staging bytes per rank the communicator has or will have (identical on every rank), 0 when
 * it has no transport. */
size_t symmTransportStagingBytes(const struct symmComm* comm);
/* Collective, at the first call given to our kernels (never while capturing): allocates staging
 * and signal pads (zeroed on a private stream), maps every peer, agrees. A failure anywhere
 * detaches the transport on every rank (forwarding from then on). Never holds launchLock while
 * waiting for peers; gives up when the communicator is going away. */
ncclResult_t symmTransportStage(struct symmComm** comms, int n);

/* How long setup waits for a peer's handle before giving up (forwarding):
 * SYMMCOLL_SETUP_TIMEOUT_MS. */
int64_t symmTransportSetupTimeoutMs(void);

/* Detaches and releases the communicator's transport. Waits first for every eager operation
 * issued on it (the order event); with `abort` the abort flag goes up first and the wait lasts
 * at most 2 s, after which the memory is leaked rather than unmapped under a running kernel.
 * Graph replays keep their own reference (symmTransportRetainForGraph). */
void symmTransportTeardown(struct symmComm* comm, int abort);

/* Caller holds comm->launchLock: the peer view for a launch (staging built, not aborted), or
 * NULL (forward). Stays valid while the lock is held. */
const struct symmPeers* symmTransportLaunchPeers(const struct symmComm* comm);
/* Caller holds comm->launchLock: whether a forwarded call is ordered against ours (the order
 * event, symmOrderBefore/After). Wherever staging is mapped; `captured` calls also before that,
 * wherever the communicator will run ours: such a graph may be replayed after staging, beside
 * eager calls of ours on other streams. Never after an abort. */
int symmTransportOrdersForwarded(const struct symmComm* comm, int captured);
/* The transport's side stream and its fork/join events (created with the transport). */
struct symmSideStream symmTransportSideStream(const struct symmComm* comm);
/* The peer view (tests: no lock, valid while nothing tears the communicator down). */
const struct symmPeers* symmTransportPeers(const struct symmComm* comm);
/* Tests: symmTransportLaunchPeers under the lock (End unlocks; NULL Begin holds nothing). */
const struct symmPeers* symmTransportBeginLaunch(struct symmComm* comm);
void symmTransportEndLaunch(struct symmComm* comm);

/* A kernel of ours was captured into `graph` (caller holds launchLock): the graph keeps the
 * transport alive until it and its replays are gone (cudaUserObject, as NCCL retains its
 * persistent plans); the memory is freed off CUDA's callback thread. */
ncclResult_t symmTransportRetainForGraph(struct symmComm* comm, cudaGraph_t graph);

/* Failure words and flags (caller holds launchLock). SYMM_ERR_* bits a kernel of ours raised on
 * this rank (0: none). */
uint32_t symmTransportKernelErrors(const struct symmComm* comm);
/* Writes `bits` into every rank's failure word (ours too) from a private stream, so that
 * every rank's kernels stop waiting and report the failure. */
void symmTransportTellPeers(struct symmComm* comm, uint32_t bits);
/* Our pad's failure word as last read back (a peer failed the communicator), and a new read
 * issued when the previous one completed. Never blocks. */
uint32_t symmTransportPollPadFailure(struct symmComm* comm);
/* Tests: what a kernel of ours that gives up for `bits` does (this rank's error word, the
 * gave-up word in `stream`'s order, every rank's failure word). */
void symmTransportInjectKernelError(struct symmComm* comm, uint32_t bits, cudaStream_t stream);
/* ncclCommAbort/ncclCommRevoke/a shrink with NCCL_SHRINK_ABORT: raise the abort flag that every
 * spin loop polls, and comm->aborting, which stops setup waits and exchanges. */
void symmTransportSetAbort(struct symmComm* comm);

/* If [ptr, ptr+bytes) lies inside a symmetric window registered on `comm` (ncclCommWindowRegister
 * with NCCL_WIN_COLL_SYMMETRIC),
 * fills peerPtrs[r] with rank r's address of the same offset and returns 1; otherwise 0. */
int symmTransportFindWindow(const struct symmComm* comm, const void* ptr, size_t bytes,
                            void* peerPtrs[SYMM_MAX_RANKS]);
/* If [ptr, ptr+bytes) lies inside a symmetric window of `comm` that has an alias (its
 * allocation mapped a second time here, which every rank did: agreed when it was registered),
 * sets *alias to the same bytes' address in the alias and returns 1; otherwise 0. What the
 * `ncclplain` choice gives the real NCCL instead of the window's own address, so that NCCL treats
 * the buffer as plain memory. Caller holds comm->launchLock (the transport stays attached). */
int symmTransportWindowAlias(const struct symmComm* comm, const void* ptr, size_t bytes,
                             void** alias);
/* Window aliases mapped in this process now (tests: each window's is unmapped with it). */
int symmTransportAliasCount(void);
/* Changes whenever a window is added to or removed from `comm` (what FindWindow answers may
 * have changed); 0 without a transport. */
uint64_t symmTransportWindowsVersion(const struct symmComm* comm);

/* Zero copy of plain buffers in captured graphs (graphpeers.c): ncclMemAlloc buffers, and
 * cudaMalloc ones with SYMMCOLL_GRAPH_ZERO_COPY=2.
 * Ready: every rank is its own process, every rank's registration channel is up (agreed at
 * staging) and SYMMCOLL_GRAPH_ZERO_COPY is on; identical on all ranks (caller holds launchLock). */
int symmTransportGraphPeersReady(const struct symmComm* comm);
/* Under launchLock: a reference on the communicator's transport (NULL without one), so that
 * work done after the lock is released (symmTransportGraphPeers waits for peers) may use it
 * while teardown detaches it; symmTransportDrop gives it back (the last one frees). */
struct symmTransport* symmTransportHold(struct symmComm* comm);
void symmTransportDrop(struct symmTransport* t);
/* One captured call's exchange (`t`: held, see above), collective: every rank calls it for the same
 * calls in the same order. Offers [ptr, ptr+bytes) (an fd of our ncclMemAlloc allocation, or in
 * mode 2 the legacy IPC handle of its cudaMalloc allocation) to every peer, waits for theirs,
 * imports them and agrees. Returns 1 on every rank when every rank exported and imported, with
 * peerPtrs[r] = rank r's buffer as mapped here (ours: ptr) and the imports held by `graph`; 0 on
 * every rank otherwise. `join` 0 says no at once without waiting (inside a group, say: its launch
 * waits for the group's end). Waits as NCCL does, for as long as the peers take; gives up (0) only
 * when the communicator goes away, is aborted or revoked, or `failed(comm)` (asked every 16 ms)
 * says it failed. -1: agreed, but the graph could not hold an import: the caller fails the
 * communicator. */
int symmTransportGraphPeers(struct symmComm* comm, struct symmTransport* t, const void* ptr,
                            size_t bytes, int join, cudaGraph_t graph,
                            int (*failed)(struct symmComm*), void* peerPtrs[SYMM_MAX_RANKS]);

/* ncclCommRegister zero-copy: the descriptor this rank publishes to the kernels for an all-reduce
 * input [ptr, ptr+bytes) (see SYMM_USER_REG_DESC): non-zero only when the range lies in a region
 * this rank registered on `comm` and every peer has acknowledged mapping that region; else 0
 * (the input goes through staging). Lock-free; called on every launch. */
uint64_t symmTransportUserInputDesc(const struct symmComm* comm, const void* ptr, size_t bytes);

/* ncclCommRegister after the real NCCL returned `realHandle` (non-NULL): if `buff` is VMM memory
 * exportable as a POSIX fd (ncclMemAlloc), offers its allocation to every peer, which maps it in
 * the background and acknowledges (before staging exists: once it does). Local, never blocks on
 * peers, never fails the user's call. */
void symmTransportUserRegister(struct symmComm* comm, void* buff, size_t size, void* realHandle);
/* ncclCommDeregister (inside a group: at the outermost GroupEnd), before forwarding: withdraws
 * the region NCCL named `realHandle`, waits for our eager kernels, tells the peers to unmap it. */
void symmTransportUserDeregister(struct symmComm* comm, void* realHandle);
/* Peer regions this rank has mapped now (tests). */
int symmTransportUserRegMappedCount(const struct symmComm* comm);

/* 1 when this communicator has a multicast mapping: every rank asked (SYMMCOLL_MULTIMEM=1), had
 * device support and no off-switch (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
 * NVSHMEM_DISABLE_NVLS=1) at setup, size >= 4, and every rank mapped it. Identical on all ranks;
 * the environment is not read again. */
int symmTransportMulticastReady(const struct symmComm* comm);

/* How many times this process tried to create or import a multicast object (tests prove 0). */
long symmTransportMulticastAttempts(void);

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
/* Before the real ncclCommWindowDeregister: unmap the peers' windows of `win` and its alias once
 * every eager operation ordered on the communicator so far (kernels of ours, and forwarded calls
 * that were given the alias) has finished. */
void symmTransportWindowDeregister(struct symmComm* comm, ncclWindow_t win);

#endif
