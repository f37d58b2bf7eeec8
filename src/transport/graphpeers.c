/* SPDX-License-Identifier: Apache-2.0 */
/* Zero copy for plain (unregistered) buffers in captured graphs. A captured all-gather (and a
 * large all-reduce) writes its peers' outputs, a captured reduce-scatter reads its peers'
 * inputs, in place, as with
 * symmetric windows: at capture each rank offers its buffer's allocation to every peer over the
 * registration channel (a legacy CUDA IPC handle for cudaMalloc memory, a POSIX fd for our
 * ncclMemAlloc memory), imports theirs, and the ranks agree; the graph holds the imports.
 * Every rank takes part in the same captured calls in the same order (NCCL's rule for a
 * communicator's calls), so the call's number `seq` names the exchange on every rank. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "cudart.h"
#include "internal.h"
#include "param.h"
#include "regchan.h"
#include "transport.h"
#include "vmm.h"

/* Legacy CUDA IPC (cudaMalloc memory, mode 2) is opt-in: CUDA leaves it undefined when the owner
 * frees an allocation a peer process still has open, and an owner frees on its own schedule. A
 * peer's import of ncclMemAlloc memory holds the physical allocation (VMM), so its owner may free
 * it whenever it likes. */
SYMMCOLL_PARAM_FULL(GraphZeroCopy, "GRAPH_ZERO_COPY", 1, 0, 2, SYMM_PARAM_AGREED,
                    "captured all-gathers, reduce-scatters and large all-reduces on plain buffers "
                    "write and read the peers' buffers in place from the zero-copy minimum (all-"
                    "reduce: the write-outputs minimum) on, where every rank is "
                    "its own process: 1 = ncclMemAlloc buffers, 2 = cudaMalloc buffers too "
                    "(legacy CUDA IPC: free one only after every rank destroyed the graphs that "
                    "use it and its communicators), 0 = through staging")

/* ---- imports, process-wide ----------------------------------------------------------------
 * One import per (device, allocation): CUDA maps an IPC handle once per process, and an
 * ncclMemAlloc allocation is named by its owner's pid and id. An import is held by the graphs
 * that use it (cudaUserObject); one no graph holds any more is closed at the next exchange or
 * when a communicator's transport is freed (CUDA's callback thread may not call CUDA), or stays
 * until the process ends. */
struct import {
  int dev;
  uint32_t kind;                          /* SYMM_GRAPH_MEM_* */
  uint8_t handle[SYMM_REGCHAN_IPC_BYTES]; /* IPC */
  int32_t pid;                            /* VMM: the owner's process and id (0: not cached) */
  uint64_t allocId;
  CUmemGenericAllocationHandle vmm;       /* VMM: what was imported and mapped */
  size_t bytes;
  void* base;
  int refs; /* atomic: graphs holding it, and an exchange between finding and holding it */
  struct import* next;
};
static pthread_mutex_t importLock = PTHREAD_MUTEX_INITIALIZER;
static struct import* imports;

static void closeImport(struct import* im) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  if (cudaSetDevice(im->dev) != cudaSuccess) (void)cudaGetLastError();
  if (im->kind == SYMM_GRAPH_MEM_IPC) {
    if (cudaIpcCloseMemHandle(im->base) != cudaSuccess) {
      (void)cudaGetLastError();
      INFO(SYMM_TRANSPORT, "graph zero copy: closing an import on device %d failed", im->dev);
    }
  } else {
    symmVmmUnmap((CUdeviceptr)im->base, im->bytes);
    (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (im->vmm));
  }
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  free(im);
}

static void closeUnheld(void) {
  struct import** it = &imports;
  while (*it != NULL) {
    struct import* im = *it;
    if (__atomic_load_n(&im->refs, __ATOMIC_ACQUIRE) > 0) {
      it = &im->next;
      continue;
    }
    *it = im->next;
    closeImport(im);
  }
}

static int sameImport(const struct import* im, int dev, const struct symmRegMsg* offer,
                      int32_t pid) {
  if (im->dev != dev || im->kind != offer->memKind) return 0;
  if (im->kind == SYMM_GRAPH_MEM_IPC)
    return memcmp(im->handle, offer->ipc, sizeof(im->handle)) == 0;
  return im->allocId != 0 && im->pid == pid && im->allocId == offer->allocId;
}

/* Opens `offer` (from process `pid`; `fd` its descriptor for VMM, always closed here). */
static int openImport(struct import* im, int dev, const struct symmRegMsg* offer, int fd) {
  if (offer->memKind == SYMM_GRAPH_MEM_IPC) {
    if (fd >= 0) close(fd);
    cudaIpcMemHandle_t h;
    memcpy(&h, offer->ipc, sizeof(h));
    if (cudaIpcOpenMemHandle(&im->base, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) return 1;
    INFO(SYMM_TRANSPORT, "graph zero copy: cannot open a peer's buffer on device %d: %s", dev,
         cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  if (offer->memKind != SYMM_GRAPH_MEM_VMM || fd < 0) return 0;
  CUdeviceptr base = 0;
  const int ok = symmVmmImportFd(fd, &im->vmm) == ncclSuccess;
  close(fd);
  if (!ok) return 0;
  if (symmVmmMap(im->vmm, (size_t)offer->allocBytes, dev, &base) != ncclSuccess) {
    (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (im->vmm));
    return 0;
  }
  im->base = (void*)base;
  im->bytes = (size_t)offer->allocBytes;
  return 1;
}

/* The peer allocation `offer` names, mapped on `dev`, with one reference taken; NULL when it
 * cannot be opened. `fd` (VMM) is always consumed. */
static struct import* acquireImport(int dev, const struct symmRegMsg* offer, int fd, int32_t pid) {
  pthread_mutex_lock(&importLock);
  closeUnheld();
  struct import* im = imports;
  while (im != NULL && !sameImport(im, dev, offer, pid)) im = im->next;
  if (im != NULL) {
    if (fd >= 0) close(fd);
  } else if ((im = calloc(1, sizeof(*im))) == NULL) {
    if (fd >= 0) close(fd);
  } else if (!openImport(im, dev, offer, fd)) {
    free(im);
    im = NULL;
  } else {
    im->dev = dev;
    im->kind = offer->memKind;
    memcpy(im->handle, offer->ipc, sizeof(im->handle));
    im->pid = pid;
    im->allocId = offer->memKind == SYMM_GRAPH_MEM_VMM ? offer->allocId : 0;
    im->next = imports;
    imports = im;
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
  int fd; /* a VMM offer's descriptor, or -1 */
  struct letter* next;
};

struct symmGraphPeers {
  pthread_mutex_t lock;
  pthread_cond_t arrived;
  struct letter* letters;
  uint64_t nextSeq; /* the number of this rank's next captured exchange */
};

static void dropLetter(struct letter* l) {
  if (l->fd >= 0) close(l->fd);
  free(l);
}

static void deliver(struct symmTransport* t, const struct symmRegMsg* m, int fd);

ncclResult_t symmGraphPeersCreate(struct symmTransport* t) {
  struct symmGraphPeers* g = calloc(1, sizeof(*g));
  if (g == NULL) {
    WARN("graph zero copy: out of host memory");
    return ncclSystemError;
  }
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->arrived, NULL);
  t->graphPeers = g;
  t->graphMail = deliver;
  return ncclSuccess;
}

void symmGraphPeersFree(struct symmTransport* t) {
  struct symmGraphPeers* g = t->graphPeers;
  if (g == NULL) return;
  t->graphPeers = NULL;
  t->graphMail = NULL;
  while (g->letters != NULL) {
    struct letter* next = g->letters->next;
    dropLetter(g->letters);
    g->letters = next;
  }
  pthread_cond_destroy(&g->arrived);
  pthread_mutex_destroy(&g->lock);
  free(g);
  /* Imports no graph holds any more (of any communicator) go now rather than at a later
   * exchange that may never come: their owners may free them once the communicators are gone. */
  pthread_mutex_lock(&importLock);
  closeUnheld();
  pthread_mutex_unlock(&importLock);
}

/* t->graphMail: the receiver thread's delivery; takes `fd` (kept with the letter, closed when
 * it is dropped). */
static void deliver(struct symmTransport* t, const struct symmRegMsg* m, int fd) {
  struct symmGraphPeers* g = t->graphPeers;
  struct letter* l = g != NULL ? malloc(sizeof(*l)) : NULL;
  if (l == NULL) {
    /* Its waiter waits until the communicator is aborted: as with a lost peer. */
    if (g != NULL) WARN("graph zero copy: out of host memory for a peer's message");
    if (fd >= 0) close(fd);
    return;
  }
  l->msg = *m;
  l->fd = fd;
  memset(l->msg.auth, 0, sizeof(l->msg.auth));
  pthread_mutex_lock(&g->lock);
  l->next = g->letters;
  g->letters = l;
  pthread_cond_broadcast(&g->arrived);
  pthread_mutex_unlock(&g->lock);
}

/* ---- one exchange -------------------------------------------------------------------------- */

/* Drops the letters of exchanges before `seq`, closing their descriptors. collect() does it too,
 * but a rank that says no never collects: without this, every captured call on plain buffers
 * (every rank says no) would leave a letter per peer, and a VMM offer's descriptor, for good. */
static void dropEarlier(struct symmGraphPeers* g, uint64_t seq) {
  pthread_mutex_lock(&g->lock);
  for (struct letter** it = &g->letters; *it != NULL;) {
    struct letter* l = *it;
    if (l->msg.seq < seq) {
      *it = l->next;
      dropLetter(l);
    } else {
      it = &l->next;
    }
  }
  pthread_mutex_unlock(&g->lock);
}

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

/* Sends `m` (with `fd` when >= 0) to every peer; a full queue is retried (a lost message would
 * leave a peer waiting). */
static int sendAll(struct symmComm* comm, struct symmTransport* t, int (*failed)(struct symmComm*),
                   struct symmRegMsg* m, int fd) {
  for (int q = 0; q < t->peers.nranks; q++) {
    if (q == t->peers.rank) continue;
    while (!symmUserRegSendTo(t, q, m, fd)) {
      if (giveUp(comm, t, failed, 0)) return 0;
      struct timespec pause = {0, 20 * 1000};
      nanosleep(&pause, NULL);
    }
  }
  return 1;
}

/* Waits until every peer's message of (type, seq) is here and takes them: got[peer], fds[peer]
 * (the caller's to close; -1 without). 0 when it gave up. Letters of earlier exchanges (left by
 * a rank that gave up or said no early) are dropped on the way. */
static int collect(struct symmComm* comm, struct symmTransport* t, int (*failed)(struct symmComm*),
                   uint32_t type, uint64_t seq, struct symmRegMsg* got, int* fds) {
  struct symmGraphPeers* g = t->graphPeers;
  const int n = t->peers.nranks, me = t->peers.rank;
  uint32_t have = 0;
  const uint32_t want = ((1u << n) - 1u) & ~(1u << me);
  int rounds = 0;
  for (int q = 0; q < n; q++) fds[q] = -1;
  pthread_mutex_lock(&g->lock);
  for (;;) {
    for (struct letter** it = &g->letters; *it != NULL;) {
      struct letter* l = *it;
      const int mine = l->msg.type == type && l->msg.seq == seq && !(have >> l->msg.rank & 1u);
      if (mine) {
        got[l->msg.rank] = l->msg;
        fds[l->msg.rank] = l->fd;
        l->fd = -1;
        have |= 1u << l->msg.rank;
      }
      if (mine || l->msg.seq < seq) {
        *it = l->next;
        dropLetter(l);
      } else {
        it = &l->next;
      }
    }
    if (have == want) break;
    /* Every 1 ms: is the communicator still there; every 16 ms: has it failed. */
    pthread_mutex_unlock(&g->lock);
    if (giveUp(comm, t, failed, (++rounds & 15) == 0)) {
      for (int q = 0; q < n; q++)
        if (fds[q] >= 0) close(fds[q]);
      return 0;
    }
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

/* This rank's offer of [ptr, ptr+bytes): an ncclMemAlloc allocation of ours (its fd, *fd), else
 * in mode 2 the legacy IPC handle of the cudaMalloc allocation that holds the whole range. 0 for
 * memory that has neither (other VMM memory, stream-ordered pools, cudaMalloc in mode 1). */
static int describe(const void* ptr, size_t bytes, struct symmRegMsg* m, int* fd) {
  uintptr_t base = 0;
  size_t allocBytes = 0;
  uint64_t id = 0;
  if (symmTransportMemAllocExport(ptr, bytes, &id, &base, &allocBytes, fd)) {
    m->memKind = SYMM_GRAPH_MEM_VMM;
    m->allocId = id;
  } else {
    if (symmParamGraphZeroCopy() < 2) return 0;
    CUdeviceptr start = 0;
    if (CU_CALL(SYMM_LOG_TRACE, cuMemGetAddressRange, (&start, &allocBytes, (CUdeviceptr)ptr)) !=
        CUDA_SUCCESS)
      return 0;
    base = start;
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, (void*)base) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    memcpy(m->ipc, &h, sizeof(m->ipc));
    m->memKind = SYMM_GRAPH_MEM_IPC;
  }
  if (bytes > allocBytes || (uintptr_t)ptr - base > allocBytes - bytes) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return 0;
  }
  m->offset = (uintptr_t)ptr - base;
  m->allocBytes = allocBytes;
  return 1;
}

int symmTransportGraphPeersReady(const struct symmComm* comm) {
  const struct symmTransport* t = comm != NULL ? comm->transport : NULL;
  return t != NULL && t->graphPeers != NULL && symmParamGraphZeroCopy() != 0;
}

int symmTransportGraphPeers(struct symmComm* comm, struct symmTransport* t, const void* ptr,
                            size_t bytes, int join, cudaGraph_t graph,
                            int (*failed)(struct symmComm*), void* peerPtrs[SYMM_MAX_RANKS]) {
  struct symmGraphPeers* g = t->graphPeers;
  if (g == NULL) return 0; /* never agreed: no rank exchanges */
  const int n = t->peers.nranks, me = t->peers.rank;
  const uint64_t seq = __atomic_fetch_add(&g->nextSeq, 1, __ATOMIC_RELAXED);
  dropEarlier(g, seq);
  struct symmCudaThread saved;
  symmCudaThreadEnter(&saved); /* relaxed: these calls must not end the application's capture */
  (void)cudaSetDevice(t->cudaDev);
  struct symmRegMsg offer, offers[SYMM_MAX_RANKS], dones[SYMM_MAX_RANKS], done;
  int fds[SYMM_MAX_RANKS], doneFds[SYMM_MAX_RANKS], myFd = -1;
  memset(&offer, 0, sizeof(offer));
  offer.type = SYMM_REGMSG_GRAPH_OFFER;
  offer.seq = seq;
  offer.ok = join && graph != NULL && describe(ptr, bytes, &offer, &myFd);
  struct import* held[SYMM_MAX_RANKS] = {0};
  int agreed = 0, all = 1, imported = 1;
  const int sent = sendAll(comm, t, failed, &offer, myFd);
  if (myFd >= 0) close(myFd); /* each peer got its own copy */
  if (!sent || !offer.ok) goto out; /* a no: nothing more to do */
  if (!collect(comm, t, failed, SYMM_REGMSG_GRAPH_OFFER, seq, offers, fds)) goto out;
  for (int q = 0; q < n; q++) all &= q == me || offers[q].ok;
  /* Round 2 (only when every rank offered, as every rank then sees): did each import them all? */
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    const struct symmRegMsg* o = &offers[q];
    const int usable = all && imported && o->allocBytes < (1ull << 48) &&
                       o->offset <= o->allocBytes && bytes <= o->allocBytes - o->offset;
    if (!usable) {
      if (fds[q] >= 0) close(fds[q]);
      imported = 0;
      continue;
    }
    held[q] = acquireImport(t->cudaDev, o, fds[q], t->pids[q]);
    imported = held[q] != NULL;
  }
  if (!all) goto out;
  memset(&done, 0, sizeof(done));
  done.type = SYMM_REGMSG_GRAPH_DONE;
  done.seq = seq;
  done.ok = imported;
  if (!sendAll(comm, t, failed, &done, -1) ||
      !collect(comm, t, failed, SYMM_REGMSG_GRAPH_DONE, seq, dones, doneFds))
    goto out;
  agreed = imported;
  for (int q = 0; q < n; q++) agreed &= q == me || dones[q].ok;
  if (!agreed) goto out;
  /* The graph holds each import from now on; the reference this exchange took goes below. */
  for (int q = 0; q < n; q++) {
    if (q == me) {
      peerPtrs[q] = (void*)ptr;
      continue;
    }
    peerPtrs[q] = (char*)held[q]->base + offers[q].offset;
    if (agreed > 0 && symmGraphHold(graph, held[q], &held[q]->refs, releaseImport) != ncclSuccess) {
      /* The graph would outlive the mapping, and the peers already agreed: the caller fails
       * the communicator. */
      WARN("graph zero copy: cannot tie a peer's buffer to the captured graph");
      agreed = -1;
    }
  }
out:
  for (int q = 0; q < n; q++)
    if (held[q] != NULL) releaseImport(held[q]);
  symmCudaThreadLeave(&saved);
  return agreed;
}
