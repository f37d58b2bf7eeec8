/* SPDX-License-Identifier: Apache-2.0 */
/* Zero copy for plain (cudaMalloc) buffers in captured graphs. A captured all-gather writes its
 * peers' outputs, a captured reduce-scatter reads its peers' inputs, in place, as with symmetric
 * windows: at capture each rank offers its buffer's allocation (a legacy CUDA IPC handle) to
 * every peer over the registration channel, imports theirs, and the ranks agree; the graph holds
 * the imports. Every rank takes part in the same captured calls in the same order (NCCL's rule
 * for a communicator's calls), so the call's number `seq` names the exchange on every rank. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "cudart.h"
#include "internal.h"
#include "param.h"
#include "regchan.h"
#include "transport.h"

SYMMCOLL_PARAM_FULL(GraphZeroCopy, "GRAPH_ZERO_COPY", 1, 0, 1, SYMM_PARAM_AGREED,
                    "captured all-gathers and reduce-scatters on plain (cudaMalloc) buffers write "
                    "and read the peers' buffers in place where every rank is its own process "
                    "(0 = through staging)")

/* ---- imports, process-wide ----------------------------------------------------------------
 * One import per (device, allocation): CUDA maps an IPC handle once per process. An import is
 * held by the graphs that use it (cudaUserObject); one no graph holds any more is closed at the
 * next exchange (CUDA's callback thread may not call CUDA), or stays until the process ends. */
struct import {
  int dev;
  uint8_t handle[SYMM_REGCHAN_IPC_BYTES];
  void* base;
  int refs; /* atomic: graphs holding it, and an exchange between finding and holding it */
  struct import* next;
};
static pthread_mutex_t importLock = PTHREAD_MUTEX_INITIALIZER;
static struct import* imports;

static void closeUnheld(void) {
  struct import** it = &imports;
  while (*it != NULL) {
    struct import* im = *it;
    if (__atomic_load_n(&im->refs, __ATOMIC_ACQUIRE) > 0) {
      it = &im->next;
      continue;
    }
    int prevDev = -1;
    (void)cudaGetDevice(&prevDev);
    if (cudaSetDevice(im->dev) != cudaSuccess || cudaIpcCloseMemHandle(im->base) != cudaSuccess) {
      (void)cudaGetLastError();
      INFO(SYMM_TRANSPORT, "graph zero copy: closing an import on device %d failed", im->dev);
    }
    if (prevDev >= 0) (void)cudaSetDevice(prevDev);
    *it = im->next;
    free(im);
  }
}

/* The peer allocation `handle` mapped on `dev`, with one reference taken; NULL when it cannot be
 * opened. */
static struct import* acquireImport(int dev, const uint8_t* handle) {
  pthread_mutex_lock(&importLock);
  closeUnheld();
  struct import* im = imports;
  while (im != NULL && !(im->dev == dev && memcmp(im->handle, handle, sizeof(im->handle)) == 0))
    im = im->next;
  if (im == NULL && (im = calloc(1, sizeof(*im))) != NULL) {
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    if (cudaIpcOpenMemHandle(&im->base, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      INFO(SYMM_TRANSPORT, "graph zero copy: cannot open a peer's buffer on device %d: %s", dev,
           cudaGetErrorString(cudaGetLastError()));
      free(im);
      im = NULL;
    } else {
      im->dev = dev;
      memcpy(im->handle, handle, sizeof(im->handle));
      im->next = imports;
      imports = im;
    }
  }
  if (im != NULL) __atomic_add_fetch(&im->refs, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&importLock);
  return im;
}

static void releaseImport(void* arg) {
  struct import* im = arg;
  __atomic_sub_fetch(&im->refs, 1, __ATOMIC_ACQ_REL);
}

/* ---- the mailbox: GRAPH_* messages the receiver thread delivers ----------------------------- */

struct letter {
  struct symmRegMsg msg;
  struct letter* next;
};

struct symmGraphPeers {
  pthread_mutex_t lock;
  pthread_cond_t arrived;
  struct letter* letters;
  uint64_t nextSeq; /* the number of this rank's next captured exchange (the caller's thread) */
};

ncclResult_t symmGraphPeersCreate(struct symmTransport* t) {
  struct symmGraphPeers* g = calloc(1, sizeof(*g));
  if (g == NULL) {
    WARN("graph zero copy: out of host memory");
    return ncclSystemError;
  }
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->arrived, NULL);
  t->graphPeers = g;
  return ncclSuccess;
}

void symmGraphPeersFree(struct symmTransport* t) {
  struct symmGraphPeers* g = t->graphPeers;
  if (g == NULL) return;
  t->graphPeers = NULL;
  while (g->letters != NULL) {
    struct letter* next = g->letters->next;
    free(g->letters);
    g->letters = next;
  }
  pthread_cond_destroy(&g->arrived);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

void symmGraphPeersDeliver(struct symmTransport* t, const struct symmRegMsg* m) {
  struct symmGraphPeers* g = t->graphPeers;
  if (g == NULL) return;
  struct letter* l = malloc(sizeof(*l));
  if (l == NULL) {
    /* Its waiter would wait forever: the communicator fails instead (the waiter gives up). */
    WARN("graph zero copy: out of host memory for a peer's message");
    return;
  }
  l->msg = *m;
  memset(l->msg.auth, 0, sizeof(l->msg.auth));
  pthread_mutex_lock(&g->lock);
  l->next = g->letters;
  g->letters = l;
  pthread_cond_broadcast(&g->arrived);
  pthread_mutex_unlock(&g->lock);
}

/* ---- one exchange ------------------------------------------------------------------------------ */

/* Whether a wait of this rank must give up: the communicator is going away, was aborted or
 * revoked, or (`failed`, asked now and then) failed: a peer that failed never sends. */
static int giveUp(struct symmComm* comm, const struct symmTransport* t,
                  int (*failed)(struct symmComm*), int askFailed) {
  if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&t->flags.host[SYMM_HOST_ABORT], __ATOMIC_ACQUIRE))
    return 1;
  return askFailed && failed(comm);
}

/* Sends `m` to every peer; a full queue is retried (a lost message would leave a peer waiting). */
static int sendAll(struct symmComm* comm, struct symmTransport* t, int (*failed)(struct symmComm*),
                   struct symmRegMsg* m) {
  for (int q = 0; q < t->peers.nranks; q++) {
    if (q == t->peers.rank) continue;
    while (!symmUserRegSendTo(t, q, m)) {
      if (giveUp(comm, t, failed, 0)) return 0;
      struct timespec pause = {0, 20 * 1000};
      nanosleep(&pause, NULL);
    }
  }
  return 1;
}

/* Waits until every peer's message of (type, seq) is here and takes them into got[peer];
 * returns 0 when it gave up. Letters of earlier exchanges (left by a rank that gave up or said
 * no early) are dropped on the way. */
static int collect(struct symmComm* comm, struct symmTransport* t, int (*failed)(struct symmComm*),
                   uint32_t type, uint64_t seq, struct symmRegMsg* got) {
  struct symmGraphPeers* g = t->graphPeers;
  const int n = t->peers.nranks, me = t->peers.rank;
  uint32_t have = 0, want = ((1u << n) - 1u) & ~(1u << me);
  int rounds = 0;
  pthread_mutex_lock(&g->lock);
  for (;;) {
    for (struct letter** it = &g->letters; *it != NULL;) {
      struct letter* l = *it;
      const int mine = l->msg.type == type && l->msg.seq == seq;
      if (l->msg.seq < seq || mine) {
        if (mine && !(have >> l->msg.rank & 1u)) {
          got[l->msg.rank] = l->msg;
          have |= 1u << l->msg.rank;
        }
        *it = l->next;
        free(l);
      } else {
        it = &l->next;
      }
    }
    if (have == want) break;
    /* Every 1 ms: is the communicator still there; every 16 ms: has it failed. */
    pthread_mutex_unlock(&g->lock);
    if (giveUp(comm, t, failed, (++rounds & 15) == 0)) return 0;
    pthread_mutex_lock(&g->lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&g->arrived, &g->lock, &until);
  }
  pthread_mutex_unlock(&g->lock);
  return 1;
}

/* This rank's offer of [ptr, ptr+bytes): the legacy IPC handle of the cudaMalloc allocation
 * that holds the whole range. 0 for memory that has none (VMM, stream-ordered pools). */
static int describe(const void* ptr, size_t bytes, struct symmRegMsg* m) {
  CUdeviceptr base = 0;
  size_t allocBytes = 0;
  if (CU_CALL(SYMM_LOG_TRACE, cuMemGetAddressRange, (&base, &allocBytes, (CUdeviceptr)ptr)) !=
          CUDA_SUCCESS ||
      bytes > allocBytes || (uintptr_t)ptr - base > allocBytes - bytes)
    return 0;
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, (void*)base) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  memcpy(m->ipc, &h, sizeof(m->ipc));
  m->offset = (uintptr_t)ptr - base;
  m->allocBytes = allocBytes;
  return 1;
}

int symmTransportGraphPeersReady(const struct symmComm* comm) {
  const struct symmTransport* t = comm != NULL ? comm->transport : NULL;
  return t != NULL && t->graphPeers != NULL && symmParamGraphZeroCopy() != 0;
}

struct symmTransport* symmTransportGraphPeersBegin(struct symmComm* comm) {
  struct symmTransport* t = comm->transport;
  if (t == NULL || t->graphPeers == NULL) return NULL;
  __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
  return t;
}

int symmTransportGraphPeers(struct symmComm* comm, struct symmTransport* t, const void* ptr,
                            size_t bytes, int join, cudaGraph_t graph,
                            int (*failed)(struct symmComm*), void* peerPtrs[SYMM_MAX_RANKS]) {
  struct symmGraphPeers* g = t->graphPeers;
  const int n = t->peers.nranks, me = t->peers.rank;
  const uint64_t seq = __atomic_fetch_add(&g->nextSeq, 1, __ATOMIC_RELAXED);
  struct symmCudaThread saved;
  symmCudaThreadEnter(&saved); /* relaxed: IPC calls must not end the application's capture */
  (void)cudaSetDevice(t->cudaDev);
  struct symmRegMsg offer, got[SYMM_MAX_RANKS], dones[SYMM_MAX_RANKS], done;
  memset(&offer, 0, sizeof(offer));
  offer.type = SYMM_REGMSG_GRAPH_OFFER;
  offer.seq = seq;
  offer.ok = join && graph != NULL && describe(ptr, bytes, &offer);
  struct import* held[SYMM_MAX_RANKS] = {0};
  int agreed = 0;
  if (!sendAll(comm, t, failed, &offer) || !offer.ok) goto out; /* a no: nothing more to do */
  if (!collect(comm, t, failed, SYMM_REGMSG_GRAPH_OFFER, seq, got)) goto out;
  int all = 1;
  for (int q = 0; q < n; q++) all &= q == me || got[q].ok;
  if (!all) goto out; /* every rank saw the same no */
  /* Round 2: did every rank import every offer? */
  int imported = 1;
  for (int q = 0; q < n && imported; q++) {
    if (q == me) continue;
    held[q] = acquireImport(t->cudaDev, got[q].ipc);
    imported = held[q] != NULL && got[q].offset <= got[q].allocBytes &&
               bytes <= got[q].allocBytes - got[q].offset;
  }
  memset(&done, 0, sizeof(done));
  done.type = SYMM_REGMSG_GRAPH_DONE;
  done.seq = seq;
  done.ok = imported;
  if (!sendAll(comm, t, failed, &done) ||
      !collect(comm, t, failed, SYMM_REGMSG_GRAPH_DONE, seq, dones))
    goto out;
  agreed = imported;
  for (int q = 0; q < n; q++) agreed &= q == me || dones[q].ok;
  if (!agreed) goto out;
  /* The graph holds each import from now on; the reference this exchange took goes below. */
  for (int q = 0; q < n; q++) {
    if (q == me) {
      peerPtrs[q] = (void*)ptr;
    } else {
      peerPtrs[q] = (char*)held[q]->base + got[q].offset;
      if (agreed > 0 && symmGraphHold(graph, held[q], &held[q]->refs, releaseImport) != ncclSuccess) {
        /* The graph would outlive the mapping, and the peers already agreed: the caller fails
         * the communicator. */
        WARN("graph zero copy: cannot tie a peer's buffer to the captured graph");
        agreed = -1;
      }
    }
  }
out:
  for (int q = 0; q < n; q++)
    if (held[q] != NULL) releaseImport(held[q]);
  symmCudaThreadLeave(&saved);
  symmTransportRelease(t); /* Begin's reference */
  return agreed;
}
