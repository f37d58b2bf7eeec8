/* SPDX-License-Identifier: Apache-2.0 */
/* State src/transport keeps per communicator (behind comm->transport); private to this folder. */
#ifndef SYMMCOLL_TRANSPORT_INTERNAL_H
#define SYMMCOLL_TRANSPORT_INTERNAL_H

#include <pthread.h>

#include "comm.h"
#include "cudriver.h"
#include "order.h"
#include "symm_peers.h"
#include "transport.h"
#include "vmm.h"

struct symmRegMsg;

/* Tags name the shared objects of one communicator in socket names and the registry. */
#define SYMM_TAG_STAGING 0u
#define SYMM_TAG_MULTICAST 1u
#define SYMM_TAG_USER_REG 2u     /* setup only: hands out each rank's registration channel */
#define SYMM_TAG_WINDOW_BASE 16u /* + window sequence number */

/* Host-mapped words of one transport (one slot of a process-wide pinned pool, hostflags.c):
 * 32-bit abort and error flags on their own cache lines, the 64-bit value the host writes into
 * peers' failure words, and where our own pad's failure word is read back. */
#define SYMM_HOST_ABORT 0     /* uint32 index */
#define SYMM_HOST_ERROR 32    /* uint32 index */
#define SYMM_HOST_FAIL_VALUE 24 /* uint64 index (byte 192) */
#define SYMM_HOST_READBACK 28   /* uint64 index (byte 224) */
#define SYMM_HOST_SLOT_BYTES 256
struct symmHostSlot {
  uint32_t* host; /* SYMM_HOST_SLOT_BYTES, zeroed when handed out */
  void* dev;      /* the same words as the device sees them */
};
ncclResult_t symmHostSlotAlloc(struct symmHostSlot* slot);
/* Back to the pool (never to CUDA: cudaFreeHost would wait for the whole device). */
void symmHostSlotFree(struct symmHostSlot* slot);

/* A peer-mapped NCCL_WIN_COLL_SYMMETRIC window. */
struct symmWindow {
  ncclWindow_t win;
  uintptr_t userPtr; /* this rank's registered range */
  size_t bytes;
  void* peerPtrs[SYMM_MAX_RANKS]; /* rank r's address of userPtr's offset, mapped here */
  struct symmMapping* maps[SYMM_MAX_RANKS];
  /* This rank's whole allocation mapped a second time (aliasBase 0: none), an address the real
   * NCCL does not know as a window: what the `ncclplain` choice gives it, so that it runs its
   * plain path. aliasPtr (userPtr's alias) is set only when every rank mapped one (agreed). */
  CUdeviceptr aliasBase;
  size_t aliasBytes;
  uintptr_t aliasPtr;
  struct symmWindow* next;
};

struct symmTransport {
  struct symmPeers peers; /* what kernels get (by value) */
  /* References: the communicator's, and one per CUDA graph holding a kernel of ours (released
   * by CUDA when the graph and its pending replays are gone). The last one frees (atomic). */
  int refs;
  /* From the setup exchange; the secret never leaves this process except through socket names
   * derived from it by a keyed hash and authenticated requests, and is never logged. */
  uint8_t secret[SYMM_SECRET_BYTES];
  int32_t pids[SYMM_MAX_RANKS];
  uint32_t uid;
  int cudaDev;
  int timeoutMs;
  size_t granularity;    /* largest VMM granularity of all ranks */
  int multicastAgreed;   /* stage 1 verdict: every rank may try multicast */
  size_t padBytes;       /* signal pad per rank, as the kernels lay it out */
  symmReleaseWaitsFn releaseWaits; /* the copy-engine all-gather's, for aborts */
  /* Staging: allocated at the first call given to our kernels (symmTransportStage). */
  int staged;            /* peers.buffers/signals are mapped */
  size_t plannedBuffer;  /* staging bytes per rank it will have, identical on every rank */
  size_t allocBytes;     /* [buffer | signal pad], one per rank */
  struct symmMapping* maps[SYMM_MAX_RANKS]; /* maps[rank] is our own (published) allocation */
  void* localState;                         /* stream-ordered device memory of `ctl` */
  struct symmHostSlot flags;
  cudaStream_t ctl;        /* private, non-blocking: zeroing, failure words, read-backs */
  cudaEvent_t readback;    /* our pad's failure word copied into flags (SYMM_HOST_READBACK) */
  int readbackPending;
  struct symmSideStream side; /* launches' second stream (symmTransportSideStream) */
  /* Multicast (never on machines where it is forbidden). */
  CUmemGenericAllocationHandle mcHandle;
  int mcCreated, mcBound;
  CUdeviceptr mcBase;
  size_t mcBytes;
  /* Windows, guarded by lock. */
  pthread_mutex_t lock;
  struct symmWindow* windows;
  uint64_t windowsVersion; /* bumped (atomic, under lock) whenever `windows` changes */
  uint32_t windowSeq;
  /* ncclCommRegister zero-copy (userreg.c); NULL when off on this rank. */
  struct symmUserReg* userReg;
  /* Zero copy of plain buffers in captured graphs (graphpeers.c): the mailbox of the peers'
   * GRAPH_* messages; non-NULL only where every rank is its own process and every rank's
   * registration channel is up (agreed at staging). */
  struct symmGraphPeers* graphPeers;
  /* Where the receiver thread (userreg.c) hands GRAPH_* messages (and a GRAPH_OFFER's fd, or
   * -1): graphpeers.c's mailbox, set with it (NULL: closed and dropped). */
  void (*graphMail)(struct symmTransport* t, const struct symmRegMsg* m, int fd);
  /* Registrations made before staging existed, offered once it does (userreg.c). */
  struct symmPendingReg* pendingRegs;
  /* From teardown on: the communicator's order events (graphs of ours may still record and wait
   * on them), destroyed with the transport; `quiesce` is the one whose latest record follows
   * every operation of ours, eager or replayed. `released`: recorded on `ctl` after the latest
   * release of copy-engine waits (transport.c). */
  cudaEvent_t orderEvents[SYMM_ORDER_EVENTS];
  int orderEventCount;
  cudaEvent_t quiesce;
  cudaEvent_t released;
};

/* Waits for everything on `stream` by polling, giving up when the communicator is going away
 * (an abort on another thread must never be stuck behind a setup wait). */
ncclResult_t symmWaitStream(const struct symmComm* comm, cudaStream_t stream);

/* All-gathers one 32-bit vote per rank over each comm in the exchange and ANDs the votes
 * bitwise: for 0/1 votes, allVoted[i] = 1 only if every rank of comms[i] voted 1 (0 where the
 * exchange failed); other bits are independent agreements riding on the same exchange. */
void symmAllRanksAgree(struct symmComm** comms, int n, const int* inExchange,
                       const uint32_t* myVote, uint32_t* allVoted);

/* The abort flag, for setup waits to stop at (ncclCommAbort and ncclCommRevoke raise it); NULL
 * before it exists. */
const volatile uint32_t* symmSetupStop(const struct symmTransport* t);

struct symmFdRendezvous;
/* The socket rendezvous of this rank for exchanges tagged `tag` (zero it after use: it holds
 * the secret). */
void symmFillRendezvous(const struct symmTransport* t, uint32_t tag, struct symmFdRendezvous* rv);

/* Registry key of (comm, tag, rank). */
void symmKeyOf(const struct symmTransport* t, uint32_t tag, int rank, struct symmMapKey* key);

void symmWindowsTeardown(struct symmTransport* t);

/* Frees everything the transport holds, in reverse order (its kernels have finished). */
void symmTransportFree(struct symmTransport* t);
/* Sets comm->transport to `t` and returns the one it held. The caller holds launchLock; this
 * takes transportLock too, so that the readers that take only that lock (the abort flag, the
 * health poll) never see a transport being freed. */
struct symmTransport* symmTransportSwap(struct symmComm* comm, struct symmTransport* t);
/* Multicast object and mapping of a transport, if any (transport.c, which frees). */
void symmMulticastDrop(struct symmTransport* t);

struct symmFdServer;
/* ncclCommRegister zero-copy (userreg.c). Staging stage 3: creates this rank's registration
 * channel and serves its sending end to every other rank (*server, finished with the setup's
 * servers); returns 1 when serving (0: off, e.g. SYMMCOLL_USER_REG=0). */
int symmUserRegServe(struct symmTransport* t, struct symmFdServer** server);
/* Stage 4, when every rank serves (agreed): fetches every peer's sending end, starts the
 * receiver thread and sets peers.userRegTable.
 * Any failure turns the feature off on this rank only (it then never acknowledges, so no peer
 * publishes a region to it). */
void symmUserRegConnect(struct symmTransport* t, int everyoneServes);
/* Offers the regions registered before staging existed; with launchLock held, right after
 * t->staged is set (registrations from then on are offered by symmTransportUserRegister). */
void symmUserRegOfferPending(struct symmTransport* t);
/* Teardown, before windows, peer mappings and localState go: stops the thread, unmaps the
 * peers' regions, releases our retained handles, closes the sockets. */
void symmUserRegTeardown(struct symmTransport* t);
/* Sends `m` (rank and token filled in here; `fd` attached when >= 0) to `peer`'s registration
 * channel without blocking: 1 when sent, 0 when not (queue full, no channel). */
int symmUserRegSendTo(struct symmTransport* t, int peer, struct symmRegMsg* m, int fd);

/* If [ptr, ptr+bytes) lies in an ncclMemAlloc allocation of ours: its id (unique in this
 * process, never reused), base, size and a new POSIX fd of it (the caller closes), and 1. */
int symmTransportMemAllocExport(const void* ptr, size_t bytes, uint64_t* id, uintptr_t* base,
                                size_t* allocBytes, int* fd);

/* Graph zero copy's mailbox (graphpeers.c): created at staging where agreed (it sets
 * t->graphMail, through which the receiver thread delivers), freed after that thread stopped. */
ncclResult_t symmGraphPeersCreate(struct symmTransport* t);
void symmGraphPeersFree(struct symmTransport* t);

#endif
