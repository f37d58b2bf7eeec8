/* SPDX-License-Identifier: Apache-2.0 */
/* Staging memory, built at the first call the tuner gives to our kernels (the same call on every
 * rank): one VMM allocation [staging buffer | signal pad] per rank, zeroed, peer-mapped, plus the
 * registration channel and multicast. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "cudart.h"
#include "fdpass.h"
#include "internal.h"
#include "multicast.h"
#include "transport.h"

static size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* The ranks (bit r) that live in another process than `rank`. */
static uint32_t otherProcesses(const struct symmTransport* t, int nranks, int rank) {
  uint32_t mask = 0;
  for (int r = 0; r < nranks; r++)
    if (t->pids[r] != t->pids[rank]) mask |= 1u << r;
  return mask;
}

struct stageCtx {
  struct symmComm* comm;
  struct symmTransport* t;
  struct symmFdServer* server;
  struct symmFdServer* mcServer;
  struct symmFdServer* regServer; /* this rank's registration channel (userreg.c) */
};

int symmTransportNeedsStaging(const struct symmComm* comm) {
  return comm != NULL && comm->transport != NULL && !comm->transport->staged;
}

size_t symmTransportStagingBytes(const struct symmComm* comm) {
  return comm != NULL && comm->transport != NULL ? comm->transport->plannedBuffer : 0;
}

/* Allocates, zeroes (on the private stream, polled), maps and publishes this rank's staging
 * memory, and starts serving its fd to other processes. */
static ncclResult_t buildLocal(struct stageCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  ncclResult_t res = ncclSuccess;
  CUDACHECK(cudaSetDevice(c->cudaDev));
  const size_t bufferBytes = t->plannedBuffer;
  const size_t padBytes = roundUp(t->padBytes, 4096);
  t->allocBytes = roundUp(bufferBytes + padBytes, t->granularity);

  CUmemGenericAllocationHandle handle;
  CUdeviceptr base = 0;
  NCCLCHECKGOTO(symmVmmCreate(c->cudaDev, t->allocBytes, &handle), res, fail);
  NCCLCHECKGOTO(symmVmmMap(handle, t->allocBytes, c->cudaDev, &base), res, release_handle);
  /* Everything, the Lamport region and the pad included: recycled pages must never hold lines
   * or signals that look current. */
  CUDACHECKGOTO(cudaMemsetAsync((void*)base, 0, t->allocBytes, t->ctl), res, unmap);
  /* The pad's constant (symm_peers.h), in place before any call can copy it (the sync below):
   * a copy that read a 0 there would hand a peer a barrier word it waits on forever. */
  static const uint32_t one = 1;
  char* const padOne = (char*)base + t->plannedBuffer + SYMM_PAD_ONE_WORD * sizeof(uint64_t);
  CUDACHECKGOTO(cudaMemcpyAsync(padOne, &one, sizeof(one), cudaMemcpyHostToDevice, t->ctl), res,
                unmap);
  /* Waited for to the end, abort or not: the private stream holds nothing that depends on a
   * peer, and unmapping under a memset in flight would be an illegal access. */
  CUDACHECKGOTO(cudaStreamSynchronize(t->ctl), res, unmap);
  struct symmMapKey key;
  symmKeyOf(t, SYMM_TAG_STAGING, c->rank, &key);
  NCCLCHECKGOTO(symmRegistryPublish(&key, handle, base, t->allocBytes, 0, c->cudaDev,
                                    &t->maps[c->rank]),
                res, unmap);
  /* From here the registry owns handle and mapping. */
  const uint32_t remote = otherProcesses(t, c->nranks, c->rank);
  if (remote != 0) {
    int fd = -1;
    NCCLCHECK(symmVmmExportFd(handle, &fd));
    struct symmFdRendezvous rv;
    symmFillRendezvous(t, SYMM_TAG_STAGING, &rv);
    res = symmFdServerStart(&rv, fd, remote, &x->server);
    close(fd);
    memset(&rv, 0, sizeof(rv));
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
unmap:
  symmVmmUnmap(base, t->allocBytes);
release_handle:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (handle));
fail:
  return res;
}

/* Maps every peer's staging memory: same process through the registry, others by fd. */
static ncclResult_t mapPeers(struct stageCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  CUDACHECK(cudaSetDevice(c->cudaDev));
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_STAGING, &rv);
  ncclResult_t res = ncclSuccess;
  for (int k = 1; k < c->nranks && res == ncclSuccess; k++) {
    int q = (c->rank + k) % c->nranks; /* stagger so servers are not all hit at once */
    struct symmMapKey key;
    symmKeyOf(t, SYMM_TAG_STAGING, q, &key);
    if (t->pids[q] == t->pids[c->rank]) {
      res = symmRegistryAcquireLocal(&key, c->cudaDev, t->timeoutMs, symmSetupStop(t),
                                      &t->maps[q]);
    } else {
      int fd = -1;
      res = symmFdFetch(&rv, q, &fd);
      if (res == ncclSuccess) res = symmRegistryAcquireFd(&key, fd, t->allocBytes, c->cudaDev, &t->maps[q]);
    }
  }
  memset(&rv, 0, sizeof(rv));
  return res;
}

/* ---- multicast (only where every guard allows it; never on the shared test machines) ------ */

static ncclResult_t multicastServe(struct stageCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  if (c->rank != 0) return ncclSuccess;
  int fd = -1;
  NCCLCHECK(symmMulticastCreate(c->nranks, t->plannedBuffer, &t->mcHandle, &t->mcBytes, &fd));
  t->mcCreated = 1;
  const uint32_t remote = otherProcesses(t, c->nranks, 0);
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_MULTICAST, &rv);
  ncclResult_t res = remote ? symmFdServerStart(&rv, fd, remote, &x->mcServer) : ncclSuccess;
  close(fd);
  return res;
}

/* Not rank 0: obtain the object (another process by fd; ours: a fresh export of the same). */
static ncclResult_t multicastJoin(struct stageCtx* x, struct stageCtx* all, int n) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  if (c->rank != 0) {
    int fd = -1;
    if (t->pids[0] == t->pids[c->rank]) {
      /* Rank 0 lives in this process: it is one of `all` or another thread's; export again. */
      struct symmTransport* owner = NULL;
      for (int i = 0; i < n; i++)
        if (all[i].t && all[i].comm->rank == 0 && memcmp(all[i].t->secret, t->secret, 16) == 0)
          owner = all[i].t;
      if (owner == NULL || !owner->mcCreated) {
        INFO(SYMM_TRANSPORT, "multicast: rank 0 is another thread of this process; not supported");
        return ncclInvalidUsage;
      }
      NCCLCHECK(symmVmmExportFd(owner->mcHandle, &fd));
      t->mcBytes = owner->mcBytes;
    } else {
      struct symmFdRendezvous rv;
      symmFillRendezvous(t, SYMM_TAG_MULTICAST, &rv);
      ncclResult_t res = symmFdFetch(&rv, 0, &fd);
      memset(&rv, 0, sizeof(rv));
      if (res != ncclSuccess) return res;
      t->mcBytes = t->plannedBuffer; /* rank 0 rounds to the same granularity */
    }
    NCCLCHECK(symmMulticastImport(fd, &t->mcHandle));
    t->mcCreated = 1;
  }
  return symmMulticastAddDevice(t->mcHandle, c->cudaDev);
}

/* Multicast is optional: its own agreements; a failure only turns multimem off. */
static void stageMulticast(struct stageCtx* ctx, struct symmComm** comms, int n,
                           const int* inExchange, const uint32_t* mapped) {
  int* mcIn = calloc((size_t)n, sizeof(int));
  uint32_t* vote = calloc((size_t)n, sizeof(uint32_t));
  uint32_t* all = calloc((size_t)n, sizeof(uint32_t));
  int any = 0;
  if (mcIn == NULL || vote == NULL || all == NULL) {
    WARN("symmetric memory: out of host memory for multicast setup; multimem stays off");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    mcIn[i] = inExchange[i] && ctx[i].t != NULL && ctx[i].t->multicastAgreed;
    any |= mcIn[i];
  }
  if (!any) goto done;
  for (int i = 0; i < n; i++)
    if (mcIn[i]) vote[i] = mapped[i] && multicastServe(&ctx[i]) == ncclSuccess;
  symmAllRanksAgree(comms, n, mcIn, vote, all);
  for (int i = 0; i < n; i++)
    if (mcIn[i]) vote[i] = all[i] && multicastJoin(&ctx[i], ctx, n) == ncclSuccess;
  symmAllRanksAgree(comms, n, mcIn, vote, all);
  for (int i = 0; i < n; i++) {
    if (!mcIn[i]) continue;
    struct symmTransport* t = ctx[i].t;
    if (all[i] && symmMulticastBindAndMap(t->mcHandle, t->mcBytes, t->maps[comms[i]->rank]->handle,
                                          0, t->cudaDev, &t->mcBase) == ncclSuccess) {
      t->mcBound = 1;
      t->peers.multicastBuffer = (void*)t->mcBase;
    }
    vote[i] = t->mcBound;
  }
  symmAllRanksAgree(comms, n, mcIn, vote, all);
  for (int i = 0; i < n; i++) {
    if (!mcIn[i]) continue;
    if (ctx[i].mcServer) (void)symmFdServerFinish(ctx[i].mcServer, 1);
    ctx[i].mcServer = NULL;
    if (!all[i]) symmMulticastDrop(ctx[i].t);
  }
done:
  free(mcIn);
  free(vote);
  free(all);
}

/* Graph zero copy (graphpeers.c) can work here: every other rank is in another process (a legacy
 * IPC handle cannot be opened by the process that made it; over all ranks' votes: every rank is
 * its own process), this rank's registration channel is up, and its mailbox exists. */
static int graphPeersPossible(const struct symmComm* c, struct symmTransport* t) {
  const uint32_t others = ((1u << c->nranks) - 1u) & ~(1u << c->rank);
  if (t->userReg == NULL || otherProcesses(t, c->nranks, c->rank) != others) return 0;
  return symmGraphPeersCreate(t) == ncclSuccess;
}

static void finishServers(struct stageCtx* x, int cancel) {
  if (x->server) (void)symmFdServerFinish(x->server, cancel);
  if (x->mcServer) (void)symmFdServerFinish(x->mcServer, cancel);
  if (x->regServer) (void)symmFdServerFinish(x->regServer, cancel);
  x->server = x->mcServer = x->regServer = NULL;
}

/* Undoes what staging built on a transport that stays (the communicator keeps its private state
 * until teardown; it forwards because its transport is detached). */
static void detach(struct symmComm* c) {
  pthread_mutex_lock(&c->launchLock);
  struct symmTransport* t = symmTransportSwap(c, NULL);
  pthread_mutex_unlock(&c->launchLock);
  if (t != NULL) symmTransportFree(t);
}

ncclResult_t symmTransportStage(struct symmComm** comms, int n) {
  struct stageCtx* ctx = calloc((size_t)n, sizeof(*ctx));
  int* inExchange = calloc((size_t)n, sizeof(int));
  uint32_t* vote = calloc((size_t)n, sizeof(uint32_t));
  uint32_t* all = calloc((size_t)n, sizeof(uint32_t));
  struct symmCudaThread saved;
  symmCudaThreadEnter(&saved);
  if (ctx == NULL || inExchange == NULL || vote == NULL || all == NULL) {
    WARN("symmetric memory: out of host memory building staging; communicators forward");
    for (int i = 0; i < n; i++) detach(comms[i]);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    ctx[i].comm = comms[i];
    ctx[i].t = comms[i]->transport;
    inExchange[i] = symmTransportNeedsStaging(comms[i]);
    if (inExchange[i]) __atomic_store_n(&comms[i]->stagingBusy, 1, __ATOMIC_RELEASE);
  }

  /* Stage 3: local memory, published and served. Failures from here on are agreed.
   * Bit 0: built; bit 1: serving a registration channel (optional, agreed separately). */
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    if (buildLocal(&ctx[i]) == ncclSuccess)
      vote[i] = 1u | (symmUserRegServe(ctx[i].t, &ctx[i].regServer) ? 2u : 0u);
    (void)cudaGetLastError();
  }
  symmAllRanksAgree(comms, n, inExchange, vote, all);

  /* Stage 4: map every peer (and multicast where allowed), then the final agreement.
   * Bit 0: mapped; bit 1: the registration channel is up here and graph zero copy may use it. */
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    vote[i] = (all[i] & 1u) && mapPeers(&ctx[i]) == ncclSuccess;
    if (vote[i]) symmUserRegConnect(ctx[i].t, (all[i] & 2u) != 0); /* every rank serves one */
    if (vote[i] && graphPeersPossible(comms[i], ctx[i].t)) vote[i] |= 2u;
    (void)cudaGetLastError();
  }
  stageMulticast(ctx, comms, n, inExchange, vote);
  symmAllRanksAgree(comms, n, inExchange, vote, all);

  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    struct symmTransport* t = ctx[i].t;
    finishServers(&ctx[i], 1);
    if (!(all[i] & 2u)) symmGraphPeersFree(t);
    if (all[i] & 1u) {
      pthread_mutex_lock(&c->launchLock);
      t->peers.bufferBytes = t->plannedBuffer;
      t->peers.signalBytes = t->allocBytes - t->plannedBuffer;
      for (int r = 0; r < c->nranks; r++) {
        t->peers.buffers[r] = (void*)t->maps[r]->base;
        t->peers.signals[r] = (uint64_t*)(t->maps[r]->base + t->plannedBuffer);
      }
      t->staged = 1;
      symmUserRegOfferPending(t);
      pthread_mutex_unlock(&c->launchLock);
      INFO(SYMM_INIT, "comm %p rank %d/%d: staging ready (%zu KiB, multicast %s)", (void*)c->real,
           c->rank, c->nranks, t->plannedBuffer >> 10, t->peers.multicastBuffer ? "on" : "off");
    } else {
      INFO(SYMM_INIT, "comm %p rank %d/%d: libsymmcoll kernels inactive from now on (every rank "
           "forwards): building staging failed on %s rank", (void*)c->real, c->rank, c->nranks,
           vote[i] ? "another" : "this");
      detach(c);
    }
  }

done:
  for (int i = 0; ctx && i < n; i++) {
    finishServers(&ctx[i], 1);
    if (inExchange && inExchange[i]) __atomic_store_n(&comms[i]->stagingBusy, 0, __ATOMIC_RELEASE);
  }
  symmCudaThreadLeave(&saved);
  free(ctx);
  free(inExchange);
  free(vote);
  free(all);
  return ncclSuccess;
}
