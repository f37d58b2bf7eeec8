/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's operations: parts matched across ranks, stream-ordered collectives and
 * the runner thread that computes them, count-0 rendezvous, failures.
 *
 * A collective with count > 0 enqueues three things on the rank's stream and returns: a host
 * function that posts the rank's descriptor when the stream gets there, a wait until the
 * descriptor's flag word (pinned host memory) reads 1, and a write of 0 back (so that a graph's
 * replays can wait on the same word). When every rank has posted an operation, the runner thread
 * reads the inputs on a stream of its own (the ranks' streams wait, and their inputs were made
 * before they got there), computes on the host, writes the outputs, synchronizes its stream and
 * sets each flag to 1. Eager parts are matched in each rank's call order, graph replays' parts in
 * the order the ranks' streams reach them (a graph cannot know its replay's number). */
#include <cuda.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "boot_types.h"

/* CUDA 13 gave the edge-data form the plain name; 12.3-12.9 call it _v3. */
#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#endif

/* --- driver entry points (through the runtime: the bootstrap does not link libcuda) ---------- */

static __typeof__(&cuStreamWaitValue32) pWaitValue32;
static __typeof__(&cuStreamWriteValue32) pWriteValue32;
static __typeof__(&cuGetErrorString) pGetErrorString;
static pthread_once_t driverOnce = PTHREAD_ONCE_INIT;
static ncclResult_t driverResult = ncclSystemError;

static int lookup(const char* name, unsigned version, void* slot) {
  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err =
      cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == NULL) {
    (void)cudaGetLastError();
    bootWarn("driver entry point %s (version %u) not found: %s", name, version,
             cudaGetErrorString(err));
    return 0;
  }
  memcpy(slot, &fn, sizeof(fn)); /* ISO C has no object-to-function pointer cast */
  return 1;
}

static void driverLoad(void) {
  if (lookup("cuGetErrorString", 6000, &pGetErrorString) &&
      lookup("cuStreamWaitValue32", 12000, &pWaitValue32) &&
      lookup("cuStreamWriteValue32", 12000, &pWriteValue32))
    driverResult = ncclSuccess;
}

static const char* cuErrorText(CUresult res) {
  const char* text = NULL;
  if (pGetErrorString == NULL || pGetErrorString(res, &text) != CUDA_SUCCESS || text == NULL)
    text = "unknown error";
  return text;
}

#define BOOT_CU(call, res, label)                                                              \
  do {                                                                                         \
    CUresult cuErr_ = (call);                                                                  \
    if (cuErr_ != CUDA_SUCCESS) {                                                              \
      bootWarn("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cuErrorText(cuErr_));        \
      (res) = ncclUnhandledCudaError;                                                          \
      goto label;                                                                              \
    }                                                                                          \
  } while (0)

/* --- flag words ------------------------------------------------------------------------------ */

/* Pinned, device-mapped words in chunks kept for the process's life: freeing pinned memory
 * synchronizes the device, which must never happen while streams wait for us. Under bootLock. */
#define FLAG_CHUNK 16384 /* 64 KiB: growing while streams wait is best avoided */
static uint32_t** freeFlags; /* room for every word ever allocated */
static int freeCount, allFlags;
static pthread_mutex_t growLock = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t flagsGrow(int wanted) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&growLock); /* one allocation at a time; the others find its words */
  pthread_mutex_lock(&bootLock);
  const int have = freeCount;
  pthread_mutex_unlock(&bootLock);
  if (have >= wanted) goto unlock_grow;
  /* Allowed while this thread captures: the allocation is not stream work. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  BOOT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode), res, unlock_grow);
  uint32_t* chunk = NULL;
  void* mapped = NULL;
  BOOT_CUDA(cudaHostAlloc((void**)&chunk, FLAG_CHUNK * sizeof(uint32_t),
                          cudaHostAllocMapped | cudaHostAllocPortable),
            res, restore_mode);
  BOOT_CUDA(cudaHostGetDevicePointer(&mapped, chunk, 0), res, restore_mode);
  if (mapped != (void*)chunk) {
    /* Unified addressing (every 64-bit platform CUDA supports) makes them equal. */
    bootWarn("mapped flag words have another address on the device (%p, host %p)", mapped,
             (void*)chunk);
    res = ncclSystemError;
    goto restore_mode;
  }
  memset(chunk, 0, FLAG_CHUNK * sizeof(uint32_t));
  pthread_mutex_lock(&bootLock);
  uint32_t** grown = realloc(freeFlags, (size_t)(allFlags + FLAG_CHUNK) * sizeof(*grown));
  if (grown != NULL) {
    freeFlags = grown;
    allFlags += FLAG_CHUNK;
    for (int i = 0; i < FLAG_CHUNK; i++) freeFlags[freeCount++] = chunk + i;
  }
  pthread_mutex_unlock(&bootLock);
  if (grown == NULL) res = ncclSystemError; /* the chunk is kept: it cannot be freed safely */
restore_mode:
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
unlock_grow:
  pthread_mutex_unlock(&growLock);
  return res;
}

ncclResult_t bootFlagsReserve(int ranks) { return flagsGrow(ranks + 64); }

/* --- descriptors ----------------------------------------------------------------------------- */

/* Descriptors no owner holds any more whose stream may still touch them (freed once quiet). */
static struct bootDesc* zombies;
static pthread_cond_t runnerCond;

/* Nothing will touch it: its stream has passed the reset (or never got a wait). A wait whose
 * reset could not be enqueued keeps its descriptor for ever (a CUDA error already failed all). */
static int descQuiet(const struct bootDesc* d) {
  if (d->stage == 2) return 0;
  if (d->state == DESC_IDLE) return 1;
  if (d->state != DESC_RELEASED) return 0;
  return d->stage < 2 || __atomic_load_n(d->flag, __ATOMIC_ACQUIRE) == 0;
}

static void descFreeLocked(struct bootDesc* d) {
  *d->flag = 0;
  freeFlags[freeCount++] = d->flag;
  bootWorldUnrefLocked(d->world);
  free(d);
}

static void descUnrefLocked(struct bootDesc* d) {
  if (--d->refs > 0) return;
  if (d->stage == 2) return; /* kept for ever (see descQuiet), not polled */
  if (descQuiet(d)) {
    descFreeLocked(d);
    return;
  }
  d->next = zombies;
  zombies = d;
  pthread_cond_signal(&runnerCond); /* it reaps them */
}

static void reapLocked(void) {
  for (struct bootDesc** link = &zombies; *link;) {
    struct bootDesc* d = *link;
    if (descQuiet(d)) {
      *link = d->next;
      descFreeLocked(d);
    } else {
      link = &d->next;
    }
  }
}

/* Lets the stream go on: a plain store to host memory, after everything it guards. */
static void descReleaseLocked(struct bootDesc* d) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(d->flag, 1u, __ATOMIC_RELEASE);
  d->state = DESC_RELEASED;
  pthread_cond_broadcast(&bootCond);
}

/* A quiet eager descriptor of comm to reuse, or a new one; NULL when no flag word is free. */
static struct bootDesc* descTakeLocked(struct ncclComm* comm, int graph) {
  reapLocked();
  if (!graph)
    for (struct bootDesc* d = comm->eager; d; d = d->next)
      if (descQuiet(d)) {
        *d->flag = 0; /* a word no wait consumed may still read 1 */
        return d;
      }
  if (freeCount == 0) return NULL;
  struct bootDesc* d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->flag = freeFlags[--freeCount];
  d->owner = comm;
  d->world = comm->world;
  comm->world->refs++;
  d->rank = comm->rank;
  d->graph = graph;
  d->refs = 1;
  struct bootDesc** list = graph ? &comm->graphs : &comm->eager;
  d->next = *list;
  *list = d;
  return d;
}

/* A graph is gone (all its executable graphs too): its descriptor may go with it. */
static void CUDART_CB graphRelease(void* arg) {
  struct bootDesc* d = arg;
  pthread_mutex_lock(&bootLock);
  if (d->owner != NULL) {
    struct bootDesc** link = &d->owner->graphs;
    while (*link != d) link = &(*link)->next;
    *link = d->next;
    d->owner = NULL;
    descUnrefLocked(d);
  }
  descUnrefLocked(d);
  pthread_mutex_unlock(&bootLock);
}

/* --- worlds ---------------------------------------------------------------------------------- */

static struct bootWorld* liveWorlds;

void bootWorldLinkLocked(struct bootWorld* w) {
  w->liveNext = liveWorlds;
  liveWorlds = w;
}

void bootWorldUnrefLocked(struct bootWorld* w) {
  if (--w->refs > 0) return;
  struct bootWorld** link = &liveWorlds;
  while (*link && *link != w) link = &(*link)->liveNext;
  if (*link) *link = w->liveNext;
  while (w->ops) {
    struct bootOp* op = w->ops;
    w->ops = op->next;
    free(op);
  }
  free(w);
}

void bootWorldFailLocked(struct bootWorld* w, ncclResult_t err, const char* fmt, ...) {
  if (w->error == ncclSuccess) {
    w->error = err;
    if (fmt != NULL) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(w->errorText, sizeof(w->errorText), fmt, ap);
      va_end(ap);
      fprintf(stderr, "nccl-bootstrap: %s\n", w->errorText);
    }
  }
  /* Records stay until the world goes (count-0 callers may still look at theirs). */
  for (struct bootOp* op = w->ops; op; op = op->next)
    if (op->shape.count > 0)
      for (int r = 0; r < w->nranks; r++)
        if (op->parts[r] != NULL) {
          if (op->parts[r]->state == DESC_POSTED) descReleaseLocked(op->parts[r]);
          op->parts[r] = NULL;
        }
  pthread_cond_broadcast(&bootCond);
}

/* --- matching -------------------------------------------------------------------------------- */

/* The record of operation (graph, seq), made by the first rank's part. NULL when the world
 * failed, here or before (a part that differs from the others' fails it). */
static struct bootOp* opFindLocked(struct bootWorld* w, int graph, uint64_t seq,
                                   const struct opShape* s, int rank) {
  if (w->error != ncclSuccess) return NULL;
  struct bootOp** link = &w->ops;
  while (*link && ((*link)->seq != seq || (*link)->graph != graph)) link = &(*link)->next;
  struct bootOp* op = *link;
  if (op == NULL) {
    op = calloc(1, sizeof(*op) + (size_t)w->nranks * sizeof(op->parts[0]));
    if (op == NULL) {
      bootWorldFailLocked(w, ncclSystemError, "rank %d: out of host memory", rank);
      return NULL;
    }
    op->world = w;
    op->graph = graph;
    op->seq = seq;
    op->shape = *s;
    op->deadline = bootDeadline();
    *link = op; /* at the end: the runner takes the oldest ready operation first */
    return op;
  }
  const struct opShape* o = &op->shape;
  if (o->kind != s->kind || o->count != s->count || o->type != s->type || o->redOp != s->redOp ||
      o->root != s->root) {
    bootWorldFailLocked(w, ncclInvalidUsage,
                        "rank %d: %s operation #%llu is %s count %zu type %d op %d root %d here "
                        "but %s count %zu type %d op %d root %d on another rank",
                        rank, graph ? "graph" : "eager", (unsigned long long)seq,
                        bootOpName[s->kind], s->count, (int)s->type, (int)s->redOp, s->root,
                        bootOpName[o->kind], o->count, (int)o->type, (int)o->redOp, o->root);
    return NULL;
  }
  return op;
}

/* The host function: this rank's stream reached the operation. No CUDA, never blocks long. */
static void CUDART_CB hostPost(void* arg) {
  struct bootDesc* d = arg;
  pthread_mutex_lock(&bootLock);
  struct bootWorld* w = d->world;
  if (d->state == DESC_POSTED)
    bootWorldFailLocked(w, ncclInvalidUsage,
                        "rank %d: a graph of bootstrap operations ran again before its previous "
                        "launch ended (two executable graphs of one capture at once?)", d->rank);
  else if (w->ranks[d->rank] == NULL)
    bootWorldFailLocked(w, ncclInvalidUsage,
                        "rank %d: a graph of bootstrap operations ran after its communicator "
                        "was destroyed", d->rank);
  const uint64_t seq = d->graph ? w->graphSeq[d->rank]++ : d->seq;
  struct bootOp* op = opFindLocked(w, d->graph, seq, &d->shape, d->rank);
  if (op == NULL) {
    descReleaseLocked(d); /* a failed world runs nothing: the stream just goes on */
  } else {
    op->parts[d->rank] = d;
    d->state = DESC_POSTED;
    op->posted++;
    pthread_cond_signal(&runnerCond); /* a full operation to run, or a deadline to watch */
  }
  pthread_mutex_unlock(&bootLock);
}

/* --- the runner ------------------------------------------------------------------------------ */

/* Its own stream per device: never the legacy stream (it waits for blocking streams, where a
 * kernel may spin for a rank that waits on us), never a rank's stream (it waits for us). The
 * greatest priority, in the hope of a hardware queue apart from the ranks' streams. */
static cudaStream_t runnerStreams[BOOT_MAX_RANKS];

static cudaError_t runnerStream(int dev, cudaStream_t* out) {
  if (dev < 0 || dev >= BOOT_MAX_RANKS) return cudaErrorInvalidDevice;
  if (runnerStreams[dev] == NULL) {
    int least = 0, greatest = 0;
    cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (err == cudaSuccess)
      err = cudaStreamCreateWithPriority(&runnerStreams[dev], cudaStreamNonBlocking, greatest);
    if (err != cudaSuccess) return err;
  }
  *out = runnerStreams[dev];
  return cudaSuccess;
}

/* The runner's host copy of inputs and results: pinned, so that its copies are truly
 * asynchronous. A copy to pageable memory waits inside the driver, holding locks that rank
 * threads need to launch the very work (kernels, host functions) the copy may be queued behind:
 * seen as a hang of test_allreduce with 3 ranks on one GPU. Grown, never freed: freeing pinned
 * memory synchronizes the device, where streams wait for this runner. Runner thread only. */
static char* scratch;
static size_t scratchBytes;

static cudaError_t scratchReserve(size_t bytes) {
  if (bytes <= scratchBytes) return cudaSuccess;
  size_t want = scratchBytes * 2 > bytes ? scratchBytes * 2 : bytes;
  char* grown = NULL;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = cudaHostAlloc((void**)&grown, want, cudaHostAllocPortable);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) return err;
  scratch = grown; /* the old block is kept (see above): at most as much again in all */
  scratchBytes = want;
  return cudaSuccess;
}

/* Reads every input, computes, writes every output, all complete on return. No lock held. */
static ncclResult_t opCompute(const struct bootOp* op, int nranks) {
  ncclResult_t res = ncclSuccess;
  const struct opShape* s = &op->shape;
  size_t elt = symmTypeSize(s->type);
  size_t inCount = s->count, outCount = s->count; /* per rank, in elements */
  if (s->kind == OP_ALLGATHER) outCount = s->count * (size_t)nranks;
  if (s->kind == OP_REDUCESCATTER) inCount = s->count * (size_t)nranks;
  int savedDev = -1;
  cudaStream_t stream;
  void** inputs = calloc((size_t)nranks, sizeof(void*));
  const size_t resultBytes = outCount * elt > inCount * elt ? outCount * elt : inCount * elt;
  if (inputs == NULL) {
    res = ncclSystemError;
    goto free_host;
  }
  BOOT_CUDA(scratchReserve(resultBytes + (size_t)nranks * inCount * elt), res, free_host);
  void* result = scratch;
  BOOT_CUDA(cudaGetDevice(&savedDev), res, free_host);
  /* Inputs first (some may alias outputs: in-place operations). */
  for (int r = 0; r < nranks; r++) {
    const struct rankArgs* a = &op->parts[r]->args;
    if (s->kind == OP_BROADCAST && r != s->root) continue;
    inputs[r] = scratch + resultBytes + (size_t)r * inCount * elt;
    BOOT_CUDA(cudaSetDevice(a->dev), res, restore_device);
    BOOT_CUDA(runnerStream(a->dev, &stream), res, restore_device);
    BOOT_CUDA(cudaMemcpyAsync(inputs[r], a->send, inCount * elt, cudaMemcpyDefault, stream), res,
              restore_device);
    BOOT_CUDA(cudaStreamSynchronize(stream), res, restore_device);
  }
  switch (s->kind) {
    case OP_ALLGATHER:
      for (int r = 0; r < nranks; r++)
        memcpy((char*)result + (size_t)r * inCount * elt, inputs[r], inCount * elt);
      break;
    case OP_BROADCAST: memcpy(result, inputs[s->root], inCount * elt); break;
    default:
      res = bootReduce(result, (const void* const*)inputs, nranks, inCount, s->type, s->redOp);
      if (res != ncclSuccess) goto restore_device;
      break;
  }
  for (int r = 0; r < nranks; r++) {
    const struct rankArgs* a = &op->parts[r]->args;
    if (s->kind == OP_REDUCE && r != s->root) continue;
    const char* src = result;
    if (s->kind == OP_REDUCESCATTER) src += (size_t)r * outCount * elt;
    BOOT_CUDA(cudaSetDevice(a->dev), res, restore_device);
    BOOT_CUDA(runnerStream(a->dev, &stream), res, restore_device);
    BOOT_CUDA(cudaMemcpyAsync(a->recv, src, outCount * elt, cudaMemcpyDefault, stream), res,
              restore_device);
    /* The flag may be set only once the data is there, and the next operation reuses the
     * source. */
    BOOT_CUDA(cudaStreamSynchronize(stream), res, restore_device);
  }
restore_device:
  if (savedDev >= 0) (void)cudaSetDevice(savedDev);
free_host:
  free(inputs);
  return res;
}

/* Takes the next operation every rank posted; fails worlds whose operations waited too long.
 * Sets *pending when some operation still waits for ranks. */
static struct bootOp* nextOpLocked(struct bootWorld** world, int* pending) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  *pending = 0;
  for (struct bootWorld* w = liveWorlds; w; w = w->liveNext) {
    if (w->error != ncclSuccess) continue;
    for (struct bootOp** link = &w->ops; *link; link = &(*link)->next) {
      struct bootOp* op = *link;
      if (op->shape.count == 0) continue; /* rendezvous: its callers wait for it */
      if (op->posted == w->nranks) {
        *link = op->next;
        *world = w;
        return op;
      }
      if (now.tv_sec > op->deadline.tv_sec ||
          (now.tv_sec == op->deadline.tv_sec && now.tv_nsec >= op->deadline.tv_nsec)) {
        int first = -1;
        for (int r = 0; r < w->nranks && first < 0; r++)
          if (op->parts[r] != NULL) first = r;
        bootWorldFailLocked(w, ncclSystemError,
                            "rank %d: %s #%llu: only %d of %d ranks posted within %d s", first,
                            bootOpName[op->shape.kind], (unsigned long long)op->seq, op->posted,
                            w->nranks, bootWaitLimitSeconds());
        break;
      }
      *pending = 1;
    }
  }
  return NULL;
}

static void* runnerMain(void* arg) {
  (void)arg;
  /* Our copies are not part of anybody's capture, whatever mode another thread captures in. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  pthread_mutex_lock(&bootLock);
  for (;;) {
    reapLocked();
    struct bootWorld* w = NULL;
    int pending = 0;
    struct bootOp* op = nextOpLocked(&w, &pending);
    if (op != NULL) {
      w->running++;
      pthread_mutex_unlock(&bootLock);
      ncclResult_t res = opCompute(op, w->nranks);
      pthread_mutex_lock(&bootLock);
      w->running--;
      if (res != ncclSuccess)
        bootWorldFailLocked(w, res, "%s #%llu failed in the bootstrap's runner (%s)",
                            bootOpName[op->shape.kind], (unsigned long long)op->seq,
                            ncclGetErrorString(res));
      /* Posted parts stay posted (and alive) until here, failure or not. */
      for (int r = 0; r < w->nranks; r++) descReleaseLocked(op->parts[r]);
      free(op);
      continue;
    }
    if (pending || zombies != NULL) {
      struct timespec wake;
      clock_gettime(CLOCK_MONOTONIC, &wake);
      wake.tv_nsec += 50 * 1000 * 1000; /* deadlines and zombies are polled */
      if (wake.tv_nsec >= 1000000000L) {
        wake.tv_sec++;
        wake.tv_nsec -= 1000000000L;
      }
      (void)pthread_cond_timedwait(&runnerCond, &bootLock, &wake);
    } else {
      pthread_cond_wait(&runnerCond, &bootLock);
    }
  }
  return NULL;
}

static pthread_once_t runnerOnce = PTHREAD_ONCE_INIT;
static ncclResult_t runnerResult = ncclSystemError;

static void runnerStart(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&runnerCond, &attr);
  pthread_condattr_destroy(&attr);
  pthread_t tid;
  int err = pthread_create(&tid, NULL, runnerMain, NULL);
  if (err != 0) {
    bootWarn("cannot start the bootstrap's runner thread: %s", strerror(err));
    return;
  }
  pthread_detach(tid); /* for the process's life: worlds come and go */
  runnerResult = ncclSuccess;
}

/* --- enqueueing ------------------------------------------------------------------------------ */

ncclResult_t bootEnqueue(struct ncclComm* comm, const struct opShape* shape,
                         const struct rankArgs* args) {
  struct bootWorld* w = NULL;
  ncclResult_t res = ncclSuccess;
  pthread_once(&driverOnce, driverLoad);
  pthread_once(&runnerOnce, runnerStart);
  if (driverResult != ncclSuccess || runnerResult != ncclSuccess) return ncclSystemError;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  BOOT_CUDA(cudaStreamGetCaptureInfo(args->stream, &capture, NULL, &graph, NULL, NULL, NULL), res,
            out);
  if (capture == cudaStreamCaptureStatusInvalidated) {
    bootWarn("%s: the graph capture of stream %p was invalidated before this call",
             bootOpName[shape->kind], (void*)args->stream);
    return ncclUnhandledCudaError;
  }
  const int captured = capture == cudaStreamCaptureStatusActive;
  struct bootDesc* d = NULL;
  for (;;) {
    pthread_mutex_lock(&bootLock);
    w = comm->world; /* NULL once aborted (from another thread) */
    if (w == NULL || w->error != ncclSuccess) {
      res = w == NULL ? ncclInvalidUsage : w->error;
      pthread_mutex_unlock(&bootLock);
      return res; /* a failed world runs nothing more */
    }
    d = descTakeLocked(comm, captured);
    if (d != NULL) break;
    const int needFlags = freeCount == 0;
    pthread_mutex_unlock(&bootLock);
    if (!needFlags) return ncclSystemError; /* calloc failed */
    res = flagsGrow(1);
    if (res != ncclSuccess) return res;
  }
  d->shape = *shape;
  d->args = *args;
  d->state = captured ? DESC_IDLE : DESC_PENDING;
  d->seq = captured ? 0 : comm->nextSeq++;
  d->stage = 3; /* corrected below if enqueueing fails */
  if (captured) d->refs++; /* the graph's, handed to it below */
  pthread_mutex_unlock(&bootLock);

  int stage = 0, savedDev = -1;
  if (captured) {
    /* The graph owns the descriptor as long as it (or an executable graph of it) exists. */
    cudaUserObject_t object;
    cudaError_t err = cudaUserObjectCreate(&object, d, graphRelease, 1,
                                           cudaUserObjectNoDestructorSync);
    if (err != cudaSuccess) {
      bootWarn("%s:%d: cudaUserObjectCreate failed: %s", __FILE__, __LINE__,
               cudaGetErrorString(err));
      pthread_mutex_lock(&bootLock);
      descUnrefLocked(d); /* the graph's reference, never handed over */
      pthread_mutex_unlock(&bootLock);
      res = ncclUnhandledCudaError;
      goto fail_world;
    }
    BOOT_CUDA(cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove), res,
              release_object);
    goto enqueue;
  release_object:
    (void)cudaUserObjectRelease(object, 1); /* graphRelease frees the descriptor */
    goto fail_world;
  }
enqueue:
  BOOT_CUDA(cudaGetDevice(&savedDev), res, fail_world);
  BOOT_CUDA(cudaSetDevice(comm->dev), res, restore_device);
  BOOT_CUDA(cudaLaunchHostFunc(args->stream, hostPost, d), res, restore_device);
  stage = 1;
  const CUdeviceptr flag = (CUdeviceptr)(uintptr_t)d->flag;
  BOOT_CU(pWaitValue32((CUstream)args->stream, flag, 1, CU_STREAM_WAIT_VALUE_EQ), res,
          restore_device);
  stage = 2;
  BOOT_CU(pWriteValue32((CUstream)args->stream, flag, 0, CU_STREAM_WRITE_VALUE_DEFAULT), res,
          restore_device);
  stage = 3;
  (void)cudaSetDevice(savedDev);
  return ncclSuccess;
restore_device:
  (void)cudaSetDevice(savedDev);
fail_world:
  /* Peers would wait for this part (or its stream for a flag nobody sets): fail everyone. */
  pthread_mutex_lock(&bootLock);
  if (!captured) { /* a captured one is the graph's (it may be gone): left as it is */
    d->stage = stage;
    if (stage == 0) d->state = DESC_IDLE;
  }
  bootWorldFailLocked(w, res, "rank %d: enqueueing %s failed", comm->rank, bootOpName[shape->kind]);
  pthread_mutex_unlock(&bootLock);
out:
  return res;
}

/* --- count 0: a rendezvous on the host ---------------------------------------------------- */

ncclResult_t bootSyncPost(struct ncclComm* comm, const struct opShape* shape, struct bootOp** out) {
  ncclResult_t res = ncclSuccess;
  *out = NULL;
  pthread_mutex_lock(&bootLock);
  struct bootWorld* w = comm->world;
  struct bootOp* op = w != NULL && w->error == ncclSuccess
                          ? opFindLocked(w, 0, comm->nextSeq++, shape, comm->rank)
                          : NULL;
  if (op == NULL) {
    res = w == NULL ? ncclInvalidUsage : w->error;
  } else {
    w->refs++; /* until the wait is over */
    if (++op->posted == w->nranks) {
      op->done = 1;
      pthread_cond_broadcast(&bootCond);
    }
  }
  pthread_mutex_unlock(&bootLock);
  *out = op;
  return res;
}

ncclResult_t bootSyncWait(struct ncclComm* comm, struct bootOp* op) {
  struct bootWorld* w = op->world;
  struct timespec deadline = bootDeadline();
  pthread_mutex_lock(&bootLock);
  while (!op->done && w->error == ncclSuccess)
    if (pthread_cond_timedwait(&bootCond, &bootLock, &deadline) == ETIMEDOUT)
      bootWorldFailLocked(w, ncclSystemError,
                          "rank %d: %s #%llu: only %d of %d ranks posted within %d s", comm->rank,
                          bootOpName[op->shape.kind], (unsigned long long)op->seq, op->posted,
                          w->nranks, bootWaitLimitSeconds());
  ncclResult_t res = op->done ? ncclSuccess : w->error;
  /* The last caller frees a finished record (one of a failed world is the world's to free). */
  if (op->done && ++op->finished == w->nranks) {
    struct bootOp** link = &w->ops;
    while (*link != op) link = &(*link)->next;
    *link = op->next;
    free(op);
  }
  bootWorldUnrefLocked(w);
  pthread_mutex_unlock(&bootLock);
  return res;
}

/* --- synchronous mode, communicator teardown ------------------------------------------------ */

int bootSyncMode(void) {
  static int mode = -1;
  int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
  if (m < 0) {
    const char* s = getenv("SYMM_BOOTSTRAP_SYNC");
    m = s != NULL && atoi(s) == 1;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  }
  return m;
}

ncclResult_t bootStreamWait(struct ncclComm* comm, cudaStream_t stream) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BOOT_CUDA(cudaStreamIsCapturing(stream, &capture), res, out);
  if (capture != cudaStreamCaptureStatusNone) return ncclSuccess;
  BOOT_CUDA(cudaStreamSynchronize(stream), res, out);
  pthread_mutex_lock(&bootLock);
  res = comm->world != NULL ? comm->world->error : ncclInvalidUsage;
  pthread_mutex_unlock(&bootLock);
out:
  return res;
}

static int commBusyLocked(const struct ncclComm* comm) {
  for (const struct bootDesc* d = comm->eager; d; d = d->next)
    if (d->state == DESC_PENDING || d->state == DESC_POSTED) return 1;
  for (const struct bootDesc* d = comm->graphs; d; d = d->next)
    if (d->state == DESC_POSTED) return 1;
  return 0;
}

void bootCommQuiesce(struct ncclComm* comm) {
  struct bootWorld* w = comm->world;
  struct timespec deadline = bootDeadline();
  pthread_mutex_lock(&bootLock);
  while (w->error == ncclSuccess && commBusyLocked(comm))
    if (pthread_cond_timedwait(&bootCond, &bootLock, &deadline) == ETIMEDOUT)
      bootWorldFailLocked(w, ncclSystemError,
                          "rank %d: operations still enqueued %d s after ncclCommDestroy or "
                          "ncclCommFinalize was called", comm->rank, bootWaitLimitSeconds());
  pthread_mutex_unlock(&bootLock);
}

/* The communicator's references; descriptors a stream may still touch wait as zombies. */
void bootCommDropLocked(struct ncclComm* comm) {
  struct bootDesc* lists[2] = {comm->eager, comm->graphs};
  comm->eager = comm->graphs = NULL;
  for (int i = 0; i < 2; i++)
    while (lists[i] != NULL) {
      struct bootDesc* d = lists[i];
      lists[i] = d->next;
      d->owner = NULL;
      descUnrefLocked(d);
    }
}
