/* SPDX-License-Identifier: Apache-2.0 */
/* A transport's life after setup: the launch gate, failure words and flags, teardown that waits
 * for (or outlives) every kernel of ours, and the pinned words it needs. */
#define _GNU_SOURCE
#include "transport.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "cudart.h"
#include "internal.h"
#include "multicast.h"
#include "order.h"

/* ---- pinned host words: a process-wide pool, never returned to CUDA ----------------------- */

#define SLOTS_PER_PAGE 64
struct slotPage {
  char* host;
  char* dev;
  uint64_t freeMask; /* bit s: slot s is free */
  struct slotPage* next;
};
static pthread_mutex_t slotLock = PTHREAD_MUTEX_INITIALIZER;
static struct slotPage* slotPages;

ncclResult_t symmHostSlotAlloc(struct symmHostSlot* slot) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&slotLock);
  struct slotPage* p = slotPages;
  while (p != NULL && p->freeMask == 0) p = p->next;
  if (p == NULL) {
    p = calloc(1, sizeof(*p));
    void* dev = NULL;
    if (p == NULL ||
        cudaHostAlloc((void**)&p->host, SLOTS_PER_PAGE * SYMM_HOST_SLOT_BYTES,
                      cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
        cudaHostGetDevicePointer(&dev, p->host, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("symmetric memory: cannot allocate pinned host flags");
      if (p != NULL && p->host != NULL) (void)cudaFreeHost(p->host);
      free(p);
      res = ncclUnhandledCudaError;
      goto unlock;
    }
    p->dev = dev;
    p->freeMask = ~0ull;
    p->next = slotPages;
    slotPages = p;
  }
  const int s = __builtin_ctzll(p->freeMask);
  p->freeMask &= ~(1ull << s);
  slot->host = (uint32_t*)(p->host + (size_t)s * SYMM_HOST_SLOT_BYTES);
  slot->dev = p->dev + (size_t)s * SYMM_HOST_SLOT_BYTES;
  memset(slot->host, 0, SYMM_HOST_SLOT_BYTES);
unlock:
  pthread_mutex_unlock(&slotLock);
  return res;
}

void symmHostSlotFree(struct symmHostSlot* slot) {
  if (slot->host == NULL) return;
  pthread_mutex_lock(&slotLock);
  for (struct slotPage* p = slotPages; p != NULL; p = p->next) {
    const char* h = (const char*)slot->host;
    if (h >= p->host && h < p->host + SLOTS_PER_PAGE * SYMM_HOST_SLOT_BYTES) {
      p->freeMask |= 1ull << ((size_t)(h - p->host) / SYMM_HOST_SLOT_BYTES);
      break;
    }
  }
  pthread_mutex_unlock(&slotLock);
  slot->host = NULL;
  slot->dev = NULL;
}

/* ---- freeing --------------------------------------------------------------------------------- */

void symmMulticastDrop(struct symmTransport* t) {
  if (!t->mcCreated) return;
  symmMulticastRelease(t->mcHandle, t->mcBytes, t->cudaDev, t->mcBound, t->mcBase);
  t->mcCreated = t->mcBound = 0;
  t->mcBase = 0;
  t->peers.multicastBuffer = NULL;
}


void symmTransportFree(struct symmTransport* t) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  /* First: its thread writes into localState and maps peers' regions. */
  symmUserRegTeardown(t);
  symmGraphPeersFree(t); /* after the thread that delivers into it */
  symmWindowsTeardown(t);
  symmMulticastDrop(t);
  for (int r = SYMM_MAX_RANKS - 1; r >= 0; r--) {
    symmRegistryRelease(t->maps[r]);
    t->maps[r] = NULL;
  }
  if (t->localState != NULL) (void)cudaFreeAsync(t->localState, t->ctl);
  if (t->ctl != NULL) {
    /* The slot may hold a read-back in flight: back to the pool only once the stream is idle. */
    (void)cudaStreamSynchronize(t->ctl);
    (void)cudaStreamDestroy(t->ctl);
  }
  if (t->readback != NULL) (void)cudaEventDestroy(t->readback);
  /* Only eager calls use them (captured ones add a graph node instead); eager work still queued
   * on the side stream finishes before CUDA frees it. */
  if (t->side.stream != NULL) (void)cudaStreamDestroy(t->side.stream);
  if (t->side.fork != NULL) (void)cudaEventDestroy(t->side.fork);
  if (t->side.join != NULL) (void)cudaEventDestroy(t->side.join);
  if (t->released != NULL) (void)cudaEventDestroy(t->released);
  for (int i = 0; i < t->orderEventCount; i++) (void)cudaEventDestroy(t->orderEvents[i]);
  symmHostSlotFree(&t->flags);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&t->lock);
  memset(t->secret, 0, sizeof(t->secret));
  free(t);
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
}

/* Starts a detached thread running body(NULL); 1 when it runs. */
static int startDetached(void* (*body)(void*)) {
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int started = pthread_create(&thread, &attr, body, NULL) == 0;
  pthread_attr_destroy(&attr);
  return started;
}

/* CUDA releases a graph's reference from its own callback thread, where no CUDA call may be
 * made: the last reference is freed by a reaper thread instead. */
static pthread_mutex_t reapLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reapCond = PTHREAD_COND_INITIALIZER;
struct reapItem {
  struct symmTransport* t;
  struct reapItem* next;
};
static struct reapItem* reapQueue;
static int reaperStarted;

static void* reaperMain(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&reapLock);
    while (reapQueue == NULL) pthread_cond_wait(&reapCond, &reapLock);
    struct reapItem* item = reapQueue;
    reapQueue = item->next;
    pthread_mutex_unlock(&reapLock);
    symmTransportFree(item->t);
    free(item);
  }
  return NULL;
}

static void releaseTransport(struct symmTransport* t, int fromCallback) {
  if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (!fromCallback) {
    symmTransportFree(t);
    return;
  }
  struct reapItem* item = malloc(sizeof(*item));
  if (item == NULL) return; /* leaked: no memory to queue it */
  item->t = t;
  pthread_mutex_lock(&reapLock);
  if (!reaperStarted) reaperStarted = startDetached(reaperMain);
  item->next = reapQueue;
  reapQueue = item;
  pthread_cond_signal(&reapCond);
  pthread_mutex_unlock(&reapLock);
}

static void graphReleased(void* arg) { releaseTransport(arg, 1); }

struct symmTransport* symmTransportHold(struct symmComm* comm) {
  struct symmTransport* t = comm->transport;
  if (t != NULL) __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
  return t;
}

void symmTransportDrop(struct symmTransport* t) {
  if (t != NULL) releaseTransport(t, 0);
}


ncclResult_t symmTransportRetainForGraph(struct symmComm* comm, cudaGraph_t graph) {
  struct symmTransport* t = comm->transport;
  if (t == NULL || graph == NULL) return ncclInternalError;
  const ncclResult_t res = symmGraphHold(graph, t, &t->refs, graphReleased);
  if (res != ncclSuccess) WARN("cannot tie the communicator's memory to a captured CUDA graph");
  return res;
}

/* ---- teardown ----------------------------------------------------------------------------- */

/* Stream waits of copy-engine all-gathers cannot watch the abort flag: once our communicator is
 * aborted they are released by writing 1 into every copy-engine word of our own pad from the
 * private stream, one release at a time (a barrier consumes one), for as long as work of ours
 * that may wait is queued. Issues one release unless the previous one has not run yet. */
static void releaseCopyEngineWaits(struct symmTransport* t) {
  if (!t->staged) return;
  if (t->released != NULL) {
    const cudaError_t e = cudaEventQuery(t->released);
    if (e == cudaErrorNotReady) return;
    if (e != cudaSuccess) (void)cudaGetLastError();
  } else if (cudaEventCreateWithFlags(&t->released, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    t->released = NULL;
  }
  if (t->releaseWaits != NULL) t->releaseWaits(&t->peers, t->ctl);
  if (t->released != NULL && cudaEventRecord(t->released, t->ctl) != cudaSuccess)
    (void)cudaGetLastError();
}

enum quiet { QUIET = 0, BUSY = 1, UNKNOWN = 2 };

/* Whether every operation of ours (eager, or a replay of a graph holding one) has completed. */
static enum quiet quietNow(const struct symmTransport* t) {
  if (t->quiesce == NULL) return QUIET;
  const cudaError_t e = cudaEventQuery(t->quiesce);
  if (e == cudaSuccess) return QUIET;
  if (e == cudaErrorNotReady) return BUSY;
  (void)cudaGetLastError();
  return UNKNOWN;
}

/* The releaser: one process-wide thread that keeps releasing the copy-engine waits of aborted
 * communicators whose work had not drained when their teardown returned, or whose graphs may
 * still be replayed, and frees each transport once its last operation has completed and no
 * graph holds it (never memory under running work). */
struct releaseItem {
  struct symmTransport* t; /* the communicator's reference, handed over */
  struct releaseItem* next;
};
static pthread_mutex_t releaseLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t releaseCond = PTHREAD_COND_INITIALIZER;
static struct releaseItem* releasing;
static int releaserStarted;

/* One pass over a handed-over transport: 1 when it is done with (freed, or leaked). */
static int releaseStep(struct symmTransport* t, int* busy) {
  (void)cudaSetDevice(t->cudaDev);
  /* References first: with none but ours, no graph can launch anything any more, and a graph's
   * reference goes only after its pending replays completed. */
  const int graphs = __atomic_load_n(&t->refs, __ATOMIC_ACQUIRE) > 1;
  const enum quiet q = quietNow(t);
  if (q == UNKNOWN) {
    WARN("symmetric memory: cannot tell whether work on device %d finished; leaking its memory "
         "rather than unmapping it under it", t->cudaDev);
    return 1;
  }
  if (q == QUIET && !graphs) {
    releaseTransport(t, 0);
    return 1;
  }
  if (q == BUSY) {
    *busy = 1;
    releaseCopyEngineWaits(t);
  }
  return 0;
}

static void* releaserMain(void* arg) {
  (void)arg;
  /* Its CUDA work is on private streams: never part of, or breaking, another thread's capture. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  for (;;) {
    pthread_mutex_lock(&releaseLock);
    while (releasing == NULL) pthread_cond_wait(&releaseCond, &releaseLock);
    struct releaseItem* list = releasing;
    releasing = NULL;
    pthread_mutex_unlock(&releaseLock);
    int busy = 0;
    struct releaseItem* keep = NULL;
    while (list != NULL) {
      struct releaseItem* item = list;
      list = item->next;
      if (releaseStep(item->t, &busy)) {
        free(item);
      } else {
        item->next = keep;
        keep = item;
      }
    }
    pthread_mutex_lock(&releaseLock);
    while (keep != NULL) {
      struct releaseItem* item = keep;
      keep = item->next;
      item->next = releasing;
      releasing = item;
    }
    pthread_mutex_unlock(&releaseLock);
    /* Queued work: release as fast as barriers consume releases; else only watch for replays. */
    struct timespec pause = {0, busy ? 20 * 1000 : 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  return NULL;
}

/* Hands the communicator's reference on `t` to the releaser; 0 if it could not start. */
static int handToReleaser(struct symmTransport* t) {
  struct releaseItem* item = malloc(sizeof(*item));
  if (item == NULL) return 0;
  item->t = t;
  pthread_mutex_lock(&releaseLock);
  if (!releaserStarted) releaserStarted = startDetached(releaserMain);
  const int ok = releaserStarted;
  if (ok) {
    item->next = releasing;
    releasing = item;
    pthread_cond_signal(&releaseCond);
  }
  pthread_mutex_unlock(&releaseLock);
  if (!ok) free(item);
  return ok;
}

/* Waits for every operation of ours issued on the communicator; on abort at most 2 s: our
 * kernels exit on the abort flag, and copy-engine waits are released meanwhile. */
static enum quiet drained(struct symmTransport* t, int abort) {
  if (t->quiesce == NULL) return QUIET;
  if (!abort) {
    if (cudaEventSynchronize(t->quiesce) == cudaSuccess) return QUIET;
    (void)cudaGetLastError();
    return UNKNOWN;
  }
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    const enum quiet q = quietNow(t);
    if (q != BUSY) return q;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >= 2000)
      return BUSY;
    releaseCopyEngineWaits(t);
    struct timespec pause = {0, 20 * 1000};
    nanosleep(&pause, NULL);
  }
}

struct symmTransport* symmTransportSwap(struct symmComm* comm, struct symmTransport* t) {
  pthread_mutex_lock(&comm->transportLock);
  struct symmTransport* old = comm->transport;
  comm->transport = t;
  pthread_mutex_unlock(&comm->transportLock);
  return old;
}

void symmTransportTeardown(struct symmComm* comm, int abort) {
  if (comm == NULL) return;
  /* A thread building staging stops at its next wait once `gone` is up (no kernel of ours runs
   * before staging exists); a launch being issued finishes under the lock. Then the abort flag
   * goes up before anything waits, so that our kernels in flight exit. */
  while (__atomic_load_n(&comm->stagingBusy, __ATOMIC_ACQUIRE)) {
    struct timespec pause = {0, 100 * 1000};
    nanosleep(&pause, NULL);
  }
  pthread_mutex_lock(&comm->launchLock);
  struct symmTransport* t = symmTransportSwap(comm, NULL);
  if (t != NULL) {
    if (abort) __atomic_store_n(&t->flags.host[SYMM_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
    /* Revoked, or aborted by a shrink: our work may wait for peers that are gone. */
    abort = abort || __atomic_load_n(&t->flags.host[SYMM_HOST_ABORT], __ATOMIC_SEQ_CST) != 0;
    t->orderEventCount = symmOrderHandOver(&comm->order, &t->quiesce, t->orderEvents);
  }
  pthread_mutex_unlock(&comm->launchLock);
  if (t == NULL) return;
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  const enum quiet q = drained(t, abort);
  /* Graphs still holding it keep the memory; a replay after the communicator is gone (an abort;
   * otherwise the application's error, as with NCCL) must not wait for peers forever: its
   * kernels see the abort flag, its copy-engine waits are released by the releaser. */
  const int graphs = __atomic_load_n(&t->refs, __ATOMIC_ACQUIRE) > 1;
  if (graphs) __atomic_store_n(&t->flags.host[SYMM_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
  if (q == QUIET && !graphs) {
    releaseTransport(t, 0);
  } else if (q != UNKNOWN && t->staged && handToReleaser(t)) {
    if (q == BUSY)
      INFO(SYMM_INIT, "comm %p: work of ours still queued on device %d 2 s after the abort; it "
           "is released in the background and the memory freed once it has drained",
           (void*)comm->real, t->cudaDev);
  } else if (q == QUIET) {
    releaseTransport(t, 0); /* graphs hold no copy-engine waits without staging */
  } else {
    WARN("symmetric memory: kernels on device %d did not finish; leaking their memory rather than "
         "unmapping it under them", t->cudaDev);
  }
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
}

/* ---- launches, flags, failure words ------------------------------------------------------- */

const struct symmPeers* symmTransportLaunchPeers(const struct symmComm* comm) {
  const struct symmTransport* t = comm->transport;
  if (t == NULL || !t->staged || __atomic_load_n(&t->flags.host[SYMM_HOST_ABORT], __ATOMIC_ACQUIRE))
    return NULL;
  return &t->peers;
}

int symmTransportOrdersForwarded(const struct symmComm* comm, int captured) {
  const struct symmTransport* t = comm->transport;
  return t != NULL && (t->staged || captured) &&
         !__atomic_load_n(&t->flags.host[SYMM_HOST_ABORT], __ATOMIC_ACQUIRE);
}

struct symmSideStream symmTransportSideStream(const struct symmComm* comm) {
  return comm->transport->side;
}

const struct symmPeers* symmTransportPeers(const struct symmComm* comm) {
  return comm && comm->transport && comm->transport->staged ? &comm->transport->peers : NULL;
}

const struct symmPeers* symmTransportBeginLaunch(struct symmComm* comm) {
  if (comm == NULL) return NULL;
  pthread_mutex_lock(&comm->launchLock);
  const struct symmPeers* peers = symmTransportLaunchPeers(comm);
  if (peers == NULL) pthread_mutex_unlock(&comm->launchLock);
  return peers;
}

void symmTransportEndLaunch(struct symmComm* comm) { pthread_mutex_unlock(&comm->launchLock); }

uint32_t symmTransportKernelErrors(const struct symmComm* comm) {
  const struct symmTransport* t = comm->transport;
  return t != NULL ? __atomic_load_n(&t->flags.host[SYMM_HOST_ERROR], __ATOMIC_ACQUIRE) : 0u;
}

void symmTransportTellPeers(struct symmComm* comm, uint32_t bits) {
  struct symmTransport* t = comm->transport;
  if (t == NULL || !t->staged) return;
  uint64_t* value = (uint64_t*)t->flags.host + SYMM_HOST_FAIL_VALUE;
  __atomic_store_n(value, (uint64_t)bits, __ATOMIC_RELEASE);
  /* From a thread that may be capturing: private-stream work must not break its capture. */
  struct symmCudaThread saved;
  symmCudaThreadEnter(&saved);
  (void)cudaSetDevice(t->cudaDev);
  /* A plain store beside the kernels' atomicOr: the word only has to become non-zero. */
  for (int r = 0; r < t->peers.nranks; r++)
    if (cudaMemcpyAsync(t->peers.signals[r] + SYMM_PAD_FAIL_WORD, value, sizeof(*value),
                        cudaMemcpyHostToDevice, t->ctl) != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("symmetric memory: cannot write the failure word of rank %d", r);
    }
  symmCudaThreadLeave(&saved);
}

void symmTransportInjectKernelError(struct symmComm* comm, uint32_t bits, cudaStream_t stream) {
  struct symmTransport* t = comm->transport;
  if (t == NULL || !t->staged) return;
  __atomic_or_fetch(&t->flags.host[SYMM_HOST_ERROR], bits, __ATOMIC_SEQ_CST);
  /* The gave-up word, in the call's stream order as a kernel's giveUp would write it: kernels of
   * ours queued after this call leave before they store anything (the injected call consumed no
   * epoch, so they would reuse the one the peers' kernels of this call signal). Its low half
   * (little endian): the word was 0 or already a reason, either way it becomes non-zero. */
  const CUdeviceptr gaveUp = (CUdeviceptr)(t->peers.localState + SYMM_STATE_GAVE_UP);
  (void)CU_CALL(SYMM_LOG_WARN, cuStreamWriteValue32, ((CUstream)stream, gaveUp, bits, 0));
  symmTransportTellPeers(comm, bits);
}

uint32_t symmTransportPollPadFailure(struct symmComm* comm) {
  struct symmTransport* t = comm->transport;
  if (t == NULL || !t->staged) return 0;
  const uint64_t* got = (const uint64_t*)t->flags.host + SYMM_HOST_READBACK;
  /* Polled from watchdog threads, maybe while another thread captures in global mode. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  uint32_t seen = 0;
  int issue = 1;
  if (t->readbackPending) {
    const cudaError_t e = cudaEventQuery(t->readback);
    if (e == cudaErrorNotReady) {
      issue = 0;
    } else {
      (void)cudaGetLastError();
      t->readbackPending = 0;
      seen = (uint32_t)__atomic_load_n(got, __ATOMIC_ACQUIRE);
    }
  }
  if (issue && seen == 0) {
    int prevDev = -1;
    (void)cudaGetDevice(&prevDev);
    (void)cudaSetDevice(t->cudaDev);
    if (cudaMemcpyAsync((void*)got, t->peers.signals[t->peers.rank] + SYMM_PAD_FAIL_WORD,
                        sizeof(uint64_t), cudaMemcpyDeviceToHost, t->ctl) == cudaSuccess &&
        cudaEventRecord(t->readback, t->ctl) == cudaSuccess)
      t->readbackPending = 1;
    (void)cudaGetLastError();
    if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  }
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return seen;
}

void symmTransportSetAbort(struct symmComm* comm) {
  if (comm == NULL) return;
  /* Before the flag, and sequentially consistent: see enterReal in exchange.c. */
  __atomic_store_n(&comm->aborting, 1, __ATOMIC_SEQ_CST);
  /* Not launchLock: a launch may hold it, blocked behind our kernels that only this flag ends. */
  pthread_mutex_lock(&comm->transportLock);
  struct symmTransport* t = comm->transport;
  if (t != NULL) __atomic_store_n(&t->flags.host[SYMM_HOST_ABORT], 1u, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&comm->transportLock);
}

/* ---- queries ----------------------------------------------------------------------------- */

int symmTransportMulticastReady(const struct symmComm* comm) {
  /* A multicast mapping exists only where every rank agreed at setup and every rank mapped it
   * (staging's agreements); the environment is not read again here, so that a variable changed
   * later on one rank never makes it decide alone (the guard refuses new objects, agreed too). */
  return comm != NULL && comm->transport != NULL && comm->transport->peers.multicastBuffer != NULL;
}

long symmTransportMulticastAttempts(void) { return symmMulticastAttempts(); }
