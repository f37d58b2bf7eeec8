/* SPDX-License-Identifier: Apache-2.0 */
/* State src/transport keeps per communicator (behind comm->transport); private to this folder. */
#ifndef SYMMCOLL_TRANSPORT_INTERNAL_H
#define SYMMCOLL_TRANSPORT_INTERNAL_H

#include <pthread.h>

#include "comm.h"
#include "cudriver.h"
#include "eligibility.h"
#include "symm_peers.h"
#include "vmm.h"

/* Tags name the shared objects of one communicator in socket names and the registry. */
#define SYMM_TAG_STAGING 0u
#define SYMM_TAG_MULTICAST 1u
#define SYMM_TAG_USER_REG 2u     /* setup only: hands out each rank's registration channel */
#define SYMM_TAG_WINDOW_BASE 16u /* + window sequence number */

/* A peer-mapped NCCL_WIN_COLL_SYMMETRIC window. */
struct symmWindow {
  ncclWindow_t win;
  uintptr_t userPtr; /* this rank's registered range */
  size_t bytes;
  void* peerPtrs[SYMM_MAX_RANKS]; /* rank r's address of userPtr's offset, mapped here */
  struct symmMapping* maps[SYMM_MAX_RANKS];
  struct symmWindow* next;
};

struct symmTransport {
  struct symmPeers peers; /* what kernels get (by value) */
  /* From the setup exchange; the secret never leaves this process except in socket names (first
   * half) and authenticated requests (second half), and is never logged. */
  uint8_t secret[SYMM_SECRET_BYTES];
  int32_t pids[SYMM_MAX_RANKS];
  uint32_t uid;
  int cudaDev;
  int timeoutMs;
  /* Staging allocation: [buffer | signal pad], one per rank, allocBytes each. */
  size_t allocBytes;
  struct symmMapping* maps[SYMM_MAX_RANKS]; /* maps[rank] is our own (published) allocation */
  void* localState;                         /* cudaMalloc */
  uint32_t* hostFlags;                      /* cudaHostAlloc: [0] abort, [32] error */
  cudaEvent_t lastLaunch;
  int launched;
  /* Multicast (never on machines where it is forbidden). */
  CUmemGenericAllocationHandle mcHandle;
  int mcCreated, mcBound;
  CUdeviceptr mcBase;
  size_t mcBytes;
  /* Windows, guarded by lock. */
  pthread_mutex_t lock;
  struct symmWindow* windows;
  uint32_t windowSeq;
  /* ncclCommRegister zero-copy (userreg.c); NULL when off on this rank. */
  struct symmUserReg* userReg;
};

/* One all-gather over the real communicator, for every comm of `comms` that takes part
 * (`take[i]`); one thread may drive all of them (grouped). Each sends `bytes` from send[i] and
 * receives nranks*bytes into recv[i]. A failed exchange clears take[i]. */
ncclResult_t symmExchange(struct symmComm** comms, int n, int* take, const void* const* send,
                          void* const* recv, size_t bytes);

/* All-gathers one 32-bit word per rank over each taking comm and ANDs them: agreed[i] = 1 only
 * if every rank of comms[i] said 1 (0 where the exchange failed). */
void symmAgree(struct symmComm** comms, int n, int* take, const uint32_t* mine, uint32_t* agreed);

struct symmFdRendezvous;
/* The socket rendezvous of this rank for exchanges tagged `tag` (zero it after use: it holds
 * the secret). */
void symmFillRendezvous(const struct symmTransport* t, uint32_t tag, struct symmFdRendezvous* rv);

/* Registry key of (comm, tag, rank). */
void symmKeyOf(const struct symmTransport* t, uint32_t tag, int rank, struct symmMapKey* key);

void symmWindowsTeardown(struct symmTransport* t);

struct symmFdServer;
/* ncclCommRegister zero-copy (userreg.c). Stage 3: creates this rank's registration channel and
 * serves its sending end to every other rank (*server, finished with the setup's servers);
 * returns 1 when serving (0: off, e.g. SYMMCOLL_USER_REG=0). */
int symmUserRegServe(struct symmTransport* t, struct symmFdServer** server);
/* Stage 4, when every rank serves (agreed): fetches every peer's sending end, starts the
 * receiver thread and sets peers.userRegTable. Any failure turns the feature off on this rank
 * only (it then never acknowledges, so no peer publishes a region to it). */
void symmUserRegConnect(struct symmTransport* t, int everyoneServes);
/* Teardown, before windows, peer mappings and localState go: stops the thread, unmaps the
 * peers' regions, releases our retained handles, closes the sockets. With !kernelsDone (abort,
 * kernels still running) only stops the thread and leaks the rest with the transport. */
void symmUserRegTeardown(struct symmTransport* t, int kernelsDone);

#endif
