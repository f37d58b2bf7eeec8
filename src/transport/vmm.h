/* SPDX-License-Identifier: Apache-2.0 */
/* VMM allocations and the process-wide registry of mappings (one import per process, refcounted). */
#ifndef SYMMCOLL_TRANSPORT_VMM_H
#define SYMMCOLL_TRANSPORT_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "cudriver.h"
#include "transport.h" /* SYMM_SECRET_BYTES */

/* Recommended granularity of POSIX-fd-shareable allocations on `cudaDev`. */
ncclResult_t symmVmmGranularity(int cudaDev, size_t* granularity);
/* Physical memory on `cudaDev`, exportable as a POSIX fd; `bytes` must be granularity-rounded. */
ncclResult_t symmVmmCreate(int cudaDev, size_t bytes, CUmemGenericAllocationHandle* handle);
/* Reserves a range, maps `handle` there and grants read/write access to `cudaDev`. */
ncclResult_t symmVmmMap(CUmemGenericAllocationHandle handle, size_t bytes, int cudaDev,
                        CUdeviceptr* out);
ncclResult_t symmVmmSetAccess(CUdeviceptr base, size_t bytes, int cudaDev);
/* Unmaps and frees the range (cleanup: failures are logged, not returned). */
void symmVmmUnmap(CUdeviceptr base, size_t bytes);
ncclResult_t symmVmmExportFd(CUmemGenericAllocationHandle handle, int* fd);
ncclResult_t symmVmmImportFd(int fd, CUmemGenericAllocationHandle* handle);

/* Names one rank's shared object of one communicator: (secret, tag, rank). */
struct symmMapKey {
  uint8_t secret[SYMM_SECRET_BYTES / 2];
  uint32_t tag;
  int32_t rank;
};

/* One mapping in this process, shared by every local rank that uses it. */
struct symmMapping {
  struct symmMapKey key;
  CUmemGenericAllocationHandle handle;
  CUdeviceptr base;
  size_t bytes;
  int refs;
  int borrowed;       /* the owner's user mapping (a window): never unmapped by us */
  uint64_t devAccess; /* devices already granted access */
  struct symmMapping* next;
};

/* The owner publishes its own mapped allocation (refs = 1). `borrowed`: see above. The registry
 * takes over `handle` (released when the last reference goes). */
ncclResult_t symmRegistryPublish(const struct symmMapKey* key, CUmemGenericAllocationHandle handle,
                                 CUdeviceptr base, size_t bytes, int borrowed, int cudaDev,
                                 struct symmMapping** out);
/* A rank in the same process as the owner: waits (up to timeoutMs, or until *stop is nonzero
 * when stop is non-NULL) for the owner to publish, takes a reference and grants `cudaDev`
 * access. */
ncclResult_t symmRegistryAcquireLocal(const struct symmMapKey* key, int cudaDev, int timeoutMs,
                                      const volatile uint32_t* stop, struct symmMapping** out);
/* A rank in another process: imports `fd` (always closed here) once per process, maps it and
 * grants `cudaDev` access; later callers with the same key share that mapping. */
ncclResult_t symmRegistryAcquireFd(const struct symmMapKey* key, int fd, size_t bytes, int cudaDev,
                                   struct symmMapping** out);
/* Drops a reference; the last one unmaps, frees the range and releases the handle. */
void symmRegistryRelease(struct symmMapping* mapping);
/* Live mappings in the registry (tests: back to the start after destroy). */
int symmRegistryCount(void);

#endif
