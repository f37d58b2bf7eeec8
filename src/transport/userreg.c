/* SPDX-License-Identifier: Apache-2.0 */
/* ncclCommRegister zero-copy, pairwise: a writer sends each registered region's fd to every peer,
 * each peer maps it in the background, fills its device table and acknowledges; the writer
 * publishes a region to its kernels only once every peer has acknowledged it. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fdpass.h"
#include "internal.h"
#include "order.h"
#include "param.h"
#include "regchan.h"
#include "transport.h"

SYMMCOLL_PARAM_FULL(UserReg, "USER_REG", 1, INT64_MIN, INT64_MAX, SYMM_PARAM_AGREED,
                    "ncclCommRegister zero-copy: peers map registered ncclMemAlloc buffers in the "
                    "background (0 = off: registered buffers go through the staging buffer)")

/* The table [writer rank][slot] sits in localState past the kernels' words (SYMM_STATE_*). */
#define TABLE_OFFSET 4096u
_Static_assert(TABLE_OFFSET >= SYMM_STATE_KERNEL_WORDS * sizeof(uint64_t),
               "the registration table must not overlap the kernels' words of localState");
#define TABLE_BYTES ((size_t)SYMM_MAX_RANKS * SYMM_USER_REG_SLOTS * sizeof(uint64_t))
/* Registry tags of mapped regions: high bit + the writer's generation (unique per comm, rank). */
#define TAG_REGION 0x80000000u
#define GEN_MASK 0x7fffffffu
/* Slot state word: (generation << 32) | LIVE | bit q = rank q acknowledged. */
#define STATE_LIVE (1ull << 31)

/* Writer side: one region this rank registered. `state` and the fields are read lock-free by
 * symmTransportUserInputDesc (seqlock: fields are written only while state is 0); the rest is
 * guarded by `lock`. */
struct regSlot {
  uint64_t state;
  uintptr_t buff, allocBase;
  size_t size, allocBytes;
  void* realHandle; /* the real NCCL's handle: how ncclCommDeregister names the region */
  CUmemGenericAllocationHandle handle; /* retained: the memory stays alive while registered */
  int inUse;
};

/* Reader side: writer r's region in slot s, mapped here. Only the receiver thread touches it
 * while it runs; teardown after joining it. */
struct peerRegion {
  struct symmMapping* map;
  uint32_t generation;
};

struct symmUserReg {
  struct symmTransport* t;
  int cudaDev, rank, nranks;
  int rxFd, txFd;               /* this rank's channel (txFd is what peers hold) */
  int peerTx[SYMM_MAX_RANKS];   /* every peer's sending end */
  int stopFd;                   /* eventfd: wakes the thread at teardown */
  struct symmRegChanPeers who;  /* holds the token: wiped at teardown */
  uint32_t allPeers;            /* ack bits of every other rank */
  pthread_t thread;
  int threadStarted;
  cudaStream_t stream;          /* private, non-blocking: never waits behind kernels */
  uint64_t* table;              /* device */
  pthread_mutex_t lock;
  uint32_t lastGeneration;
  int liveSlots;                /* atomic hint: 0 = nothing to scan */
  int mapped;                   /* atomic: peer regions mapped here */
  struct regSlot slots[SYMM_USER_REG_SLOTS];
  struct peerRegion regions[SYMM_MAX_RANKS][SYMM_USER_REG_SLOTS];
};

static void fillMessage(const struct symmUserReg* u, uint32_t type, int slot, uint32_t generation,
                        uint64_t allocBytes, struct symmRegMsg* m) {
  memset(m, 0, sizeof(*m));
  m->type = type;
  m->rank = u->rank;
  m->slot = (uint32_t)slot;
  m->generation = generation;
  m->allocBytes = allocBytes;
  memcpy(m->auth, u->who.auth, sizeof(m->auth));
}

/* ---- setup ------------------------------------------------------------------------------- */

static void freeUserReg(struct symmUserReg* u) {
  for (int r = 0; r < SYMM_MAX_RANKS; r++)
    if (u->peerTx[r] >= 0) close(u->peerTx[r]);
  if (u->stopFd >= 0) close(u->stopFd);
  if (u->rxFd >= 0) close(u->rxFd);
  if (u->txFd >= 0) close(u->txFd);
  if (u->stream != NULL) (void)cudaStreamDestroy(u->stream);
  pthread_mutex_destroy(&u->lock);
  memset(&u->who, 0, sizeof(u->who));
  free(u);
}

int symmUserRegServe(struct symmTransport* t, struct symmFdServer** server) {
  *server = NULL;
  if (!symmParamUserReg()) return 0;
  if (t->localState == NULL || t->peers.localStateBytes < TABLE_OFFSET + TABLE_BYTES) {
    INFO(SYMM_TRANSPORT, "user registration off: local state (symmAlgosLocalStateBytes) below %zu",
         (size_t)TABLE_OFFSET + TABLE_BYTES);
    return 0;
  }
  struct symmUserReg* u = calloc(1, sizeof(*u));
  if (u == NULL) {
    WARN("user registration: out of host memory");
    return 0;
  }
  u->t = t;
  u->cudaDev = t->cudaDev;
  u->rank = t->peers.rank;
  u->nranks = t->peers.nranks;
  u->rxFd = u->txFd = u->stopFd = -1;
  for (int r = 0; r < SYMM_MAX_RANKS; r++) u->peerTx[r] = -1;
  pthread_mutex_init(&u->lock, NULL);
  if (symmRegChanCreate(&u->rxFd, &u->txFd) != ncclSuccess) goto fail;
  /* Every other rank, same process or not, fetches the sending end through the authenticated
   * fdpass exchange: one delivery path for all. */
  uint32_t others = ((1u << u->nranks) - 1u) & ~(1u << u->rank);
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_USER_REG, &rv);
  ncclResult_t res = symmFdServerStart(&rv, u->txFd, others, server);
  memset(&rv, 0, sizeof(rv));
  if (res != ncclSuccess) goto fail;
  t->userReg = u;
  return 1;
fail:
  freeUserReg(u);
  return 0;
}

static void* receiverMain(void* arg);

void symmUserRegConnect(struct symmTransport* t, int everyoneServes) {
  struct symmUserReg* u = t->userReg;
  if (u == NULL) return;
  if (!everyoneServes) goto off;
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_USER_REG, &rv);
  int ok = 1;
  for (int k = 1; k < u->nranks && ok; k++) {
    const int q = (u->rank + k) % u->nranks;
    ok = symmFdFetch(&rv, q, &u->peerTx[q]) == ncclSuccess;
  }
  memset(&rv, 0, sizeof(rv));
  if (!ok) goto off;
  u->who.rank = u->rank;
  u->who.nranks = u->nranks;
  memcpy(u->who.pids, t->pids, sizeof(u->who.pids));
  u->who.uid = t->uid;
  memcpy(u->who.auth, t->secret + SYMM_REGCHAN_AUTH_BYTES, sizeof(u->who.auth));
  u->allPeers = ((1u << u->nranks) - 1u) & ~(1u << u->rank);
  u->table = (uint64_t*)((char*)t->localState + TABLE_OFFSET);
  u->stopFd = eventfd(0, EFD_CLOEXEC);
  if (u->stopFd < 0) {
    WARN("user registration: eventfd() failed: %s", strerror(errno));
    goto off;
  }
  if (cudaSetDevice(u->cudaDev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&u->stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("user registration: cannot create a stream on device %d", u->cudaDev);
    u->stream = NULL;
    goto off;
  }
  int err = pthread_create(&u->thread, NULL, receiverMain, u);
  if (err != 0) {
    WARN("user registration: cannot start the receiver thread: %s", strerror(err));
    goto off;
  }
  u->threadStarted = 1;
  t->peers.userRegTable = u->table;
  return; /* registrations made so far: symmUserRegOfferPending, once staged */
off:
  /* Only this rank is affected: it never acknowledges, so peers never publish regions to it. */
  INFO(SYMM_TRANSPORT, "user registration off on rank %d (ncclCommRegister buffers go through "
       "the staging buffer)", u->rank);
  t->userReg = NULL;
  freeUserReg(u);
}

/* ---- receiver thread --------------------------------------------------------------------- */

/* Table entry [r][s] = value, complete on the device before returning 0. Never the legacy
 * stream: it would wait behind kernels spinning on peers. */
static int writeEntry(struct symmUserReg* u, int r, int s, uint64_t value) {
  uint64_t host = value;
  cudaError_t e = cudaMemcpyAsync(u->table + (size_t)r * SYMM_USER_REG_SLOTS + s, &host,
                                  sizeof(host), cudaMemcpyHostToDevice, u->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(u->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("user registration: writing the table on device %d failed: %s", u->cudaDev,
         cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

static void dropRegion(struct symmUserReg* u, struct peerRegion* pr) {
  symmRegistryRelease(pr->map);
  pr->map = NULL;
  pr->generation = 0;
  __atomic_sub_fetch(&u->mapped, 1, __ATOMIC_RELAXED);
}

static void onMap(struct symmUserReg* u, const struct symmRegMsg* m, int fd) {
  const int r = m->rank, s = (int)m->slot;
  struct peerRegion* pr = &u->regions[r][s];
  if (pr->map != NULL && pr->generation == m->generation) {
    close(fd); /* a repeat: the entry is in place */
  } else {
    if (m->allocBytes == 0 || m->allocBytes >= (1ull << 48)) {
      close(fd);
      INFO(SYMM_TRANSPORT, "user registration: rank %d sent a region of bad size", r);
      return;
    }
    struct symmMapKey key;
    struct symmMapping* map = NULL;
    symmKeyOf(u->t, TAG_REGION | (m->generation & GEN_MASK), r, &key);
    ncclResult_t res = symmRegistryAcquireFd(&key, fd, (size_t)m->allocBytes, u->cudaDev, &map);
    memset(&key, 0, sizeof(key));
    if (res != ncclSuccess) {
      INFO(SYMM_TRANSPORT, "user registration: cannot map rank %d's region (slot %d); it goes "
           "through staging", r, s);
      return;
    }
    if (writeEntry(u, r, s, (uint64_t)map->base) != 0) {
      symmRegistryRelease(map);
      return;
    }
    /* A previous region in this slot whose UNMAP was lost: the writer deregistered it before
     * reusing the slot, so no kernel reads it any more. */
    if (pr->map != NULL) dropRegion(u, pr);
    pr->map = map;
    pr->generation = m->generation;
    __atomic_add_fetch(&u->mapped, 1, __ATOMIC_RELAXED);
  }
  /* Only now, with the entry written on the device, may the writer publish the region. */
  struct symmRegMsg ack;
  fillMessage(u, SYMM_REGMSG_ACK, s, m->generation, 0, &ack);
  if (!symmRegChanSend(u->peerTx[r], &ack, -1))
    INFO(SYMM_TRANSPORT, "user registration: acknowledging rank %d's region failed", r);
  memset(&ack, 0, sizeof(ack));
}

static void onUnmap(struct symmUserReg* u, const struct symmRegMsg* m) {
  struct peerRegion* pr = &u->regions[m->rank][m->slot];
  if (pr->map == NULL || pr->generation != m->generation) return; /* stale */
  /* If the entry cannot be cleared, keep the memory it points to mapped (until teardown). */
  if (writeEntry(u, m->rank, (int)m->slot, 0) != 0) return;
  dropRegion(u, pr);
}

static void onAck(struct symmUserReg* u, const struct symmRegMsg* m) {
  struct regSlot* sl = &u->slots[m->slot];
  uint64_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
  do {
    /* Late acks of a deregistered or replaced region are ignored (generations are unique). */
    if (!(st & STATE_LIVE) || (uint32_t)(st >> 32) != m->generation) return;
  } while (!__atomic_compare_exchange_n(&sl->state, &st, st | (1ull << m->rank), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
}

static void* receiverMain(void* arg) {
  struct symmUserReg* u = arg;
  /* Our CUDA calls must neither be refused nor invalidate an application's global-mode capture
   * on another thread. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaSetDevice(u->cudaDev) != cudaSuccess ||
      cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("user registration: receiver thread cannot use device %d", u->cudaDev);
  }
  for (;;) {
    struct pollfd pfds[2] = {{.fd = u->rxFd, .events = POLLIN}, {.fd = u->stopFd, .events = POLLIN}};
    int ready = poll(pfds, 2, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      WARN("user registration: poll failed: %s", strerror(errno));
      break;
    }
    if (pfds[1].revents) break;
    if (pfds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      WARN("user registration: the channel of rank %d failed", u->rank);
      break;
    }
    struct symmRegMsg m;
    int fd = -1;
    enum symmRegRecv got;
    while ((got = symmRegChanReceive(u->rxFd, &u->who, &m, &fd)) != SYMM_REGRECV_EMPTY) {
      if (got != SYMM_REGRECV_GOT) continue;
      if (m.type == SYMM_REGMSG_MAP) onMap(u, &m, fd);
      else if (m.type == SYMM_REGMSG_UNMAP) onUnmap(u, &m);
      else if (m.type == SYMM_REGMSG_ACK) onAck(u, &m);
      else if (u->t->graphMail != NULL) u->t->graphMail(u->t, &m, fd); /* GRAPH_* */
      else if (fd >= 0) close(fd);
    }
    memset(&m, 0, sizeof(m));
  }
  return NULL;
}

int symmUserRegSendTo(struct symmTransport* t, int peer, struct symmRegMsg* m, int fd) {
  struct symmUserReg* u = t->userReg;
  if (u == NULL || peer < 0 || peer >= u->nranks || u->peerTx[peer] < 0) return 0;
  m->rank = u->rank;
  memcpy(m->auth, u->who.auth, sizeof(m->auth));
  const int sent = symmRegChanSend(u->peerTx[peer], m, fd);
  memset(m->auth, 0, sizeof(m->auth));
  return sent;
}

/* ---- teardown ---------------------------------------------------------------------------- */

/* Registrations made before staging existed (offered by symmUserRegOfferPending). */
struct symmPendingReg {
  void* buff;
  size_t size;
  void* realHandle;
  struct symmPendingReg* next;
};

static void freePending(struct symmTransport* t) {
  pthread_mutex_lock(&t->lock);
  struct symmPendingReg* list = t->pendingRegs;
  t->pendingRegs = NULL;
  pthread_mutex_unlock(&t->lock);
  while (list != NULL) {
    struct symmPendingReg* next = list->next;
    free(list);
    list = next;
  }
}

void symmUserRegTeardown(struct symmTransport* t) {
  freePending(t);
  struct symmUserReg* u = t->userReg;
  if (u == NULL) return;
  t->peers.userRegTable = NULL;
  if (u->threadStarted) {
    uint64_t one = 1;
    if (write(u->stopFd, &one, sizeof(one)) != (ssize_t)sizeof(one))
      WARN("user registration: cannot stop the receiver thread: %s", strerror(errno));
    pthread_join(u->thread, NULL);
  }
  for (int r = SYMM_MAX_RANKS - 1; r >= 0; r--)
    for (int s = 0; s < SYMM_USER_REG_SLOTS; s++)
      if (u->regions[r][s].map != NULL) dropRegion(u, &u->regions[r][s]);
  for (int s = 0; s < SYMM_USER_REG_SLOTS; s++)
    if (u->slots[s].inUse) (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (u->slots[s].handle));
  t->userReg = NULL;
  freeUserReg(u);
}

/* ---- writer side ------------------------------------------------------------------------- */

/* The allocation behind [buff, buff+size), retained, if it is VMM memory exportable as a POSIX
 * fd and wholly covers the range. */
static int retainRegion(void* buff, size_t size, CUmemGenericAllocationHandle* handle,
                        CUdeviceptr* base, size_t* allocBytes, int* fd) {
  static int notVmmLogged;
  if (CU_CALL(SYMM_LOG_TRACE, cuMemRetainAllocationHandle, (handle, buff)) != CUDA_SUCCESS) {
    if (!__atomic_exchange_n(&notVmmLogged, 1, __ATOMIC_RELAXED))
      INFO(SYMM_TRANSPORT, "ncclCommRegister: %p is not VMM memory (cudaMalloc?); such buffers go "
           "through the staging buffer (use ncclMemAlloc for zero-copy; logged once)", buff);
    return 0;
  }
  CUmemGenericAllocationHandle atBase;
  const uintptr_t p = (uintptr_t)buff;
  if (CU_CALL(SYMM_LOG_INFO, cuMemGetAddressRange, (base, allocBytes, (CUdeviceptr)buff)) !=
          CUDA_SUCCESS ||
      *allocBytes >= (1ull << 48) || size > *allocBytes || p - *base > *allocBytes - size) {
    INFO(SYMM_TRANSPORT, "ncclCommRegister: %p (%zu bytes) is not inside one allocation", buff, size);
    goto release;
  }
  /* A range stitched from several allocations (one reservation, many handles) is not ours to
   * export as one: the allocation at its base must be the one at buff. */
  if (CU_CALL(SYMM_LOG_INFO, cuMemRetainAllocationHandle, (&atBase, (void*)*base)) != CUDA_SUCCESS)
    goto release;
  const int same = atBase == *handle;
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (atBase));
  if (!same) {
    INFO(SYMM_TRANSPORT, "ncclCommRegister: %p spans several allocations; not shared", buff);
    goto release;
  }
  if (CU_CALL(SYMM_LOG_INFO, cuMemExportToShareableHandle,
              (fd, *handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) != CUDA_SUCCESS) {
    INFO(SYMM_TRANSPORT, "ncclCommRegister: %p cannot be exported as a POSIX fd; not shared", buff);
    goto release;
  }
  return 1;
release:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (*handle));
  return 0;
}

/* Offers [buff, buff+size) to every peer (see symmTransportUserRegister). */
static void offerRegion(struct symmTransport* t, struct symmUserReg* u, void* buff, size_t size,
                        void* realHandle) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  CUmemGenericAllocationHandle handle;
  CUdeviceptr base = 0;
  size_t allocBytes = 0;
  int fd = -1;
  if (!retainRegion(buff, size, &handle, &base, &allocBytes, &fd)) goto restore;
  pthread_mutex_lock(&u->lock);
  int slot = -1, duplicate = 0;
  for (int s = SYMM_USER_REG_SLOTS - 1; s >= 0; s--) {
    if (!u->slots[s].inUse) slot = s;
    else if (u->slots[s].realHandle == realHandle) duplicate = 1;
  }
  if (slot < 0 || duplicate) {
    pthread_mutex_unlock(&u->lock);
    /* A handle NCCL returned twice (same buffer again) could not tell ncclCommDeregister which
     * region it means: only the first is shared. */
    INFO(SYMM_TRANSPORT, "ncclCommRegister: %p not shared: %s", buff,
         duplicate ? "the real NCCL returned a handle already in use" : "all slots in use");
    close(fd);
    (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (handle));
    goto restore;
  }
  struct regSlot* sl = &u->slots[slot];
  u->lastGeneration = (u->lastGeneration + 1u) & GEN_MASK;
  if (u->lastGeneration == 0) u->lastGeneration = 1;
  const uint32_t generation = u->lastGeneration;
  sl->inUse = 1;
  sl->realHandle = realHandle;
  sl->handle = handle;
  /* Seqlock write: the state is 0 here; fields first, then the state that publishes them. */
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&sl->buff, (uintptr_t)buff, __ATOMIC_RELAXED);
  __atomic_store_n(&sl->size, size, __ATOMIC_RELAXED);
  __atomic_store_n(&sl->allocBase, (uintptr_t)base, __ATOMIC_RELAXED);
  __atomic_store_n(&sl->allocBytes, allocBytes, __ATOMIC_RELAXED);
  __atomic_store_n(&sl->state, ((uint64_t)generation << 32) | STATE_LIVE, __ATOMIC_RELEASE);
  __atomic_add_fetch(&u->liveSlots, 1, __ATOMIC_RELAXED);
  struct symmRegMsg msg;
  fillMessage(u, SYMM_REGMSG_MAP, slot, generation, allocBytes, &msg);
  int sent = 0;
  for (int q = 0; q < u->nranks; q++)
    if (q != u->rank) sent += symmRegChanSend(u->peerTx[q], &msg, fd);
  memset(&msg, 0, sizeof(msg));
  pthread_mutex_unlock(&u->lock);
  close(fd);
  INFO(SYMM_TRANSPORT, "ncclCommRegister: %p (%zu bytes) in slot %d on rank %d, offered to %d of "
       "%d peers", buff, size, slot, u->rank, sent, u->nranks - 1);
restore:
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
}

void symmUserRegOfferPending(struct symmTransport* t) {
  pthread_mutex_lock(&t->lock);
  struct symmPendingReg* list = t->pendingRegs;
  t->pendingRegs = NULL;
  pthread_mutex_unlock(&t->lock);
  /* Oldest first, as they were registered. */
  struct symmPendingReg* reversed = NULL;
  while (list != NULL) {
    struct symmPendingReg* next = list->next;
    list->next = reversed;
    reversed = list;
    list = next;
  }
  while (reversed != NULL) {
    struct symmPendingReg* next = reversed->next;
    if (t->userReg != NULL) offerRegion(t, t->userReg, reversed->buff, reversed->size, reversed->realHandle);
    free(reversed);
    reversed = next;
  }
}

void symmTransportUserRegister(struct symmComm* comm, void* buff, size_t size, void* realHandle) {
  if (comm == NULL || buff == NULL || size == 0 || realHandle == NULL) return;
  pthread_mutex_lock(&comm->launchLock);
  struct symmTransport* t = comm->transport;
  /* t->userReg is read only once staged (under launchLock, as staging sets it): while staging
   * is built (a non-blocking communicator's job) the channel may not be connected yet, or be
   * freed when connecting fails. */
  if (t != NULL && t->staged) {
    if (t->userReg != NULL) offerRegion(t, t->userReg, buff, size, realHandle);
  } else if (t != NULL) {
    /* Staging (and the channel) come with the first call given to our kernels. */
    struct symmPendingReg* p = malloc(sizeof(*p));
    if (p != NULL) {
      *p = (struct symmPendingReg){.buff = buff, .size = size, .realHandle = realHandle};
      pthread_mutex_lock(&t->lock);
      p->next = t->pendingRegs;
      t->pendingRegs = p;
      pthread_mutex_unlock(&t->lock);
    }
  }
  pthread_mutex_unlock(&comm->launchLock);
}

void symmTransportUserDeregister(struct symmComm* comm, void* realHandle) {
  if (comm == NULL || realHandle == NULL) return;
  pthread_mutex_lock(&comm->launchLock);
  struct symmTransport* t = comm->transport;
  struct symmUserReg* u = t != NULL && t->staged ? t->userReg : NULL; /* as above */
  if (t != NULL) {
    pthread_mutex_lock(&t->lock);
    for (struct symmPendingReg** it = &t->pendingRegs; *it; it = &(*it)->next) {
      if ((*it)->realHandle == realHandle) {
        struct symmPendingReg* gone = *it;
        *it = gone->next;
        free(gone);
        break;
      }
    }
    pthread_mutex_unlock(&t->lock);
  }
  if (u == NULL) {
    pthread_mutex_unlock(&comm->launchLock);
    return;
  }
  pthread_mutex_lock(&u->lock);
  int slot = -1;
  for (int s = 0; s < SYMM_USER_REG_SLOTS && slot < 0; s++)
    if (u->slots[s].inUse && u->slots[s].realHandle == realHandle) slot = s;
  if (slot < 0) {
    pthread_mutex_unlock(&u->lock);
    pthread_mutex_unlock(&comm->launchLock);
    return;
  }
  struct regSlot* sl = &u->slots[slot];
  /* Not ready first: no launch from here on publishes it. The slot stays reserved (inUse)
   * until the peers were told. */
  const uint32_t generation = (uint32_t)(__atomic_exchange_n(&sl->state, 0, __ATOMIC_SEQ_CST) >> 32);
  __atomic_sub_fetch(&u->liveSlots, 1, __ATOMIC_RELAXED);
  sl->realHandle = NULL;
  pthread_mutex_unlock(&u->lock);
  /* Kernels launched with its descriptor may still run (peers read through their mappings
   * until our kernel ends): wait for every eager one issued so far, as window deregistration
   * does; not under the lock (teardown concurrent with a deregistration is the application's
   * error, as with NCCL). */
  cudaEvent_t issued = symmOrderQuiesceEvent(&comm->order);
  pthread_mutex_unlock(&comm->launchLock);
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  if (issued != NULL && cudaEventSynchronize(issued) != cudaSuccess) (void)cudaGetLastError();
  struct symmRegMsg msg;
  fillMessage(u, SYMM_REGMSG_UNMAP, slot, generation, 0, &msg);
  for (int q = 0; q < u->nranks; q++)
    if (q != u->rank && !symmRegChanSend(u->peerTx[q], &msg, -1))
      INFO(SYMM_TRANSPORT, "user registration: rank %d keeps slot %d mapped until its next "
           "registration there or teardown (queue full)", q, slot);
  memset(&msg, 0, sizeof(msg));
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (sl->handle));
  pthread_mutex_lock(&u->lock);
  sl->inUse = 0;
  pthread_mutex_unlock(&u->lock);
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
}

/* ---- queries ----------------------------------------------------------------------------- */

uint64_t symmTransportUserInputDesc(const struct symmComm* comm, const void* ptr, size_t bytes) {
  const struct symmTransport* t = comm != NULL ? comm->transport : NULL;
  struct symmUserReg* u = t != NULL ? t->userReg : NULL;
  if (u == NULL || ptr == NULL || __atomic_load_n(&u->liveSlots, __ATOMIC_RELAXED) == 0) return 0;
  const uintptr_t p = (uintptr_t)ptr;
  for (int s = 0; s < SYMM_USER_REG_SLOTS; s++) {
    struct regSlot* sl = &u->slots[s];
    const uint64_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
    if (!(st & STATE_LIVE) || (st & u->allPeers) != u->allPeers) continue;
    const uintptr_t buff = __atomic_load_n(&sl->buff, __ATOMIC_RELAXED);
    const size_t size = __atomic_load_n(&sl->size, __ATOMIC_RELAXED);
    const uintptr_t base = __atomic_load_n(&sl->allocBase, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    /* Once every ack is in, the state changes only by deregistration: then skip. */
    if (__atomic_load_n(&sl->state, __ATOMIC_RELAXED) != st) continue;
    if (p >= buff && bytes <= size && p - buff <= size - bytes)
      return SYMM_USER_REG_DESC(s, p - base);
  }
  return 0;
}

int symmTransportUserRegMappedCount(const struct symmComm* comm) {
  if (comm == NULL) return 0;
  struct symmComm* c = (struct symmComm*)comm; /* the lock is not part of the logical state */
  pthread_mutex_lock(&c->launchLock);
  int n = 0;
  if (c->transport != NULL && c->transport->userReg != NULL)
    n = __atomic_load_n(&c->transport->userReg->mapped, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&c->launchLock);
  return n;
}
