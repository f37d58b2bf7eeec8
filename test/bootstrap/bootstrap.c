/* SPDX-License-Identifier: Apache-2.0 */
/* A test-only stand-in for libnccl.so.2: ranks are threads of one process, several per GPU.
 *
 * Rendezvous: ranks of one communicator meet in a process-wide registry keyed by the unique id.
 * Collectives: each rank posts its arguments to the k-th operation of its communicator; the rank
 * that posts last runs the operation for everyone (inputs synchronized and read to the host,
 * reduced there in rank order, written back with cudaMemcpyAsync on each rank's stream, which it
 * then synchronizes), and the others wait for it. Inside ncclGroupStart/End, posts are queued and
 * made at the outermost GroupEnd before anyone waits, so one thread may drive several ranks.
 * Correctness over speed: every call is synchronous with the host; graph capture is refused.
 * This file: the exported entry points; the rest is in bootstrap.h's files. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bootstrap.h"

/* --- exported entry points -------------------------------------------------------------------- */

BOOT_API(ncclResult_t, ncclGetVersion, (int* version)) {
  if (version == NULL) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

BOOT_API(const char*, ncclGetErrorString, (ncclResult_t result)) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

BOOT_API(const char*, ncclGetLastError, (ncclComm_t comm)) { return lastError; }

BOOT_API(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId)) {
  if (uniqueId == NULL) return ncclInvalidArgument;
  size_t got = 0;
  while (got < sizeof(*uniqueId)) {
    ssize_t n = getrandom(uniqueId->internal + got, sizeof(*uniqueId) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      bootWarn("getrandom: %s", strerror(errno));
      return ncclSystemError;
    }
    got += (size_t)n;
  }
  return ncclSuccess;
}

static ncclResult_t commCreate(ncclComm_t* out, int nranks, const ncclUniqueId* id, int rank,
                               int dev) {
  if (out == NULL || id == NULL) return ncclInvalidArgument;
  *out = NULL;
  if (nranks < 1 || nranks > BOOT_MAX_RANKS || rank < 0 || rank >= nranks) {
    bootWarn("ncclCommInitRank: invalid rank %d of %d (at most %d ranks)", rank, nranks,
             BOOT_MAX_RANKS);
    return ncclInvalidArgument;
  }
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  if (comm == NULL) return ncclSystemError;
  comm->blocking = 1;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->dev = dev;
  if (groupDepth > 0) {
    /* Posted at GroupEnd, so that one thread can create several ranks. */
    struct groupItem item = {.kind = ITEM_INIT, .comm = comm, .nranks = nranks, .rank = rank,
                             .id = *id};
    ncclResult_t res = groupQueue(&item);
    if (res != ncclSuccess) {
      free(comm);
      return res;
    }
    *out = comm;
    return ncclSuccess;
  }
  ncclResult_t res = initPost(comm, nranks, id, rank);
  if (res == ncclSuccess) res = initWait(comm);
  if (res != ncclSuccess) {
    worldLeave(comm, 1);
    free(comm);
    return res;
  }
  *out = comm;
  return ncclSuccess;
}

/* The current device, or -1 where there is none (the CPU tests run rendezvous without a GPU). */
static int currentDevice(void) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return dev;
}

BOOT_API(ncclResult_t, ncclCommInitRank,
         (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank)) {
  return commCreate(comm, nranks, &commId, rank, currentDevice());
}

int configBlocking(const ncclConfig_t* config, int inherited) {
  if (config == NULL) return inherited;
  return config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

BOOT_API(ncclResult_t, ncclCommInitRankConfig,
         (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)) {
  /* Non-blocking configs complete at once: NCCL allows ncclSuccess there. */
  ncclResult_t res = commCreate(comm, nranks, &commId, rank, currentDevice());
  if (comm != NULL && *comm != NULL) (*comm)->blocking = configBlocking(config, 1);
  return res;
}

BOOT_API(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist)) {
  if (comms == NULL || ndev < 1 || ndev > BOOT_MAX_RANKS) return ncclInvalidArgument;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    devices = 0;
  }
  for (int i = 0; i < ndev; i++) {
    comms[i] = NULL;
    if (devlist != NULL && (devlist[i] < 0 || (devices > 0 && devlist[i] >= devices))) {
      bootWarn("ncclCommInitAll: invalid device %d", devlist[i]);
      return ncclInvalidArgument;
    }
  }
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return res;
  /* Rank i on devlist[i], or on device i modulo the devices present (several ranks per GPU). */
  ncclResult_t groupRes = ncclGroupStart();
  if (groupRes != ncclSuccess) return groupRes;
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    int dev = devlist ? devlist[i] : (devices > 0 ? i % devices : -1);
    res = commCreate(&comms[i], ndev, &id, i, dev);
  }
  groupRes = ncclGroupEnd();
  if (res == ncclSuccess) res = groupRes;
  if (res != ncclSuccess)
    for (int i = 0; i < ndev; i++)
      if (comms[i] != NULL) {
        (void)ncclCommAbort(comms[i]);
        comms[i] = NULL;
      }
  return res;
}

BOOT_API(ncclResult_t, ncclGroupStart, (void)) {
  if (groupDepth == 0) groupError = ncclSuccess;
  groupDepth++;
  return ncclSuccess;
}

/* Forgets the queued items of this thread's outermost group (they are never posted). */
static void groupDrop(void) {
  free(groupItems); /* a thread's queue must not outlive the group (threads come and go) */
  groupItems = NULL;
  groupCount = groupCap = 0;
}

/* Test knob: the next `count` outermost ncclGroupEnd calls of the process (any thread) fail with
 * ncclInternalError and post nothing, as a real NCCL whose group launch failed. Also read once
 * from SYMM_BOOTSTRAP_FAIL_GROUP_ENDS. */
static int failGroupEnds = -1;
SYMM_EXPORT void symmTestBootstrapFailGroupEnds(int count);
void symmTestBootstrapFailGroupEnds(int count) {
  __atomic_store_n(&failGroupEnds, count, __ATOMIC_RELEASE);
}

static int takeGroupEndFailure(void) {
  int left = __atomic_load_n(&failGroupEnds, __ATOMIC_ACQUIRE);
  if (left < 0) {
    const char* env = getenv("SYMM_BOOTSTRAP_FAIL_GROUP_ENDS");
    int initial = env != NULL ? atoi(env) : 0;
    if (__atomic_compare_exchange_n(&failGroupEnds, &left, initial, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      left = initial;
  }
  while (left > 0) {
    if (__atomic_compare_exchange_n(&failGroupEnds, &left, left - 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 1;
  }
  return 0;
}

/* Like NCCL's: ends the group without launching anything (the estimate is not modelled). */
BOOT_API(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo)) {
  if (groupDepth <= 0) {
    bootWarn("ncclGroupSimulateEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (simInfo != NULL) simInfo->estimatedTime = 0.0f;
  if (--groupDepth > 0) return ncclSuccess;
  groupDrop();
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclGroupEnd, (void)) {
  if (groupDepth <= 0) {
    bootWarn("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0) return ncclSuccess;
  if (takeGroupEndFailure()) {
    groupDrop();
    return ncclInternalError;
  }
  ncclResult_t res = groupError;
  int n = groupCount;
  int* runIt = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
  if (runIt == NULL) res = ncclSystemError;
  /* Post everything first (never blocks), then wait: ranks of this thread meet each other. */
  int postedUpTo = 0; /* items posted (a failed post is not waited for) */
  for (; postedUpTo < n && res == ncclSuccess; postedUpTo++) {
    struct groupItem* it = &groupItems[postedUpTo];
    if (it->kind == ITEM_INIT) res = initPost(it->comm, it->nranks, &it->id, it->rank);
    else res = opPost(it, &it->posted, &runIt[postedUpTo]);
    if (res != ncclSuccess) break;
  }
  /* Operations this thread completed run first: a later wait of ours may be for one of them. */
  for (int pass = 1; pass >= 0; pass--)
    for (int i = 0; i < postedUpTo; i++) {
      struct groupItem* it = &groupItems[i];
      if ((it->kind == ITEM_OP && runIt[i]) != pass) continue;
      ncclResult_t r = it->kind == ITEM_INIT ? initWait(it->comm)
                                             : opFinish(it->comm, it->posted, runIt[i]);
      if (res == ncclSuccess) res = r;
    }
  free(runIt);
  groupDrop();
  return res;
}

BOOT_API(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count)) {
  if (comm == NULL || count == NULL) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank)) {
  if (comm == NULL || rank == NULL) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device)) {
  if (comm == NULL || device == NULL) return ncclInvalidArgument;
  *device = comm->dev;
  return ncclSuccess;
}

static ncclResult_t commFree(ncclComm_t comm, int abort) {
  if (comm == NULL) return ncclInvalidArgument;
  worldLeave(comm, abort);
  free(comm);
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm)) {
  return comm == NULL ? ncclInvalidArgument : ncclSuccess;
}
BOOT_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) { return commFree(comm, 0); }
BOOT_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) { return commFree(comm, 1); }
/* Ends every wait of the world's ranks with an error and runs nothing more on it; the rank
 * stays a member until it is aborted or destroyed. */
BOOT_API(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags)) {
  if (comm == NULL || revokeFlags != NCCL_REVOKE_DEFAULT) return ncclInvalidArgument;
  pthread_mutex_lock(&bootLock);
  if (comm->world != NULL) comm->world->aborted = 1;
  pthread_cond_broadcast(&bootCond);
  pthread_mutex_unlock(&bootLock);
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError)) {
  if (comm == NULL || asyncError == NULL) return ncclInvalidArgument;
  pthread_mutex_lock(&bootLock);
  *asyncError = comm->world && comm->world->aborted ? ncclRemoteError : comm->asyncResult;
  pthread_mutex_unlock(&bootLock);
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclAllReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .opKind = OP_ALLREDUCE, .count = count, .type = datatype,
                         .redOp = op, .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclReduceScatter,
         (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .opKind = OP_REDUCESCATTER, .count = recvcount,
                         .type = datatype, .redOp = op, .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .opKind = OP_REDUCE, .count = count, .type = datatype,
                         .redOp = op, .root = root, .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclAllGather,
         (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
          ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .opKind = OP_ALLGATHER, .count = sendcount, .type = datatype,
                         .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclBroadcast,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
          ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .opKind = OP_BROADCAST, .count = count, .type = datatype,
                         .root = root, .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclBcast,
         (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream)) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

/* Plain device memory: the bootstrap stands in for NCCL's control plane, not its allocator. */
BOOT_API(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size)) {
  if (ptr == NULL) return ncclInvalidArgument;
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  cudaError_t err = cudaMalloc(ptr, size);
  if (err != cudaSuccess) {
    bootWarn("ncclMemAlloc(%zu): %s", size, cudaGetErrorString(err));
    *ptr = NULL;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclMemFree, (void* ptr)) {
  if (ptr == NULL) return ncclSuccess;
  cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) {
    bootWarn("ncclMemFree: %s", cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* Registration is a no-op that hands out a distinct token per registration (callers may key
 * their own records by it). */
static void* newToken(void) { return malloc(1); }

BOOT_API(ncclResult_t, ncclCommRegister,
         (const ncclComm_t comm, void* buff, size_t size, void** handle)) {
  if (comm == NULL || handle == NULL) return ncclInvalidArgument;
  *handle = newToken();
  return *handle ? ncclSuccess : ncclSystemError;
}

BOOT_API(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle)) {
  if (comm == NULL || handle == NULL) return ncclInvalidArgument;
  free(handle);
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclCommWindowRegister,
         (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags)) {
  if (comm == NULL || win == NULL) return ncclInvalidArgument;
  *win = newToken();
  return *win ? ncclSuccess : ncclSystemError;
}

BOOT_API(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win)) {
  if (comm == NULL || win == NULL) return ncclInvalidArgument;
  free(win);
  return ncclSuccess;
}

/* Not part of NCCL: lets a test confirm it reached the bootstrap and not a real NCCL. */
BOOT_API(int, symmTestBootstrapIsFake, (void)) { return 1; }
