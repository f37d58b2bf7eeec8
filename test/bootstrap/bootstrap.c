/* SPDX-License-Identifier: Apache-2.0 */
/* A test-only stand-in for libnccl.so.2: ranks are threads of one process, several per GPU.
 *
 * Rendezvous: ranks of one communicator meet in a process-wide registry keyed by the unique id.
 * Collectives are stream-ordered, as NCCL's: a call with count > 0 enqueues its part on the
 * rank's stream and returns; a runner thread computes the operation once every rank's stream has
 * reached it (runner.c). Count-0 calls are a rendezvous on the host, with no stream work. Inside
 * ncclGroupStart/End, inits and collectives are queued and made at the outermost GroupEnd, so one
 * thread may drive several ranks. Runtime failures surface through ncclCommGetAsyncError. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "boot.h"
#include "boot_types.h"

const char* const bootOpName[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                  "Reduce"};

/* --- errors, waits ---------------------------------------------------------------------------- */

static __thread char lastError[256];

void bootWarn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof(lastError), fmt, ap);
  va_end(ap);
  fprintf(stderr, "nccl-bootstrap: %s\n", lastError);
}

/* Seconds a rank waits for its peers before giving up (a test that forgot a rank must not hang). */
int bootWaitLimitSeconds(void) {
  const char* s = getenv("SYMM_BOOTSTRAP_TIMEOUT");
  int v = s ? atoi(s) : 0;
  return v > 0 ? v : 300;
}

struct timespec bootDeadline(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += bootWaitLimitSeconds();
  return ts;
}

pthread_mutex_t bootLock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t bootCond;
static pthread_once_t condOnce = PTHREAD_ONCE_INIT;
static struct bootWorld* collecting;

static void condInit(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&bootCond, &attr);
  pthread_condattr_destroy(&attr);
}

void bootCondInit(void) { pthread_once(&condOnce, condInit); }

/* Drops `comm` from its world; an abort, or leaving before every rank arrived, fails the others
 * (ncclRemoteError) and releases every waiting stream. A plain leave first waits for this rank's
 * enqueued operations. */
static void worldLeave(struct ncclComm* comm, int abort) {
  struct bootWorld* w = comm->world;
  if (w == NULL) return;
  if (!abort) bootCommQuiesce(comm);
  pthread_mutex_lock(&bootLock);
  if (!w->complete) {
    struct bootWorld** link = &collecting;
    while (*link && *link != w) link = &(*link)->next;
    if (*link) *link = w->next;
    abort = 1;
  }
  if (abort) bootWorldFailLocked(w, ncclRemoteError, NULL);
  w->ranks[comm->rank] = NULL;
  pthread_cond_broadcast(&bootCond);
  /* An operation being computed may use this rank's buffers, which the caller frees once we
   * return: wait for it (it is short: copies and host arithmetic). */
  while (w->running > 0) pthread_cond_wait(&bootCond, &bootLock);
  bootCommDropLocked(comm);
  comm->world = NULL;
  bootWorldUnrefLocked(w);
  pthread_mutex_unlock(&bootLock);
}

/* --- communicator creation -------------------------------------------------------------------- */

static ncclResult_t initPost(struct ncclComm* comm, int nranks, const ncclUniqueId* id, int rank) {
  bootCondInit();
  pthread_mutex_lock(&bootLock);
  struct bootWorld* w = collecting;
  while (w && memcmp(&w->id, id, sizeof(*id)) != 0) w = w->next;
  if (w == NULL) {
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
      pthread_mutex_unlock(&bootLock);
      return ncclSystemError;
    }
    w->id = *id;
    w->nranks = nranks;
    w->next = collecting;
    collecting = w;
    bootWorldLinkLocked(w);
  }
  if (w->nranks != nranks || w->ranks[rank] != NULL) {
    pthread_mutex_unlock(&bootLock);
    bootWarn("ncclCommInitRank: rank %d of %d does not fit this id (nranks %d, rank %s)", rank,
             nranks, w->nranks, w->ranks[rank] ? "taken" : "free");
    return ncclInvalidUsage;
  }
  w->ranks[rank] = comm;
  w->refs++;
  comm->world = w;
  if (++w->arrived == nranks) {
    struct bootWorld** link = &collecting;
    while (*link != w) link = &(*link)->next;
    *link = w->next;
    w->complete = 1;
    pthread_cond_broadcast(&bootCond);
  }
  pthread_mutex_unlock(&bootLock);
  return ncclSuccess;
}

static ncclResult_t initWait(struct ncclComm* comm) {
  struct timespec deadline = bootDeadline();
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&bootLock);
  struct bootWorld* w = comm->world;
  while (!w->complete && w->error == ncclSuccess && res == ncclSuccess)
    if (pthread_cond_timedwait(&bootCond, &bootLock, &deadline) == ETIMEDOUT) res = ncclSystemError;
  if (res == ncclSuccess) res = w->error;
  int arrived = w->arrived;
  pthread_mutex_unlock(&bootLock);
  if (res == ncclSystemError)
    bootWarn("rank %d: only %d of %d ranks arrived within %d s", comm->rank, arrived, comm->nranks,
             bootWaitLimitSeconds());
  return res;
}

/* --- groups: queued posts, made at the outermost GroupEnd ----------------------------------- */

enum itemKind { ITEM_INIT, ITEM_OP };
struct groupItem {
  enum itemKind kind;
  struct ncclComm* comm;
  /* ITEM_INIT */
  int nranks, rank;
  ncclUniqueId id;
  /* ITEM_OP */
  struct opShape shape;
  struct rankArgs args;
  struct bootOp* syncOp; /* count 0: the rendezvous to wait for */
};

static __thread int groupDepth;
static __thread struct groupItem* groupItems;
static __thread int groupCount, groupCap;
static __thread ncclResult_t groupError;

static ncclResult_t groupQueue(const struct groupItem* item) {
  if (groupCount == groupCap) {
    int cap = groupCap ? 2 * groupCap : 16;
    struct groupItem* grown = realloc(groupItems, (size_t)cap * sizeof(*grown));
    if (grown == NULL) return ncclSystemError;
    groupItems = grown;
    groupCap = cap;
  }
  groupItems[groupCount++] = *item;
  return ncclSuccess;
}

/* --- collectives ------------------------------------------------------------------------------ */

/* Posts a count-0 rendezvous, or enqueues the operation on the rank's stream (never waits). */
static ncclResult_t opStart(struct groupItem* item) {
  item->syncOp = NULL;
  if (item->shape.count == 0) return bootSyncPost(item->comm, &item->shape, &item->syncOp);
  return bootEnqueue(item->comm, &item->shape, &item->args);
}

/* Waits for what opStart began where the caller must: a rendezvous, or SYMM_BOOTSTRAP_SYNC. */
static ncclResult_t opFinish(struct groupItem* item) {
  if (item->syncOp != NULL) return bootSyncWait(item->comm, item->syncOp);
  if (item->shape.count > 0 && bootSyncMode()) return bootStreamWait(item->comm, item->args.stream);
  return ncclSuccess;
}

static ncclResult_t collective(struct groupItem* item) {
  struct ncclComm* comm = item->comm;
  const struct opShape* s = &item->shape;
  if (comm == NULL) {
    bootWarn("%s: invalid communicator", bootOpName[s->kind]);
    return ncclInvalidArgument;
  }
  if (symmTypeSize(s->type) == 0) {
    bootWarn("%s: invalid datatype %d", bootOpName[s->kind], (int)s->type);
    return ncclInvalidArgument;
  }
  if ((s->kind == OP_ALLREDUCE || s->kind == OP_REDUCESCATTER || s->kind == OP_REDUCE) &&
      ((int)s->redOp < 0 || (int)s->redOp >= (int)ncclNumOps)) {
    bootWarn("%s: invalid (or unsupported) reduction op %d", bootOpName[s->kind], (int)s->redOp);
    return ncclInvalidArgument;
  }
  if ((s->kind == OP_BROADCAST || s->kind == OP_REDUCE) &&
      (s->root < 0 || s->root >= comm->nranks)) {
    bootWarn("%s: invalid root %d", bootOpName[s->kind], s->root);
    return ncclInvalidArgument;
  }
  item->args.dev = comm->dev; /* NCCL uses the communicator's device, whatever is current */
  item->kind = ITEM_OP;
  if (groupDepth > 0) return groupQueue(item);
  ncclResult_t res = opStart(item);
  if (res != ncclSuccess) return res;
  return opFinish(item);
}

/* --- exported entry points -------------------------------------------------------------------- */

#define BOOT_API(ret, name, params) SYMM_EXPORT ret name params; ret name params

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

/* The calling thread's last warning, or the world's failure (seen on the runner's thread). */
BOOT_API(const char*, ncclGetLastError, (ncclComm_t comm)) {
  if (comm != NULL) {
    pthread_mutex_lock(&bootLock);
    const struct bootWorld* w = comm->world;
    if (w != NULL && w->error != ncclSuccess && w->errorText[0] != '\0')
      snprintf(lastError, sizeof(lastError), "%s", w->errorText);
    pthread_mutex_unlock(&bootLock);
  }
  return lastError;
}

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
  /* Flag words now, not while streams wait on us (pinned allocation may synchronize). */
  if (dev >= 0) {
    ncclResult_t res = bootFlagsReserve(nranks);
    if (res != ncclSuccess) return res;
  }
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  if (comm == NULL) return ncclSystemError;
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

BOOT_API(ncclResult_t, ncclCommInitRankConfig,
         (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)) {
  /* Non-blocking configs complete at once: NCCL allows ncclSuccess there. */
  return commCreate(comm, nranks, &commId, rank, currentDevice());
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
  /* Everything is made first (nothing here waits), then the rendezvous are waited for: ranks
   * this thread drives meet each other. */
  int started = 0;
  while (started < groupCount && res == ncclSuccess) {
    struct groupItem* it = &groupItems[started];
    res = it->kind == ITEM_INIT ? initPost(it->comm, it->nranks, &it->id, it->rank) : opStart(it);
    if (res == ncclSuccess) started++;
  }
  for (int i = 0; i < started; i++) {
    struct groupItem* it = &groupItems[i];
    ncclResult_t r = it->kind == ITEM_INIT ? initWait(it->comm) : opFinish(it);
    if (res == ncclSuccess) res = r;
  }
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

/* Aborted communicators are kept, not freed: abort may come from another thread while one is
 * inside a call on it (PyTorch's watchdog), which then finds no world (a few dozen bytes per
 * abort, reachable from here). */
static struct ncclComm* retired;

static ncclResult_t commFree(ncclComm_t comm, int abort) {
  if (comm == NULL) return ncclInvalidArgument;
  worldLeave(comm, abort);
  if (!abort) {
    free(comm);
    return ncclSuccess;
  }
  pthread_mutex_lock(&bootLock);
  comm->retiredNext = retired;
  retired = comm;
  pthread_mutex_unlock(&bootLock);
  return ncclSuccess;
}

/* Waits for this rank's enqueued operations (NCCL's finalize flushes them). */
BOOT_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm)) {
  if (comm == NULL) return ncclInvalidArgument;
  if (comm->world != NULL) bootCommQuiesce(comm);
  return ncclSuccess;
}
BOOT_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) { return commFree(comm, 0); }
BOOT_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) { return commFree(comm, 1); }

BOOT_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError)) {
  if (comm == NULL || asyncError == NULL) return ncclInvalidArgument;
  pthread_mutex_lock(&bootLock);
  *asyncError = comm->world ? comm->world->error : ncclSuccess;
  pthread_mutex_unlock(&bootLock);
  return ncclSuccess;
}

BOOT_API(ncclResult_t, ncclAllReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .shape = {OP_ALLREDUCE, count, datatype, op, 0},
                         .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclReduceScatter,
         (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .shape = {OP_REDUCESCATTER, recvcount, datatype, op, 0},
                         .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclReduce,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .shape = {OP_REDUCE, count, datatype, op, root},
                         .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclAllGather,
         (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
          ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .shape = {OP_ALLGATHER, sendcount, datatype, ncclSum, 0},
                         .args = {sendbuff, recvbuff, stream, -1}};
  return collective(&it);
}

BOOT_API(ncclResult_t, ncclBroadcast,
         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
          ncclComm_t comm, cudaStream_t stream)) {
  struct groupItem it = {.comm = comm, .shape = {OP_BROADCAST, count, datatype, ncclSum, root},
                         .args = {sendbuff, recvbuff, stream, -1}};
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
