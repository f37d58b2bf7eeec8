/* SPDX-License-Identifier: Apache-2.0 */
/* VMM create/map/export/import, and the registry that maps each shared object once per process. */
#include "vmm.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "condvar.h"

static void fillProp(CUmemAllocationProp* prop, int cudaDev) {
  memset(prop, 0, sizeof(*prop));
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = cudaDev;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

ncclResult_t symmVmmGranularity(int cudaDev, size_t* granularity) {
  CUmemAllocationProp prop;
  fillProp(&prop, cudaDev);
  CUCHECK(cuMemGetAllocationGranularity,
          (granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return ncclSuccess;
}

ncclResult_t symmVmmCreate(int cudaDev, size_t bytes, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop;
  fillProp(&prop, cudaDev);
  CUCHECK(cuMemCreate, (handle, bytes, &prop, 0));
  return ncclSuccess;
}

ncclResult_t symmVmmSetAccess(CUdeviceptr base, size_t bytes, int cudaDev) {
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = cudaDev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUCHECK(cuMemSetAccess, (base, bytes, &access, 1));
  return ncclSuccess;
}

ncclResult_t symmVmmMap(CUmemGenericAllocationHandle handle, size_t bytes, int cudaDev,
                        CUdeviceptr* out) {
  ncclResult_t res = ncclSuccess;
  CUdeviceptr base = 0;
  CUCHECKGOTO(cuMemAddressReserve, (&base, bytes, 0, 0, 0), res, fail);
  CUCHECKGOTO(cuMemMap, (base, bytes, 0, handle, 0), res, release_range);
  res = symmVmmSetAccess(base, bytes, cudaDev);
  if (res != ncclSuccess) goto unmap_range;
  *out = base;
  return ncclSuccess;
unmap_range:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemUnmap, (base, bytes));
release_range:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemAddressFree, (base, bytes));
fail:
  return res;
}

void symmVmmUnmap(CUdeviceptr base, size_t bytes) {
  (void)CU_CALL(SYMM_LOG_WARN, cuMemUnmap, (base, bytes));
  (void)CU_CALL(SYMM_LOG_WARN, cuMemAddressFree, (base, bytes));
}

ncclResult_t symmVmmExportFd(CUmemGenericAllocationHandle handle, int* fd) {
  int exported = -1;
  CUCHECK(cuMemExportToShareableHandle,
          (&exported, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  *fd = exported;
  return ncclSuccess;
}

ncclResult_t symmVmmImportFd(int fd, CUmemGenericAllocationHandle* handle) {
  CUCHECK(cuMemImportFromShareableHandle,
          (handle, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  return ncclSuccess;
}

/* ---- registry ---------------------------------------------------------------------------- */

static pthread_mutex_t registryLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registryChanged;
static pthread_once_t registryOnce = PTHREAD_ONCE_INIT;
static struct symmMapping* registry;
static int registryLive;

static void registryInit(void) { symmCondInitMonotonic(&registryChanged); }

static int keyEqual(const struct symmMapKey* a, const struct symmMapKey* b) {
  return a->tag == b->tag && a->rank == b->rank && memcmp(a->secret, b->secret, sizeof(a->secret)) == 0;
}

static struct symmMapping* findLocked(const struct symmMapKey* key) {
  for (struct symmMapping* m = registry; m; m = m->next)
    if (keyEqual(&m->key, key)) return m;
  return NULL;
}

/* Grants `cudaDev` access once per mapping (caller holds the lock). */
static ncclResult_t grantLocked(struct symmMapping* m, int cudaDev) {
  if (cudaDev < 0 || cudaDev >= 64) return ncclInternalError;
  if (m->devAccess & (1ull << cudaDev)) return ncclSuccess;
  ncclResult_t res = symmVmmSetAccess(m->base, m->bytes, cudaDev);
  if (res == ncclSuccess) m->devAccess |= 1ull << cudaDev;
  return res;
}

static void insertLocked(struct symmMapping* m) {
  m->next = registry;
  registry = m;
  registryLive++;
  pthread_cond_broadcast(&registryChanged);
}

ncclResult_t symmRegistryPublish(const struct symmMapKey* key, CUmemGenericAllocationHandle handle,
                                 CUdeviceptr base, size_t bytes, int borrowed, int cudaDev,
                                 struct symmMapping** out) {
  pthread_once(&registryOnce, registryInit);
  struct symmMapping* m = calloc(1, sizeof(*m));
  if (m == NULL) {
    WARN("symmetric memory: out of host memory for a mapping record");
    return ncclSystemError;
  }
  m->key = *key;
  m->handle = handle;
  m->base = base;
  m->bytes = bytes;
  m->refs = 1;
  m->borrowed = borrowed;
  if (cudaDev >= 0 && cudaDev < 64) m->devAccess = 1ull << cudaDev;
  pthread_mutex_lock(&registryLock);
  if (findLocked(key) != NULL) {
    pthread_mutex_unlock(&registryLock);
    free(m);
    WARN("symmetric memory: rank %d published the same object twice", key->rank);
    return ncclInternalError;
  }
  insertLocked(m);
  pthread_mutex_unlock(&registryLock);
  *out = m;
  return ncclSuccess;
}

ncclResult_t symmRegistryAcquireLocal(const struct symmMapKey* key, int cudaDev, int timeoutMs,
                                      const volatile uint32_t* stop, struct symmMapping** out) {
  pthread_once(&registryOnce, registryInit);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t deadlineNs = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec +
                             (int64_t)timeoutMs * 1000000;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&registryLock);
  struct symmMapping* m;
  /* Threads of one process reach setup in any order: wait for the owner to publish, in slices
   * of 20 ms so that an abort (`stop`) is noticed. */
  while ((m = findLocked(key)) == NULL) {
    if (stop != NULL && __atomic_load_n(stop, __ATOMIC_ACQUIRE) != 0) {
      res = ncclSystemError; /* aborted: no WARN, the abort is the news */
      goto unlock;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t nowNs = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (nowNs >= deadlineNs) {
      WARN("symmetric memory: rank %d in this process did not publish its memory in time",
           key->rank);
      res = ncclSystemError;
      goto unlock;
    }
    int64_t wakeNs = nowNs + 20 * 1000000;
    if (wakeNs > deadlineNs) wakeNs = deadlineNs;
    const struct timespec wake = {.tv_sec = wakeNs / 1000000000, .tv_nsec = wakeNs % 1000000000};
    (void)pthread_cond_timedwait(&registryChanged, &registryLock, &wake);
  }
  res = grantLocked(m, cudaDev);
  if (res != ncclSuccess) goto unlock;
  m->refs++;
  *out = m;
unlock:
  pthread_mutex_unlock(&registryLock);
  return res;
}

ncclResult_t symmRegistryAcquireFd(const struct symmMapKey* key, int fd, size_t bytes, int cudaDev,
                                   struct symmMapping** out) {
  pthread_once(&registryOnce, registryInit);
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&registryLock);
  struct symmMapping* m = findLocked(key);
  if (m != NULL) {
    /* Already imported by another rank of this process: share it. */
    if (m->bytes != bytes) {
      WARN("symmetric memory: rank %d's object has two sizes in one process", key->rank);
      res = ncclInternalError;
      goto unlock;
    }
    res = grantLocked(m, cudaDev);
    if (res != ncclSuccess) goto unlock;
    m->refs++;
    *out = m;
    goto unlock;
  }
  m = calloc(1, sizeof(*m));
  if (m == NULL) {
    WARN("symmetric memory: out of host memory for a mapping record");
    res = ncclSystemError;
    goto unlock;
  }
  res = symmVmmImportFd(fd, &m->handle);
  if (res != ncclSuccess) goto free_record;
  res = symmVmmMap(m->handle, bytes, cudaDev, &m->base);
  if (res != ncclSuccess) goto release_handle;
  m->key = *key;
  m->bytes = bytes;
  m->refs = 1;
  m->devAccess = 1ull << cudaDev;
  insertLocked(m);
  *out = m;
  goto unlock;
release_handle:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (m->handle));
free_record:
  free(m);
unlock:
  pthread_mutex_unlock(&registryLock);
  close(fd);
  return res;
}

void symmRegistryRelease(struct symmMapping* m) {
  if (m == NULL) return;
  pthread_mutex_lock(&registryLock);
  int last = --m->refs == 0;
  if (last) {
    for (struct symmMapping** it = &registry; *it; it = &(*it)->next) {
      if (*it == m) {
        *it = m->next;
        registryLive--;
        break;
      }
    }
  }
  pthread_mutex_unlock(&registryLock);
  if (!last) return;
  if (!m->borrowed) symmVmmUnmap(m->base, m->bytes);
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (m->handle));
  free(m);
}

int symmRegistryCount(void) {
  pthread_mutex_lock(&registryLock);
  int n = registryLive;
  pthread_mutex_unlock(&registryLock);
  return n;
}
