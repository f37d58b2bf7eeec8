/* SPDX-License-Identifier: Apache-2.0 */
/* A test-only stand-in for libnccl.so.2: ranks are threads of one process, several per GPU.
 *
 * Rendezvous: ranks of one communicator meet in a process-wide registry keyed by the unique id.
 * Collectives: each rank posts its arguments to the k-th operation of its communicator; the rank
 * that posts last runs the operation for everyone (inputs synchronized and read to the host,
 * reduced there in rank order, written back with cudaMemcpyAsync on each rank's stream, which it
 * then synchronizes), and the others wait for it. Inside ncclGroupStart/End, posts are queued and
 * made at the outermost GroupEnd before anyone waits, so one thread may drive several ranks.
 * Correctness over speed: every call is synchronous with the host; graph capture is refused. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "boot_types.h"
#include "nccl_api.h"

#define BOOT_MAX_RANKS 64

/* --- errors ----------------------------------------------------------------------------------- */

static __thread char lastError[256];

static void bootWarn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void bootWarn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof(lastError), fmt, ap);
  va_end(ap);
  fprintf(stderr, "nccl-bootstrap: %s\n", lastError);
}

#define BOOT_CUDA(call, res, label)                                                         \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess) {                                                              \
      bootWarn("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      (res) = ncclUnhandledCudaError;                                                       \
      goto label;                                                                           \
    }                                                                                       \
  } while (0)

/* Seconds a rank waits for its peers before giving up (a test that forgot a rank must not hang). */
static int waitLimitSeconds(void) {
  const char* s = getenv("SYMM_BOOTSTRAP_TIMEOUT");
  int v = s ? atoi(s) : 0;
  return v > 0 ? v : 300;
}

/* --- worlds, communicators, operations ---------------------------------------------------------- */

enum opKind { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE, OP_SPLIT };
static const char* const opKindName[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                         "Reduce", "Split"};

struct rankArgs {
  const void* send;
  void* recv;
  cudaStream_t stream;
  int dev;
  int posted;                /* this rank posted (shrinks: the survivors) */
  int color, key, blocking;  /* OP_SPLIT: where this rank goes, and its child's mode */
};

struct bootOp {
  uint64_t seq;
  enum opKind kind;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  int root;
  int expected;         /* ranks that take part: all, or a shrink's survivors */
  int posted, finished; /* ranks that posted / that saw the result */
  struct bootOp** list; /* the world's list it is on */
  int state;            /* 0 collecting, 1 running, 2 done */
  ncclResult_t result;
  struct bootOp* next;
  struct rankArgs args[];
};

struct bootWorld {
  ncclUniqueId id;
  int nranks, arrived, complete, aborted, refs;
  int running; /* operations being run outside the lock (their ranks' buffers and streams in use) */
  struct ncclComm* ranks[BOOT_MAX_RANKS];
  struct bootOp* ops;
  struct bootOp* shrinks; /* shrink rendezvous: only the survivors post, in their own order */
  struct bootWorld* next; /* registry chain while collecting ranks */
};

struct ncclComm {
  struct bootWorld* world;
  int rank, nranks, dev;
  uint64_t nextSeq, shrinkSeq;
  int inCalls; /* operations of this rank posted and not finished (bootLock) */
  int blocking;               /* config.blocking (splits and shrinks inherit it) */
  ncclResult_t asyncResult;   /* ncclInProgress while a non-blocking split or shrink runs */
  struct ncclComm* child;     /* this rank's communicator from its latest split or shrink */
};

/* One lock and one condition for everything: simple, and the bootstrap is not about speed. */
static pthread_mutex_t bootLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bootCond;
static pthread_once_t condOnce = PTHREAD_ONCE_INIT;
static struct bootWorld* collecting;

static void condInit(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&bootCond, &attr);
  pthread_condattr_destroy(&attr);
}

static struct timespec deadlineFromNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += waitLimitSeconds();
  return ts;
}

static void worldUnref(struct bootWorld* w) { /* caller holds bootLock */
  if (--w->refs > 0) return;
  while (w->ops) {
    struct bootOp* op = w->ops;
    w->ops = op->next;
    free(op);
  }
  while (w->shrinks) {
    struct bootOp* op = w->shrinks;
    w->shrinks = op->next;
    free(op);
  }
  free(w);
}

/* Drops `comm` from its world; an abort, or leaving before every rank arrived, fails the others. */
static void worldLeave(struct ncclComm* comm, int abort) {
  struct bootWorld* w = comm->world;
  if (w == NULL) return;
  pthread_mutex_lock(&bootLock);
  if (!w->complete) {
    struct bootWorld** link = &collecting;
    while (*link && *link != w) link = &(*link)->next;
    if (*link) *link = w->next;
    abort = 1;
  }
  if (abort) w->aborted = 1;
  w->ranks[comm->rank] = NULL;
  pthread_cond_broadcast(&bootCond);
  /* An abort may come from another thread while this rank's own thread waits in an operation
   * (as NCCL's abort ends such a wait): it wakes with an error; the caller frees the rank once it
   * has left. */
  while (abort && comm->inCalls > 0) pthread_cond_wait(&bootCond, &bootLock);
  /* An operation already running may use this rank's buffers and streams, which the caller
   * frees once we return: wait for it (it is short: copies and host arithmetic). */
  while (w->running > 0) pthread_cond_wait(&bootCond, &bootLock);
  worldUnref(w);
  pthread_mutex_unlock(&bootLock);
  comm->world = NULL;
}

/* --- communicator creation -------------------------------------------------------------------- */

static ncclResult_t initPost(struct ncclComm* comm, int nranks, const ncclUniqueId* id, int rank) {
  pthread_once(&condOnce, condInit);
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
  struct timespec deadline = deadlineFromNow();
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&bootLock);
  struct bootWorld* w = comm->world;
  while (!w->complete && !w->aborted && res == ncclSuccess)
    if (pthread_cond_timedwait(&bootCond, &bootLock, &deadline) == ETIMEDOUT) res = ncclSystemError;
  if (res == ncclSuccess && w->aborted) res = ncclRemoteError;
  int arrived = w->arrived;
  pthread_mutex_unlock(&bootLock);
  if (res == ncclSystemError)
    bootWarn("rank %d: only %d of %d ranks arrived within %d s", comm->rank, arrived, comm->nranks,
             waitLimitSeconds());
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
  enum opKind opKind;
  int survivors; /* a shrink: the ranks that take part (0: every rank, in the operation order) */
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  int root;
  struct rankArgs args;
  struct bootOp* posted;
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

static ncclResult_t opPost(struct groupItem* item, struct bootOp** out, int* runIt) {
  struct ncclComm* comm = item->comm;
  struct bootWorld* w = comm->world;
  *runIt = 0;
  pthread_mutex_lock(&bootLock);
  if (w->aborted) {
    /* An aborted world runs nothing more: a posted rank's buffers may already be gone. */
    pthread_mutex_unlock(&bootLock);
    return ncclRemoteError;
  }
  struct bootOp** list = item->survivors > 0 ? &w->shrinks : &w->ops;
  uint64_t seq = item->survivors > 0 ? comm->shrinkSeq++ : comm->nextSeq++;
  const int expected = item->survivors > 0 ? item->survivors : w->nranks;
  struct bootOp* op = *list;
  while (op && op->seq != seq) op = op->next;
  if (op == NULL) {
    op = calloc(1, sizeof(*op) + (size_t)w->nranks * sizeof(struct rankArgs));
    if (op == NULL) {
      pthread_mutex_unlock(&bootLock);
      return ncclSystemError;
    }
    op->seq = seq;
    op->kind = item->opKind;
    op->count = item->count;
    op->type = item->type;
    op->redOp = item->redOp;
    op->root = item->root;
    op->expected = expected;
    op->list = list;
    op->next = *list;
    *list = op;
  } else if (op->kind != item->opKind || op->count != item->count || op->type != item->type ||
             op->redOp != item->redOp || op->root != item->root || op->expected != expected) {
    bootWarn("rank %d: operation #%llu is %s count %zu type %d op %d root %d here but %s count %zu "
             "type %d op %d root %d on another rank",
             comm->rank, (unsigned long long)seq, opKindName[item->opKind], item->count,
             (int)item->type, (int)item->redOp, item->root, opKindName[op->kind], op->count,
             (int)op->type, (int)op->redOp, op->root);
    op->result = ncclInvalidUsage;
  }
  op->args[comm->rank] = item->args;
  op->args[comm->rank].posted = 1;
  comm->inCalls++;
  if (++op->posted == op->expected) {
    op->state = 1;
    *runIt = 1;
  }
  pthread_mutex_unlock(&bootLock);
  *out = op;
  return ncclSuccess;
}

/* One non-blocking stream per device for reading inputs: the legacy default stream would wait
 * for the application's blocking streams, where a kernel may spin waiting for a rank that is
 * still inside this call. */
static pthread_mutex_t copyLock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t copyStreams[BOOT_MAX_RANKS];

static cudaError_t copyStream(int dev, cudaStream_t* out) {
  cudaError_t err = cudaSuccess;
  if (dev < 0 || dev >= BOOT_MAX_RANKS) return cudaErrorInvalidDevice;
  pthread_mutex_lock(&copyLock);
  if (copyStreams[dev] == NULL) err = cudaStreamCreateWithFlags(&copyStreams[dev], cudaStreamNonBlocking);
  *out = copyStreams[dev];
  pthread_mutex_unlock(&copyLock);
  return err;
}

/* A split (or shrink: color 0, key = parent rank, survivors only): one new world per color, its
 * ranks ordered by (key, parent rank), each rank's communicator left in its parent's `child`
 * (NULL for NCCL_SPLIT_NOCOLOR). No lock held: the parents are members that posted. */
static ncclResult_t splitRun(struct bootOp* op, struct bootWorld* w) {
  const int n = w->nranks;
  int* done = calloc((size_t)n, sizeof(int));
  if (done == NULL) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  for (int r = 0; r < n; r++)
    if (op->args[r].posted && w->ranks[r] != NULL) w->ranks[r]->child = NULL;
  for (int first = 0; first < n && res == ncclSuccess; first++) {
    const struct rankArgs* a = &op->args[first];
    if (done[first] || !a->posted || a->color == NCCL_SPLIT_NOCOLOR) continue;
    int members[BOOT_MAX_RANKS], m = 0;
    for (int r = first; r < n; r++) {
      if (!op->args[r].posted || op->args[r].color != a->color) continue;
      done[r] = 1;
      int at = m++;
      while (at > 0 && op->args[members[at - 1]].key > op->args[r].key) {
        members[at] = members[at - 1];
        at--;
      }
      members[at] = r;
    }
    struct bootWorld* cw = calloc(1, sizeof(*cw));
    if (cw == NULL) {
      res = ncclSystemError;
      break;
    }
    cw->nranks = cw->arrived = cw->refs = m;
    cw->complete = 1;
    for (int i = 0; i < m; i++) {
      struct ncclComm* child = calloc(1, sizeof(*child));
      if (child == NULL) {
        res = ncclSystemError; /* the children made so far are leaked: test-only */
        break;
      }
      const struct rankArgs* ra = &op->args[members[i]];
      *child = (struct ncclComm){.world = cw, .rank = i, .nranks = m, .dev = ra->dev,
                                 .blocking = ra->blocking, .asyncResult = ncclSuccess};
      cw->ranks[i] = child;
      if (w->ranks[members[i]] != NULL) w->ranks[members[i]]->child = child;
    }
  }
  free(done);
  return res;
}

/* Synchronizes every rank's stream, reads inputs, computes, writes outputs. No lock held. */
static ncclResult_t opRun(struct bootOp* op, struct bootWorld* w) {
  if (op->kind == OP_SPLIT) return splitRun(op, w);
  const int nranks = w->nranks;
  ncclResult_t res = ncclSuccess;
  size_t elt = symmTypeSize(op->type);
  size_t inCount = op->count, outCount = op->count; /* per rank, in elements */
  if (op->kind == OP_ALLGATHER) outCount = op->count * (size_t)nranks;
  if (op->kind == OP_REDUCESCATTER) inCount = op->count * (size_t)nranks;
  if (op->count == 0) return ncclSuccess;
  int savedDev = -1;
  void** inputs = calloc((size_t)nranks, sizeof(void*));
  void* result = malloc(outCount * elt > inCount * elt ? outCount * elt : inCount * elt);
  if (inputs == NULL || result == NULL) {
    res = ncclSystemError;
    goto free_host;
  }
  BOOT_CUDA(cudaGetDevice(&savedDev), res, free_host);
  for (int r = 0; r < nranks; r++) {
    enum cudaStreamCaptureStatus capture;
    BOOT_CUDA(cudaSetDevice(op->args[r].dev), res, restore_device);
    BOOT_CUDA(cudaStreamIsCapturing(op->args[r].stream, &capture), res, restore_device);
    if (capture != cudaStreamCaptureStatusNone) {
      bootWarn("%s: graph capture is not supported by the test bootstrap", opKindName[op->kind]);
      res = ncclInvalidUsage;
      goto restore_device;
    }
    BOOT_CUDA(cudaStreamSynchronize(op->args[r].stream), res, restore_device);
  }
  /* Inputs first (some may alias outputs: in-place operations). */
  for (int r = 0; r < nranks; r++) {
    int needed = op->kind == OP_BROADCAST ? r == op->root : 1;
    if (!needed) continue;
    inputs[r] = malloc(inCount * elt);
    if (inputs[r] == NULL) {
      res = ncclSystemError;
      goto restore_device;
    }
    cudaStream_t copy;
    BOOT_CUDA(cudaSetDevice(op->args[r].dev), res, restore_device);
    BOOT_CUDA(copyStream(op->args[r].dev, &copy), res, restore_device);
    BOOT_CUDA(cudaMemcpyAsync(inputs[r], op->args[r].send, inCount * elt, cudaMemcpyDefault, copy),
              res, restore_device);
    BOOT_CUDA(cudaStreamSynchronize(copy), res, restore_device);
  }
  switch (op->kind) {
    case OP_ALLGATHER:
      for (int r = 0; r < nranks; r++)
        memcpy((char*)result + (size_t)r * inCount * elt, inputs[r], inCount * elt);
      break;
    case OP_BROADCAST: memcpy(result, inputs[op->root], inCount * elt); break;
    default:
      res = bootReduce(result, (const void* const*)inputs, nranks, inCount, op->type, op->redOp);
      if (res != ncclSuccess) goto restore_device;
      break;
  }
  for (int r = 0; r < nranks; r++) {
    if (op->kind == OP_REDUCE && r != op->root) continue;
    const char* src = result;
    if (op->kind == OP_REDUCESCATTER) src += (size_t)r * outCount * elt;
    BOOT_CUDA(cudaSetDevice(op->args[r].dev), res, restore_device);
    BOOT_CUDA(cudaMemcpyAsync(op->args[r].recv, src, outCount * elt, cudaMemcpyDefault,
                              op->args[r].stream),
              res, restore_device);
    /* The source is pageable host memory freed below. */
    BOOT_CUDA(cudaStreamSynchronize(op->args[r].stream), res, restore_device);
  }
restore_device:
  if (savedDev >= 0) (void)cudaSetDevice(savedDev);
free_host:
  if (inputs)
    for (int r = 0; r < nranks; r++) free(inputs[r]);
  free(inputs);
  free(result);
  return res;
}

/* Runs `op` if this rank posted last; then waits for it to be done and drops our reference. */
static ncclResult_t opFinish(struct ncclComm* comm, struct bootOp* op, int runIt) {
  struct bootWorld* w = comm->world;
  ncclResult_t res = ncclSuccess;
  if (runIt) {
    pthread_mutex_lock(&bootLock);
    const int run = op->result == ncclSuccess && !w->aborted;
    if (run) w->running++;
    pthread_mutex_unlock(&bootLock);
    ncclResult_t ran = run ? opRun(op, w) : op->result != ncclSuccess ? op->result : ncclRemoteError;
    pthread_mutex_lock(&bootLock);
    if (run) w->running--;
    op->result = ran;
    op->state = 2;
    pthread_cond_broadcast(&bootCond);
  } else {
    struct timespec deadline = deadlineFromNow();
    pthread_mutex_lock(&bootLock);
    /* An abort releases the waiters of an operation that will never run; once every rank has
     * posted, the runner uses their buffers and streams, so they wait for it to finish. */
    while (op->state != 2 && !(w->aborted && op->state == 0) && res == ncclSuccess)
      if (pthread_cond_timedwait(&bootCond, &bootLock, &deadline) == ETIMEDOUT) res = ncclSystemError;
    if (res == ncclSystemError)
      bootWarn("rank %d: %s #%llu: only %d of %d ranks posted within %d s", comm->rank,
               opKindName[op->kind], (unsigned long long)op->seq, op->posted, op->expected,
               waitLimitSeconds());
    else if (op->state != 2)
      res = ncclRemoteError;
  }
  if (res == ncclSuccess) res = op->result;
  comm->inCalls--;
  pthread_cond_broadcast(&bootCond);
  /* The last rank to leave frees the record (a timed-out or aborted one is left to the world). */
  if (op->state == 2 && ++op->finished == op->expected) {
    struct bootOp** link = op->list;
    while (*link != op) link = &(*link)->next;
    *link = op->next;
    free(op);
  }
  pthread_mutex_unlock(&bootLock);
  return res;
}

static ncclResult_t collective(struct groupItem* item) {
  struct ncclComm* comm = item->comm;
  if (comm == NULL || comm->world == NULL) {
    bootWarn("%s: invalid communicator", opKindName[item->opKind]);
    return ncclInvalidArgument;
  }
  if (symmTypeSize(item->type) == 0) {
    bootWarn("%s: invalid datatype %d", opKindName[item->opKind], (int)item->type);
    return ncclInvalidArgument;
  }
  if ((item->opKind == OP_ALLREDUCE || item->opKind == OP_REDUCESCATTER || item->opKind == OP_REDUCE) &&
      ((int)item->redOp < 0 || (int)item->redOp >= (int)ncclNumOps)) {
    bootWarn("%s: invalid (or unsupported) reduction op %d", opKindName[item->opKind],
             (int)item->redOp);
    return ncclInvalidArgument;
  }
  if ((item->opKind == OP_BROADCAST || item->opKind == OP_REDUCE) &&
      (item->root < 0 || item->root >= comm->nranks)) {
    bootWarn("%s: invalid root %d", opKindName[item->opKind], item->root);
    return ncclInvalidArgument;
  }
  item->args.dev = comm->dev; /* NCCL uses the communicator's device, whatever is current */
  item->kind = ITEM_OP;
  if (groupDepth > 0) return groupQueue(item);
  int runIt;
  struct bootOp* op;
  ncclResult_t res = opPost(item, &op, &runIt);
  if (res != ncclSuccess) return res;
  return opFinish(comm, op, runIt);
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

/* config->blocking as NCCL reads it (unset: blocking). */
static int configBlocking(const ncclConfig_t* config, int inherited) {
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

/* --- split and shrink --------------------------------------------------------------------------- */

/* A non-blocking split or shrink that other ranks still have to join: waited for on a thread of
 * its own, which stores the child (as NCCL's init thread does) and then the parent's state. */
struct childWait {
  struct ncclComm* parent;
  struct bootOp* op;
  ncclComm_t* newcomm;
};

static void* childWaitMain(void* arg) {
  struct childWait* cw = arg;
  struct ncclComm* parent = cw->parent;
  const ncclResult_t res = opFinish(parent, cw->op, 0);
  if (res == ncclSuccess) __atomic_store_n(cw->newcomm, parent->child, __ATOMIC_RELEASE);
  pthread_mutex_lock(&bootLock);
  parent->asyncResult = res;
  parent->inCalls--; /* the thread's own count: the rank is not freed under it */
  pthread_cond_broadcast(&bootCond);
  pthread_mutex_unlock(&bootLock);
  free(cw);
  return NULL;
}

/* Posts a split or shrink on `comm`. Blocking: waits and stores the child. Non-blocking:
 * returns ncclInProgress; the rank that completes the rendezvous stores its child before it
 * returns (NCCL's init thread may be that quick), the others from a thread when it completes. */
static ncclResult_t childCreate(struct ncclComm* comm, struct groupItem* item, ncclComm_t* newcomm) {
  item->kind = ITEM_OP;
  if (groupDepth > 0) {
    bootWarn("%s inside a group is not supported by the test bootstrap", opKindName[item->opKind]);
    return ncclInvalidUsage;
  }
  int runIt;
  struct bootOp* op;
  ncclResult_t res = opPost(item, &op, &runIt);
  if (res != ncclSuccess) return res;
  if (comm->blocking || runIt) {
    res = opFinish(comm, op, runIt);
    if (res == ncclSuccess) __atomic_store_n(newcomm, comm->child, __ATOMIC_RELEASE);
    if (comm->blocking) return res;
    pthread_mutex_lock(&bootLock);
    comm->asyncResult = res;
    pthread_mutex_unlock(&bootLock);
    return res == ncclSuccess ? ncclInProgress : res;
  }
  struct childWait* cw = malloc(sizeof(*cw));
  pthread_t thread;
  pthread_attr_t attr;
  pthread_mutex_lock(&bootLock);
  comm->asyncResult = ncclInProgress;
  comm->inCalls++;
  pthread_mutex_unlock(&bootLock);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (cw != NULL) *cw = (struct childWait){.parent = comm, .op = op, .newcomm = newcomm};
  if (cw == NULL || pthread_create(&thread, &attr, childWaitMain, cw) != 0) {
    free(cw);
    pthread_attr_destroy(&attr);
    bootWarn("cannot start the thread of a non-blocking split");
    res = opFinish(comm, op, 0); /* waits: no better way out of a posted rendezvous */
    if (res == ncclSuccess) __atomic_store_n(newcomm, comm->child, __ATOMIC_RELEASE);
    pthread_mutex_lock(&bootLock);
    comm->asyncResult = res;
    comm->inCalls--;
    pthread_mutex_unlock(&bootLock);
    return res;
  }
  pthread_attr_destroy(&attr);
  return ncclInProgress;
}

BOOT_API(ncclResult_t, ncclCommSplit,
         (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)) {
  if (comm == NULL || comm->world == NULL || newcomm == NULL) return ncclInvalidArgument;
  *newcomm = NULL;
  struct groupItem it = {.comm = comm, .opKind = OP_SPLIT,
                         .args = {.dev = comm->dev, .color = color, .key = key,
                                  .blocking = configBlocking(config, comm->blocking)}};
  return childCreate(comm, &it, newcomm);
}

/* The survivors (every rank not in excludeRanksList) meet in their own sequence of shrinks,
 * whatever the excluded ranks did; NCCL_SHRINK_ABORT changes nothing here (the bootstrap has no
 * operation in flight that a rank's own thread is not waiting in). */
BOOT_API(ncclResult_t, ncclCommShrink,
         (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
          ncclConfig_t* config, int shrinkFlags)) {
  (void)shrinkFlags;
  if (comm == NULL || comm->world == NULL || newcomm == NULL || excludeRanksList == NULL ||
      excludeRanksCount < 1 || excludeRanksCount >= comm->nranks)
    return ncclInvalidArgument;
  for (int i = 0; i < excludeRanksCount; i++) {
    if (excludeRanksList[i] == comm->rank || excludeRanksList[i] < 0 ||
        excludeRanksList[i] >= comm->nranks) {
      bootWarn("ncclCommShrink: rank %d cannot exclude rank %d", comm->rank, excludeRanksList[i]);
      return ncclInvalidArgument;
    }
    for (int j = 0; j < i; j++)
      if (excludeRanksList[j] == excludeRanksList[i]) return ncclInvalidArgument;
  }
  *newcomm = NULL;
  struct groupItem it = {.comm = comm, .opKind = OP_SPLIT,
                         .survivors = comm->nranks - excludeRanksCount,
                         .args = {.dev = comm->dev, .color = 0, .key = comm->rank,
                                  .blocking = configBlocking(config, comm->blocking)}};
  return childCreate(comm, &it, newcomm);
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
