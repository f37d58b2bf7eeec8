/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's operations: a group's queued posts, posting an operation, running it on
 * the host for every rank (the rank that posts last), splits' new worlds, waiting for the result. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot_types.h"
#include "bootstrap.h"

/* --- groups: queued posts, made at the outermost GroupEnd ----------------------------------- */

__thread int groupDepth;
__thread struct groupItem* groupItems;
__thread int groupCount, groupCap;
__thread ncclResult_t groupError;

ncclResult_t groupQueue(const struct groupItem* item) {
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

ncclResult_t opPost(struct groupItem* item, struct bootOp** out, int* runIt) {
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
ncclResult_t opFinish(struct ncclComm* comm, struct bootOp* op, int runIt) {
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

static int discardEmpty(void) {
  static int cached = -1; /* read once; a race only reads the same variable twice */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    const char* env = getenv("SYMM_BOOTSTRAP_DISCARD_EMPTY");
    v = env != NULL && atoi(env) != 0;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

ncclResult_t collective(struct groupItem* item) {
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
  /* NCCL discards an empty collective here, without meeting its peers. By default the bootstrap
   * posts it (the tests' type-mismatch checks meet on it); SYMM_BOOTSTRAP_DISCARD_EMPTY=1 does as
   * NCCL does, so that bench/host_path can time an empty call without a rendezvous. */
  if (item->count == 0 && discardEmpty()) return ncclSuccess;
  item->args.dev = comm->dev; /* NCCL uses the communicator's device, whatever is current */
  item->kind = ITEM_OP;
  if (groupDepth > 0) return groupQueue(item);
  int runIt;
  struct bootOp* op;
  ncclResult_t res = opPost(item, &op, &runIt);
  if (res != ncclSuccess) return res;
  return opFinish(comm, op, runIt);
}
