/* SPDX-License-Identifier: Apache-2.0 */
/* User memory: ncclMemAlloc/ncclMemFree as shareable VMM memory, and peer-mapped symmetric windows. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "fdpass.h"
#include "group.h"
#include "internal.h"
#include "transport.h"

/* ---- ncclMemAlloc / ncclMemFree ---------------------------------------------------------- */

struct userAlloc {
  CUdeviceptr base;
  size_t bytes;
  CUmemGenericAllocationHandle handle;
  struct userAlloc* next;
};

static pthread_mutex_t allocLock = PTHREAD_MUTEX_INITIALIZER;
static struct userAlloc* allocs;

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
  /* Like cudaFree: wait for work that may still use it. */
  if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
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
  uint32_t pad;
  uint64_t allocBytes, offset, bytes;
};

static void releaseWindow(struct symmWindow* w) {
  for (int r = SYMM_MAX_RANKS - 1; r >= 0; r--) symmRegistryRelease(w->maps[r]);
  free(w);
}

static int exchangeOne(struct symmComm* comm, const void* mine, void* all, size_t bytes) {
  int take = 1;
  const void* send[1] = {mine};
  void* recv[1] = {all};
  (void)symmExchange(&comm, 1, &take, send, recv, bytes);
  return take;
}

static int agreeOne(struct symmComm* comm, uint32_t ok) {
  uint32_t all[SYMM_MAX_RANKS];
  if (!exchangeOne(comm, &ok, all, sizeof(ok))) return 0;
  for (int r = 0; r < comm->nranks; r++)
    if (!all[r]) return 0;
  return 1;
}

void symmTransportWindowRegistered(struct symmComm* comm, void* buff, size_t size,
                                   ncclWindow_t win, int winFlags) {
  if (comm == NULL || comm->transport == NULL || !(winFlags & NCCL_WIN_COLL_SYMMETRIC)) return;
  struct symmTransport* t = comm->transport;
  if (symmGroupDepth() > 0) {
    /* Our exchange would wait on a group that has not been launched yet. */
    INFO(SYMM_TRANSPORT, "window %p registered inside a group: not peer-mapped (copies instead)",
         buff);
    return;
  }
  int rank = comm->rank;
  struct windowRecord mine;
  memset(&mine, 0, sizeof(mine));
  struct windowRecord all[SYMM_MAX_RANKS];
  CUmemGenericAllocationHandle handle = 0;
  int retained = 0, fd = -1;
  struct symmFdServer* server = NULL;
  struct symmWindow* w = calloc(1, sizeof(*w));
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  pthread_mutex_lock(&t->lock);
  uint32_t tag = SYMM_TAG_WINDOW_BASE + t->windowSeq++;
  pthread_mutex_unlock(&t->lock);

  CUdeviceptr base = 0;
  size_t allocBytes = 0;
  if (w != NULL && buff != NULL && size > 0 &&
      CU_CALL(SYMM_LOG_INFO, cuMemRetainAllocationHandle, (&handle, buff)) == CUDA_SUCCESS) {
    retained = 1;
    if (CU_CALL(SYMM_LOG_INFO, cuMemGetAddressRange, (&base, &allocBytes, (CUdeviceptr)buff)) ==
            CUDA_SUCCESS &&
        (CUdeviceptr)buff + size <= base + allocBytes) {
      mine.ok = 1;
      mine.allocBytes = allocBytes;
      mine.offset = (CUdeviceptr)buff - base;
      mine.bytes = size;
    }
  }
  if (!mine.ok)
    INFO(SYMM_TRANSPORT, "window %p is not VMM memory we can share (use ncclMemAlloc)", buff);
  int ok = exchangeOne(comm, &mine, all, sizeof(mine));
  for (int r = 0; ok && r < comm->nranks; r++) ok = all[r].ok && all[r].bytes == size;
  if (!ok) goto release;

  /* Publish ours (the user's own mapping, borrowed) and serve it to other processes. */
  uint32_t localOk = 0;
  struct symmMapKey key;
  symmKeyOf(t, tag, rank, &key);
  if (symmRegistryPublish(&key, handle, base, allocBytes, 1, t->cudaDev, &w->maps[rank]) ==
      ncclSuccess) {
    retained = 0; /* the registry releases it */
    localOk = 1;
    uint32_t remote = 0;
    for (int r = 0; r < comm->nranks; r++)
      if (t->pids[r] != t->pids[rank]) remote |= 1u << r;
    if (remote) {
      struct symmFdRendezvous rv;
      symmFillRendezvous(t, tag, &rv);
      localOk = symmVmmExportFd(handle, &fd) == ncclSuccess &&
                symmFdServerStart(&rv, fd, remote, &server) == ncclSuccess;
      memset(&rv, 0, sizeof(rv));
      if (fd >= 0) close(fd);
    }
  }
  if (!agreeOne(comm, localOk)) goto release;

  localOk = 1;
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, tag, &rv);
  for (int k = 1; k < comm->nranks && localOk; k++) {
    int q = (rank + k) % comm->nranks;
    symmKeyOf(t, tag, q, &key);
    if (t->pids[q] == t->pids[rank]) {
      localOk = symmRegistryAcquireLocal(&key, t->cudaDev, t->timeoutMs, &w->maps[q]) == ncclSuccess;
    } else {
      int peerFd = -1;
      localOk = symmFdFetch(&rv, q, &peerFd) == ncclSuccess &&
                symmRegistryAcquireFd(&key, peerFd, all[q].allocBytes, t->cudaDev, &w->maps[q]) ==
                    ncclSuccess;
    }
  }
  memset(&rv, 0, sizeof(rv));
  if (!agreeOne(comm, localOk)) goto release;

  w->win = win;
  w->userPtr = (uintptr_t)buff;
  w->bytes = size;
  for (int r = 0; r < comm->nranks; r++)
    w->peerPtrs[r] = (void*)(w->maps[r]->base + all[r].offset);
  pthread_mutex_lock(&t->lock);
  w->next = t->windows;
  t->windows = w;
  pthread_mutex_unlock(&t->lock);
  (void)symmFdServerFinish(server, 1);
  INFO(SYMM_TRANSPORT, "window %p (%zu bytes) peer-mapped on rank %d", buff, size, rank);
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  return;

release:
  (void)symmFdServerFinish(server, 1);
  if (w) releaseWindow(w);
  if (retained) (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (handle));
  INFO(SYMM_TRANSPORT, "window %p not peer-mapped; kernels copy through the staging buffer", buff);
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
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
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
  if (w == NULL) return;
  /* Kernels may still read through the mapping. */
  if (t->launched) (void)cudaEventSynchronize(t->lastLaunch);
  releaseWindow(w);
}

void symmWindowsTeardown(struct symmTransport* t) {
  pthread_mutex_lock(&t->lock);
  struct symmWindow* list = t->windows;
  t->windows = NULL;
  pthread_mutex_unlock(&t->lock);
  while (list) {
    struct symmWindow* next = list->next;
    releaseWindow(list);
    list = next;
  }
}

int symmTransportFindWindow(const struct symmComm* comm, const void* ptr, size_t bytes,
                            void* peerPtrs[SYMM_MAX_RANKS]) {
  if (comm == NULL || comm->transport == NULL || ptr == NULL) return 0;
  struct symmTransport* t = comm->transport;
  uintptr_t p = (uintptr_t)ptr;
  int found = 0;
  pthread_mutex_lock(&t->lock);
  for (struct symmWindow* w = t->windows; w; w = w->next) {
    if (p >= w->userPtr && bytes <= w->bytes && p - w->userPtr <= w->bytes - bytes) {
      size_t offset = p - w->userPtr;
      for (int r = 0; r < t->peers.nranks; r++) peerPtrs[r] = (char*)w->peerPtrs[r] + offset;
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
  return found;
}
