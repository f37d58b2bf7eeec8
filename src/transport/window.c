/* SPDX-License-Identifier: Apache-2.0 */
/* User memory: ncclMemAlloc/ncclMemFree as shareable VMM memory, and peer-mapped symmetric windows. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "fdpass.h"
#include "internal.h"
#include "order.h"
#include "param.h"
#include "transport.h"

SYMMCOLL_PARAM_FULL(TestAliasFailRank, "TEST_ALIAS_FAIL_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: on this rank, mapping a window's alias fails (as a refused "
                    "cuMemMap would), so that no rank gives the real NCCL an alias of it")

/* ---- ncclMemAlloc / ncclMemFree ---------------------------------------------------------- */

struct userAlloc {
  CUdeviceptr base;
  size_t bytes;
  CUmemGenericAllocationHandle handle;
  uint64_t id; /* unique in this process, never reused (graphpeers.c caches imports by it) */
  struct userAlloc* next;
};

static pthread_mutex_t allocLock = PTHREAD_MUTEX_INITIALIZER;
static struct userAlloc* allocs;
static uint64_t lastAllocId;

/* Physical memory as the real ncclMemAlloc makes it (so the real NCCL's own window registration
 * accepts it): GPUDirect RDMA capable where supported, and exportable as a fabric handle where
 * the system allows it (else, as usual, only as a POSIX fd, which is what we need). */
static ncclResult_t createLikeNccl(int dev, size_t bytes, CUmemGenericAllocationHandle* handle) {
  CUdevice cuDev;
  int rdma = 0, fabric = 0;
  CUCHECK(cuDeviceGet, (&cuDev, dev));
  (void)CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
                (&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, cuDev));
  (void)CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
                (&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, cuDev));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  if (fabric) {
    /* Needs IMEX channels; without them the driver refuses, which is normal (INFO). */
    prop.requestedHandleTypes =
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC;
    if (CU_CALL(SYMM_LOG_INFO, cuMemCreate, (handle, bytes, &prop, 0)) == CUDA_SUCCESS)
      return ncclSuccess;
  }
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUCHECK(cuMemCreate, (handle, bytes, &prop, 0));
  return ncclSuccess;
}

ncclResult_t symmTransportMemAlloc(void** ptr, size_t size, int* handled) {
  *handled = 0;
  if (size == 0 || symmCuLoad() != ncclSuccess) return ncclSuccess;
  int dev = -1, ndev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceCount(&ndev) != cudaSuccess ||
      cudaFree(NULL) != cudaSuccess) {
    (void)cudaGetLastError();
    return ncclSuccess;
  }
  size_t gran = 0;
  if (symmVmmGranularity(dev, &gran) != ncclSuccess || gran == 0) return ncclSuccess;
  size_t bytes = (size + gran - 1) / gran * gran;
  struct userAlloc* a = calloc(1, sizeof(*a));
  if (a == NULL) return ncclSuccess;
  /* Out of memory and friends: let the real NCCL try its own way (and report its own error). */
  if (createLikeNccl(dev, bytes, &a->handle) != ncclSuccess) goto free_record;
  if (symmVmmMap(a->handle, bytes, dev, &a->base) != ncclSuccess) goto release_handle;
  /* Every device that can reach this one may map it later (windows, multi-GPU processes). */
  for (int d = 0; d < ndev && d < 64; d++) {
    int can = 0;
    if (d == dev || cudaDeviceCanAccessPeer(&can, d, dev) != cudaSuccess || !can) continue;
    if (symmVmmSetAccess(a->base, bytes, d) != ncclSuccess) goto unmap;
  }
  a->bytes = bytes;
  pthread_mutex_lock(&allocLock);
  a->id = ++lastAllocId;
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&allocLock);
  *ptr = (void*)a->base;
  *handled = 1;
  INFO(SYMM_ALLOC, "ncclMemAlloc %zu bytes on device %d: shareable VMM memory at %p", size, dev,
       *ptr);
  return ncclSuccess;
unmap:
  symmVmmUnmap(a->base, bytes);
release_handle:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (a->handle));
free_record:
  free(a);
  (void)cudaGetLastError();
  return ncclSuccess;
}

int symmTransportMemAllocExport(const void* ptr, size_t bytes, uint64_t* id, uintptr_t* base,
                                size_t* allocBytes, int* fd) {
  const uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  pthread_mutex_lock(&allocLock); /* no ncclMemFree of it meanwhile */
  for (struct userAlloc* a = allocs; a != NULL; a = a->next) {
    if (p < a->base || bytes > a->bytes || p - a->base > a->bytes - bytes) continue;
    found = symmVmmExportFd(a->handle, fd) == ncclSuccess;
    *id = a->id;
    *base = a->base;
    *allocBytes = a->bytes;
    break;
  }
  pthread_mutex_unlock(&allocLock);
  return found;
}

ncclResult_t symmTransportMemFree(void* ptr, int* handled) {
  *handled = 0;
  struct userAlloc* a = NULL;
  pthread_mutex_lock(&allocLock);
  for (struct userAlloc** it = &allocs; *it; it = &(*it)->next) {
    if ((*it)->base == (CUdeviceptr)ptr) {
      a = *it;
      *it = a->next;
      break;
    }
  }
  pthread_mutex_unlock(&allocLock);
  if (a == NULL) return ncclSuccess;
  *handled = 1;
  /* As the real ncclMemFree: no device-wide wait (the caller's kernels must be done with it). */
  symmVmmUnmap(a->base, a->bytes);
  ncclResult_t res =
      CU_CALL(SYMM_LOG_WARN, cuMemRelease, (a->handle)) == CUDA_SUCCESS ? ncclSuccess
                                                                       : ncclUnhandledCudaError;
  free(a);
  return res;
}

/* ---- symmetric windows ------------------------------------------------------------------- */

struct windowRecord {
  uint32_t ok;
  uint32_t winFlags; /* as this rank registered it: ranks that differ get a warning */
  uint64_t allocBytes, offset, bytes;
};

/* Bits of a rank's vote in the last agreement of a window: its peers mapped, and its alias
 * mapped (an agreement of its own riding on the same exchange). */
#define WINDOW_VOTE_MAPPED 1u
#define WINDOW_VOTE_ALIAS 2u

/* Aliases mapped now in this process (symmTransportAliasCount). */
static int liveAliases;

static void unmapAlias(struct symmWindow* w) {
  if (w->aliasBase == 0) return;
  symmVmmUnmap(w->aliasBase, w->aliasBytes);
  w->aliasBase = 0;
  w->aliasBytes = 0;
  w->aliasPtr = 0;
  __atomic_sub_fetch(&liveAliases, 1, __ATOMIC_RELAXED);
}

/* The alias first: it maps the allocation whose handle our own mapping's release may drop. */
static void releaseWindow(struct symmWindow* w) {
  unmapAlias(w);
  for (int r = SYMM_MAX_RANKS - 1; r >= 0; r--) symmRegistryRelease(w->maps[r]);
  free(w);
}

/* One window on its way to being peer-mapped (see symmTransportWindowsRegistered). */
struct windowJob {
  const struct symmWindowReg* reg;
  struct symmTransport* t;
  int inExchange;               /* still in: takes part in the next exchange */
  uint32_t tag;
  struct windowRecord ours, all[SYMM_MAX_RANKS]; /* this rank's record, everyone's */
  CUmemGenericAllocationHandle handle;
  int retained;                 /* handle is ours to release */
  struct symmFdServer* server;
  struct symmWindow* w;
};

/* Agreement step over every job still in: a job whose ranks did not all set WINDOW_VOTE_MAPPED
 * drops out. agreed[i] (when not NULL): the bits every rank of a job still in set, else 0. */
static void agreeJobs(struct windowJob* jobs, struct symmComm** comms, int n,
                      const uint32_t* myVote, uint32_t* agreed) {
  int* inExchange = calloc((size_t)n, sizeof(int));
  uint32_t* allVoted = calloc((size_t)n, sizeof(uint32_t));
  for (int i = 0; i < n; i++) {
    if (inExchange == NULL || allVoted == NULL) jobs[i].inExchange = 0;
    else inExchange[i] = jobs[i].inExchange;
  }
  if (inExchange != NULL && allVoted != NULL) {
    symmAllRanksAgree(comms, n, inExchange, myVote, allVoted);
    for (int i = 0; i < n; i++)
      jobs[i].inExchange = jobs[i].inExchange && (allVoted[i] & WINDOW_VOTE_MAPPED);
  }
  for (int i = 0; agreed != NULL && i < n; i++) agreed[i] = jobs[i].inExchange ? allVoted[i] : 0;
  free(inExchange);
  free(allVoted);
}

/* Our side of one window: the allocation behind it, its offset and size (ours.ok = usable). */
static void prepareJob(struct windowJob* j) {
  const struct symmWindowReg* r = j->reg;
  CUdeviceptr base = 0;
  size_t allocBytes = 0;
  j->ours.winFlags = (uint32_t)r->winFlags;
  if (!(r->winFlags & NCCL_WIN_COLL_SYMMETRIC)) return; /* not symmetric: NCCL's alone */
  /* Deregistration finds the window by the handle NCCL gave: none (some NCCL settings leave it
   * NULL), or one a mapped window already has (NCCL shares handles between overlapping
   * registrations when its windows are off), could unmap the wrong one. */
  const ncclWindow_t handle = *r->win;
  int handleTaken = handle == NULL;
  pthread_mutex_lock(&j->t->lock);
  for (const struct symmWindow* w = j->t->windows; w != NULL && !handleTaken; w = w->next)
    handleTaken = w->win == handle;
  pthread_mutex_unlock(&j->t->lock);
  if (handleTaken) {
    INFO(SYMM_TRANSPORT, "window %p: NCCL's handle %s; not peer-mapped", r->buff,
         handle == NULL ? "is NULL" : "names a window mapped already");
    return;
  }
  if (j->w == NULL || r->buff == NULL || r->size == 0 ||
      CU_CALL(SYMM_LOG_INFO, cuMemRetainAllocationHandle, (&j->handle, r->buff)) != CUDA_SUCCESS) {
    INFO(SYMM_TRANSPORT, "window %p is not VMM memory we can share (use ncclMemAlloc)", r->buff);
    return;
  }
  j->retained = 1;
  if (CU_CALL(SYMM_LOG_INFO, cuMemGetAddressRange, (&base, &allocBytes, (CUdeviceptr)r->buff)) ==
          CUDA_SUCCESS &&
      /* buff lies in [base, base + allocBytes): no sum that can wrap */
      r->size <= allocBytes - ((CUdeviceptr)r->buff - base)) {
    j->ours.ok = 1;
    j->ours.allocBytes = allocBytes;
    j->ours.offset = (CUdeviceptr)r->buff - base;
    j->ours.bytes = r->size;
  }
}

/* Publishes ours (the user's own mapping, borrowed) and serves it to other processes. */
static uint32_t publishJob(struct windowJob* j) {
  struct symmTransport* t = j->t;
  const int rank = j->reg->comm->rank;
  struct symmMapKey key;
  symmKeyOf(t, j->tag, rank, &key);
  CUdeviceptr base = (CUdeviceptr)j->reg->buff - j->ours.offset;
  if (symmRegistryPublish(&key, j->handle, base, j->ours.allocBytes, 1, t->cudaDev,
                          &j->w->maps[rank]) != ncclSuccess)
    return 0;
  j->retained = 0; /* the registry releases it */
  uint32_t remote = 0;
  for (int r = 0; r < j->reg->comm->nranks; r++)
    if (t->pids[r] != t->pids[rank]) remote |= 1u << r;
  if (remote == 0) return 1;
  struct symmFdRendezvous rv;
  int fd = -1;
  symmFillRendezvous(t, j->tag, &rv);
  const uint32_t ok = symmVmmExportFd(j->handle, &fd) == ncclSuccess &&
                      symmFdServerStart(&rv, fd, remote, &j->server) == ncclSuccess;
  memset(&rv, 0, sizeof(rv));
  if (fd >= 0) close(fd);
  return ok;
}

/* Maps every peer's window: same process through the registry, others through their server. */
static uint32_t fetchJob(struct windowJob* j) {
  struct symmTransport* t = j->t;
  const struct symmComm* comm = j->reg->comm;
  struct symmFdRendezvous rv;
  struct symmMapKey key;
  uint32_t ok = 1;
  symmFillRendezvous(t, j->tag, &rv);
  for (int k = 1; k < comm->nranks && ok; k++) {
    const int q = (comm->rank + k) % comm->nranks;
    symmKeyOf(t, j->tag, q, &key);
    if (t->pids[q] == t->pids[comm->rank]) {
      ok = symmRegistryAcquireLocal(&key, t->cudaDev, t->timeoutMs, symmSetupStop(t),
                                     &j->w->maps[q]) == ncclSuccess;
    } else {
      int peerFd = -1;
      ok = symmFdFetch(&rv, q, &peerFd) == ncclSuccess &&
           symmRegistryAcquireFd(&key, peerFd, j->all[q].allocBytes, t->cudaDev, &j->w->maps[q]) ==
               ncclSuccess;
    }
  }
  memset(&rv, 0, sizeof(rv));
  return ok;
}

/* Maps this rank's allocation behind the window a second time, at a fresh address with read/write
 * access for this device: the window's bytes under an address the real NCCL does not know as a
 * window (`ncclplain`, src/tuner/README.md), as ncclMemAlloc maps it the first time
 * (symmVmmMap). WINDOW_VOTE_ALIAS when mapped (w->aliasBase). A failure (symmVmmMap's WARN, then
 * an INFO here) fails nothing: the window then has no alias on any rank, as agreed. */
static uint32_t mapAlias(struct windowJob* j) {
  struct symmWindow* w = j->w;
  const size_t bytes = j->ours.allocBytes;
  const int rank = j->reg->comm->rank;
  CUdeviceptr base = 0;
  if (rank != symmParamTestAliasFailRank() &&
      symmVmmMap(j->handle, bytes, j->t->cudaDev, &base) == ncclSuccess) {
    w->aliasBase = base;
    w->aliasBytes = bytes;
    __atomic_add_fetch(&liveAliases, 1, __ATOMIC_RELAXED);
    return WINDOW_VOTE_ALIAS;
  }
  INFO(SYMM_TRANSPORT, "window %p: no alias mapped on rank %d%s; ncclplain gives the real NCCL "
       "the window's own addresses", j->reg->buff, rank,
       rank == symmParamTestAliasFailRank() ? " (SYMMCOLL_TEST_ALIAS_FAIL_RANK)" : "");
  return 0;
}

/* Every step is an exchange or agreement over all jobs at once, so one thread driving several
 * ranks (a group, ncclCommInitAll) takes part for each of them in the same grouped all-gather.
 * Ranks of one communicator run the same steps: what decides a step is either identical on all
 * of them (flags, transport presence) or agreed on first. Publishing in a process's registry
 * comes before any rank of the process acquires (an agreement in between). */
void symmTransportWindowsRegistered(const struct symmWindowReg* regs, int n) {
  if (n <= 0) return;
  struct windowJob* jobs = calloc((size_t)n, sizeof(*jobs));
  struct symmComm** comms = calloc((size_t)n, sizeof(*comms));
  const void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  uint32_t* myVote = calloc((size_t)n, sizeof(uint32_t));
  uint32_t* agreed = calloc((size_t)n, sizeof(uint32_t));
  int* inExchange = calloc((size_t)n, sizeof(int));
  if (jobs == NULL || comms == NULL || send == NULL || recv == NULL || myVote == NULL ||
      agreed == NULL || inExchange == NULL) {
    WARN("symmetric windows: out of host memory; %d window(s) not peer-mapped", n);
    goto done;
  }
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  int any = 0;
  for (int i = 0; i < n; i++) {
    struct windowJob* j = &jobs[i];
    const struct symmWindowReg* r = &regs[i];
    j->reg = r;
    comms[i] = r->comm;
    /* Every window of a communicator with a transport takes part, whatever its flags: the
     * flags are the user's per rank, and a rank skipping the exchange would meet its peers'
     * all-gather with its next real collective. Only symmetric ones on every rank are mapped. */
    if (r->comm == NULL || r->comm->transport == NULL) continue;
    j->t = r->comm->transport;
    j->inExchange = 1;
    any = 1;
    pthread_mutex_lock(&j->t->lock);
    j->tag = SYMM_TAG_WINDOW_BASE + j->t->windowSeq++;
    pthread_mutex_unlock(&j->t->lock);
    j->w = calloc(1, sizeof(*j->w));
    (void)cudaSetDevice(j->t->cudaDev);
    prepareJob(j);
  }
  if (!any) goto restore;

  /* 1. Everyone's record: all usable and of the same size, or this window stays unmapped. */
  for (int i = 0; i < n; i++) {
    inExchange[i] = jobs[i].inExchange;
    send[i] = &jobs[i].ours;
    recv[i] = jobs[i].all;
  }
  (void)symmExchange(comms, n, inExchange, send, recv, sizeof(struct windowRecord));
  for (int i = 0; i < n; i++) {
    struct windowJob* j = &jobs[i];
    if (!j->inExchange) continue;
    int ok = inExchange[i];
    int flagsDiffer = 0;
    for (int r = 0; inExchange[i] && r < comms[i]->nranks; r++) {
      flagsDiffer |= j->all[r].winFlags != j->ours.winFlags;
      ok = ok && j->all[r].ok && j->all[r].bytes == j->reg->size;
    }
    if (flagsDiffer)
      WARN("window %p registered with flags 0x%x on rank %d, other flags on another rank: NCCL "
           "requires the same on every rank; not peer-mapped", j->reg->buff, j->ours.winFlags,
           comms[i]->rank);
    j->inExchange = ok;
  }
  /* 2. Publish ours; 3. map the peers' and our alias. Each step ends in an agreement; whether
   * the window has an alias is agreed in the last one: a rank giving NCCL an alias runs NCCL's
   * rings while one giving it the window runs NCCL's symmetric kernels, and the two never meet. */
  for (int i = 0; i < n; i++) {
    if (!jobs[i].inExchange) continue;
    (void)cudaSetDevice(jobs[i].t->cudaDev);
    myVote[i] = publishJob(&jobs[i]) ? WINDOW_VOTE_MAPPED : 0;
  }
  agreeJobs(jobs, comms, n, myVote, NULL);
  for (int i = 0; i < n; i++) {
    if (!jobs[i].inExchange) continue;
    (void)cudaSetDevice(jobs[i].t->cudaDev);
    myVote[i] = (fetchJob(&jobs[i]) ? WINDOW_VOTE_MAPPED : 0) | mapAlias(&jobs[i]);
  }
  agreeJobs(jobs, comms, n, myVote, agreed);

  for (int i = 0; i < n; i++) {
    struct windowJob* j = &jobs[i];
    if (j->t == NULL) continue;
    (void)symmFdServerFinish(j->server, 1);
    if (!j->inExchange) {
      if (j->w) releaseWindow(j->w);
      if (j->retained) (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (j->handle));
      INFO(SYMM_TRANSPORT, "window %p not peer-mapped; kernels copy through the staging buffer",
           j->reg->buff);
      continue;
    }
    struct symmWindow* w = j->w;
    w->win = *j->reg->win;
    w->userPtr = (uintptr_t)j->reg->buff;
    w->bytes = j->reg->size;
    for (int r = 0; r < comms[i]->nranks; r++)
      w->peerPtrs[r] = (void*)(w->maps[r]->base + j->all[r].offset);
    if (agreed[i] & WINDOW_VOTE_ALIAS) {
      w->aliasPtr = (uintptr_t)w->aliasBase + j->ours.offset;
    } else if (w->aliasBase != 0) {
      INFO(SYMM_TRANSPORT, "window %p: a peer mapped no alias; ncclplain gives the real NCCL "
           "the window's own addresses on every rank", j->reg->buff);
      unmapAlias(w);
    }
    pthread_mutex_lock(&j->t->lock);
    w->next = j->t->windows;
    j->t->windows = w;
    __atomic_add_fetch(&j->t->windowsVersion, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&j->t->lock);
    INFO(SYMM_TRANSPORT, "window %p (%zu bytes) peer-mapped on rank %d%s", j->reg->buff,
         j->reg->size, comms[i]->rank, w->aliasPtr != 0 ? ", with an alias" : "");
  }
restore:
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
done:
  free(jobs);
  free(comms);
  free(send);
  free(recv);
  free(myVote);
  free(agreed);
  free(inExchange);
}

void symmTransportWindowDeregister(struct symmComm* comm, ncclWindow_t win) {
  if (comm == NULL || comm->transport == NULL) return;
  struct symmTransport* t = comm->transport;
  struct symmWindow* w = NULL;
  pthread_mutex_lock(&t->lock);
  for (struct symmWindow** it = &t->windows; *it; it = &(*it)->next) {
    if ((*it)->win == win) {
      w = *it;
      *it = w->next;
      __atomic_add_fetch(&t->windowsVersion, 1, __ATOMIC_RELEASE);
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
  if (w == NULL) return;
  /* Eager kernels of ours may still read through the mapping, and the real NCCL through the
   * alias (calls given it are ordered on the communicator even before staging exists, so the
   * order event follows them too; captured ones may not outlive the registration, NCCL's
   * contract too). */
  pthread_mutex_lock(&comm->launchLock);
  cudaEvent_t issued = symmOrderQuiesceEvent(&comm->order);
  pthread_mutex_unlock(&comm->launchLock);
  if (issued != NULL && cudaEventSynchronize(issued) != cudaSuccess) (void)cudaGetLastError();
  releaseWindow(w);
}

void symmWindowsTeardown(struct symmTransport* t) {
  pthread_mutex_lock(&t->lock);
  struct symmWindow* list = t->windows;
  t->windows = NULL;
  __atomic_add_fetch(&t->windowsVersion, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&t->lock);
  while (list) {
    struct symmWindow* next = list->next;
    releaseWindow(list);
    list = next;
  }
}

uint64_t symmTransportWindowsVersion(const struct symmComm* comm) {
  if (comm == NULL || comm->transport == NULL) return 0;
  return __atomic_load_n(&comm->transport->windowsVersion, __ATOMIC_ACQUIRE);
}

/* The first window of `t` that holds [p, p + bytes), or NULL; under t->lock. */
static const struct symmWindow* windowHolding(const struct symmTransport* t, uintptr_t p,
                                              size_t bytes) {
  for (const struct symmWindow* w = t->windows; w; w = w->next)
    if (p >= w->userPtr && bytes <= w->bytes && p - w->userPtr <= w->bytes - bytes) return w;
  return NULL;
}

int symmTransportFindWindow(const struct symmComm* comm, const void* ptr, size_t bytes,
                            void* peerPtrs[SYMM_MAX_RANKS]) {
  if (comm == NULL || comm->transport == NULL || ptr == NULL) return 0;
  struct symmTransport* t = comm->transport;
  const uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&t->lock);
  const struct symmWindow* w = windowHolding(t, p, bytes);
  for (int r = 0; w != NULL && r < t->peers.nranks; r++)
    peerPtrs[r] = (char*)w->peerPtrs[r] + (p - w->userPtr);
  pthread_mutex_unlock(&t->lock);
  return w != NULL;
}

int symmTransportWindowAlias(const struct symmComm* comm, const void* ptr, size_t bytes,
                             void** alias) {
  if (comm == NULL || comm->transport == NULL || ptr == NULL) return 0;
  struct symmTransport* t = comm->transport;
  const uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&t->lock);
  /* The window symmTransportFindWindow finds decides, alias or none. */
  const struct symmWindow* w = windowHolding(t, p, bytes);
  const int found = w != NULL && w->aliasPtr != 0;
  if (found) *alias = (void*)(w->aliasPtr + (p - w->userPtr));
  pthread_mutex_unlock(&t->lock);
  return found;
}

int symmTransportAliasCount(void) { return __atomic_load_n(&liveAliases, __ATOMIC_RELAXED); }
