/* SPDX-License-Identifier: Apache-2.0 */
/* The one enqueue path (src/include/enqueue.h). */
#include "enqueue.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "failure.h"
#include "forward.h"
#include "group.h"
#include "init.h"
#include "order.h"
#include "param.h"
#include "transport.h"
#include "tuner.h"
#include "cudriver.h"

SYMMCOLL_PARAM_FULL(TestFailRank, "TEST_FAIL_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: on this rank, one launch of ours (TEST_FAIL_CALL) behaves as a "
                    "kernel that gave up (error word and every rank's failure word)")
SYMMCOLL_PARAM_FULL(TestFailCall, "TEST_FAIL_CALL", 0, 0, INT64_MAX, SYMM_PARAM_TEST,
                    "tests only: which launch of ours (counted per communicator from 0) fails on "
                    "the rank TEST_FAIL_RANK names")

SYMMCOLL_PARAM_FULL(Pdl, "PDL", 1, 0, 1, SYMM_PARAM_AGREED,
                    "launch our kernels with programmatic dependent launch where every rank is "
                    "sm_90+: the next kernel of ours on a stream is scheduled while one runs "
                    "(0 = plain launches)")

static const char* const opNames[SYMM_NCOLLS] = {"ncclAllReduce", "ncclAllGather",
                                                 "ncclReduceScatter"};

ncclResult_t symmArgsCheck(const struct symmTask* task, int nranks, int arch, int* ncclDecides) {
  *ncclDecides = 0;
  const char* name = opNames[task->coll];
  const size_t esize = symmTypeSize(task->datatype);
  if (esize == 0) {
    WARN("%s: invalid datatype %d", name, (int)task->datatype);
    return ncclInvalidArgument;
  }
  const int reduces = task->coll != SYMM_COLL_ALLGATHER;
  if (reduces && (int)task->op < 0) {
    WARN("%s: invalid reduction operation %d", name, (int)task->op);
    return ncclInvalidArgument;
  }
  /* nranks * count * esize must fit (all-gather's output, reduce-scatter's input). */
  const size_t scale = task->coll == SYMM_COLL_ALLREDUCE || nranks < 1 ? 1 : (size_t)nranks;
  if (task->count > SIZE_MAX / esize / scale) {
    WARN("%s: count %zu of %zu-byte elements overflows", name, task->count, esize);
    return ncclInvalidArgument;
  }
  if (reduces && arch > 0 && arch < 90 &&
      (task->datatype == ncclFloat8e4m3 || task->datatype == ncclFloat8e5m2)) {
    WARN("%s: fp8 reductions need sm_90 or newer on every rank", name);
    return ncclInvalidArgument;
  }
  /* User-defined ops (ncclRedOpCreatePreMulSum) belong to the real NCCL, which checks them;
   * so do empty calls and NULL buffers (NCCL checks pointers only when asked to). */
  if ((reduces && (int)task->op >= (int)ncclNumOps) || task->count == 0 ||
      task->sendbuff == NULL || task->recvbuff == NULL)
    *ncclDecides = 1;
  return ncclSuccess;
}

void symmGridBounds(const struct symmCommConfig* config, int* maxBlocks, int* minBlocks) {
  int most = config->maxCTAs > 0 ? config->maxCTAs : 0;
  if (config->ctaPolicy & NCCL_CTA_POLICY_EFFICIENCY)
    most = most > 0 && most < SYMM_EFFICIENCY_BLOCKS ? most : SYMM_EFFICIENCY_BLOCKS;
  int least = config->minCTAs > 0 ? config->minCTAs : 0;
  if (most > 0 && least > most) least = most;
  *maxBlocks = most;
  *minBlocks = least;
}

int symmPolicyAllows(int ctaPolicy, enum symmAlgo algo) {
  if (algo == SYMM_ALGO_NCCL) return 1;
  if (ctaPolicy & NCCL_CTA_POLICY_ZERO) return algo == SYMM_ALGO_COPYENGINE;
  return 1;
}

/* ---- the communicator's device ------------------------------------------------------------ */

/* The current device, from the driver where it answers (0.02 us cheaper per call on an H100
 * than the runtime); the runtime when there is no current context. */
static cudaError_t currentDevice(int* dev) {
  CUdevice d;
  if (symmCu.p_cuCtxGetDevice != NULL && symmCu.p_cuCtxGetDevice(&d) == CUDA_SUCCESS) {
    *dev = (int)d;
    return cudaSuccess;
  }
  return cudaGetDevice(dev);
}

/* Every entry point that makes CUDA calls for a communicator runs them under its device, as
 * NCCL does: one thread may drive several GPUs (ncclCommInitAll, nccl-tests -g N), and events,
 * streams and launches must belong to the communicator's GPU, whatever is current. *saved is
 * what to restore (-1: nothing). */
static ncclResult_t enterDevice(const struct symmComm* comm, int* saved) {
  *saved = -1;
  if (!comm->attrsKnown) return ncclSuccess;
  int cur = -1;
  if (currentDevice(&cur) != cudaSuccess) {
    /* No device to switch from (none at all, say): the calls below report what is wrong. */
    (void)cudaGetLastError();
    return ncclSuccess;
  }
  if (cur == comm->cudaDev) return ncclSuccess;
  if (cudaSetDevice(comm->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("cannot make device %d current for communicator %p", comm->cudaDev, (void*)comm->real);
    return ncclUnhandledCudaError;
  }
  *saved = cur;
  return ncclSuccess;
}

static void leaveDevice(int saved) {
  if (saved >= 0 && cudaSetDevice(saved) != cudaSuccess) (void)cudaGetLastError();
}

/* ---- forwarding ------------------------------------------------------------------------------ */

static ncclResult_t callReal(const struct symmTask* t) {
  ncclResult_t res = ncclSystemError;
  switch (t->coll) {
    case SYMM_COLL_ALLREDUCE:
      SYMM_CALL_REAL(res, ncclAllReduce, (t->sendbuff, t->recvbuff, t->count, t->datatype, t->op,
                                          t->comm, t->stream));
      break;
    case SYMM_COLL_ALLGATHER:
      SYMM_CALL_REAL(res, ncclAllGather, (t->sendbuff, t->recvbuff, t->count, t->datatype, t->comm,
                                          t->stream));
      break;
    case SYMM_COLL_REDUCESCATTER:
      SYMM_CALL_REAL(res, ncclReduceScatter, (t->sendbuff, t->recvbuff, t->count, t->datatype,
                                              t->op, t->comm, t->stream));
      break;
    default:
      break;
  }
  return res;
}

/* After an operation forwarded inside a group: ordered once the group has launched it. */
struct forwardedMark {
  struct symmComm* comm;
  cudaStream_t stream;
  struct symmCapture before;
};

/* `before`: the stream as symmCaptureOf saw it before the real call (a capture's dependencies
 * are read again here). */
static ncclResult_t orderAfterForwarded(struct symmComm* comm, cudaStream_t stream,
                                        const struct symmCapture* before) {
  int saved = -1;
  ncclResult_t res = enterDevice(comm, &saved);
  pthread_mutex_lock(&comm->launchLock);
  if (res == ncclSuccess && symmTransportLaunchPeers(comm) != NULL)
    res = symmOrderAfter(&comm->order, stream, before);
  if (res != ncclSuccess) symmCommFail(comm, SYMM_ERR_LAUNCH, 1);
  pthread_mutex_unlock(&comm->launchLock);
  leaveDevice(saved);
  return res;
}

static ncclResult_t runForwardedMark(void* arg, int launch) {
  struct forwardedMark* m = arg;
  ncclResult_t res = launch ? orderAfterForwarded(m->comm, m->stream, &m->before) : ncclSuccess;
  free(m);
  return res;
}

/* The ordering half of a forwarded call on a communicator of ours, under its device (the
 * caller's current device is restored by symmForwardLeave). */
static ncclResult_t forwardEnter(struct symmComm* comm, cudaStream_t stream,
                                 struct symmForwardScope* s) {
  s->comm = comm;
  s->stream = stream;
  ncclResult_t res = enterDevice(comm, &s->savedDev);
  if (res != ncclSuccess) return res;
  pthread_mutex_lock(&comm->launchLock);
  res = symmCommHealth(comm);
  if (res == ncclSuccess && symmTransportLaunchPeers(comm) != NULL) {
    res = symmCaptureOf(stream, &s->capture);
    if (res == ncclSuccess) res = symmOrderBefore(&comm->order, stream, &s->capture);
    if (res != ncclSuccess) symmCommFail(comm, SYMM_ERR_LAUNCH, 1);
    s->ordered = res == ncclSuccess;
  }
  pthread_mutex_unlock(&comm->launchLock);
  return res;
}

static void forwardLeave(struct symmForwardScope* s) {
  if (s->ordered) {
    if (symmGroupDepth() > 0) {
      struct forwardedMark* m = malloc(sizeof(*m));
      if (m != NULL) {
        *m = (struct forwardedMark){.comm = s->comm, .stream = s->stream, .before = s->capture};
        m->before.deps = NULL; /* read again at the group's end */
        m->before.ndeps = 0;
        if (symmGroupDeferOp(s->comm, SYMM_DEFERRED_FORWARDED, 0, runForwardedMark, m) != ncclSuccess)
          free(m);
      }
    } else {
      (void)orderAfterForwarded(s->comm, s->stream, &s->capture);
    }
  }
  leaveDevice(s->savedDev);
  s->savedDev = -1;
}

ncclResult_t symmForwardBegin(ncclComm_t real, cudaStream_t stream, struct symmForwardScope* s) {
  memset(s, 0, sizeof(*s));
  s->savedDev = -1;
  if (symmRealDepth > 0) return ncclSuccess;
  struct symmComm* comm = symmCommAcquire(real);
  if (comm == NULL) return ncclSuccess;
  s->comm = comm;
  if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
  symmCommWaitJob(comm);
  ncclResult_t res = symmGroupRunParked(comm);
  if (res == ncclInProgress) {
    WARN("a call on communicator %p before the previous operation returned ncclSuccess",
         (void*)real);
    return ncclInvalidArgument;
  }
  if (res == ncclSuccess) res = forwardEnter(comm, stream, s);
  if (res != ncclSuccess && symmGroupDepth() > 0) symmGroupPoison(real);
  return res;
}

void symmForwardEnd(struct symmForwardScope* s, ncclResult_t realResult) {
  (void)realResult;
  if (s->comm == NULL) return;
  forwardLeave(s);
  symmCommRelease(s->comm);
  s->comm = NULL;
}

/* ---- our launches ---------------------------------------------------------------------------- */

/* A launch of ours, decided: run now or at the outermost GroupEnd. */
struct launchOp {
  struct symmComm* comm;
  struct symmTask task;
  struct symmLaunch call;
  void* windowPeers[SYMM_MAX_RANKS];
};

/* Caller holds comm->launchLock. The comm is healthy and has peers. `record`: NULL, or where
 * this call's launch was recorded by an identical earlier call (replayed when valid) or is
 * recorded now. */
static ncclResult_t launchLocked(struct launchOp* op, const struct symmPeers* peers,
                                 struct symmLaunchRecord* record) {
  struct symmComm* comm = op->comm;
  cudaStream_t stream = op->task.stream;
  ncclResult_t res = ncclSuccess;
  struct symmCapture cap;
  NCCLCHECKGOTO(symmCaptureOf(stream, &cap), res, fail);
  if (op->call.windowPeers != NULL) op->call.windowPeers = op->windowPeers; /* after a copy */
  /* ncclCommRegister memory is read in place only by eager calls: a graph would keep the
   * descriptor and read whatever the slot holds at a later replay (the region may have been
   * deregistered and another registered since). Captured calls push as usual (descriptor 0). */
  op->call.inputDesc = 0;
  if (op->call.exchangeDescs && !cap.active)
    op->call.inputDesc = symmTransportUserInputDesc(
        comm, op->call.sendbuff, op->call.count * symmTypeSize(op->call.datatype));
  NCCLCHECKGOTO(symmOrderBefore(&comm->order, stream, &cap), res, fail);
  const uint64_t launch = comm->launches++;
  if (op->call.windowPeers != NULL) comm->zeroCopyLaunches++;
  if (comm->rank == symmParamTestFailRank() && launch == (uint64_t)symmParamTestFailCall()) {
    /* What a kernel that gives up does: its error word, every rank's failure word, and no
     * touching user memory. The call itself succeeds; the error is asynchronous. */
    symmTransportInjectKernelError(comm, SYMM_ERR_DEADLINE);
  } else if (record != NULL && record->valid && symmCollReplay(record, stream)) {
    comm->replays++;
  } else if (record != NULL) {
    NCCLCHECKGOTO(symmCollLaunchRecorded(&op->call, peers, stream, record), res, fail);
  } else {
    NCCLCHECKGOTO(symmCollLaunch(&op->call, peers, stream), res, fail);
  }
  NCCLCHECKGOTO(symmOrderAfter(&comm->order, stream, &cap), res, fail);
  if (cap.active) NCCLCHECKGOTO(symmTransportRetainForGraph(comm, cap.graph), res, fail);
fail:
  if (res != ncclSuccess) {
    /* Our peers' kernels already wait for this one: the whole communicator fails. */
    symmCommFail(comm, SYMM_ERR_LAUNCH, 1);
    res = symmFailureGet(&comm->failure);
  }
  return res;
}

/* Launches a decided operation (eager, or at GroupEnd). Staging was lost, or the communicator
 * aborted or revoked, since the decision: the real NCCL runs it (or refuses it). */
static ncclResult_t launchOp(struct launchOp* op) {
  struct symmComm* comm = op->comm;
  int saved = -1;
  ncclResult_t res = enterDevice(comm, &saved);
  if (res != ncclSuccess) return res;
  pthread_mutex_lock(&comm->launchLock);
  res = __atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE) ? ncclInvalidUsage : symmCommHealth(comm);
  const struct symmPeers* peers = res == ncclSuccess ? symmTransportLaunchPeers(comm) : NULL;
  if (peers != NULL) res = launchLocked(op, peers, NULL);
  pthread_mutex_unlock(&comm->launchLock);
  if (res == ncclSuccess && peers == NULL) res = callReal(&op->task);
  leaveDevice(saved);
  return res;
}

static ncclResult_t runDeferredLaunch(void* arg, int launch) {
  struct launchOp* op = arg;
  ncclResult_t res = launch ? launchOp(op) : ncclSuccess;
  free(op);
  return res;
}

/* Starting a non-blocking communicator's staging job from GroupEnd, after its group. */
static ncclResult_t runDeferredStaging(void* arg, int launch) {
  struct symmComm* comm = arg;
  if (launch && symmTransportNeedsStaging(comm)) symmCommStartJob(comm, 1);
  return ncclSuccess;
}

/* ---- repeated calls -------------------------------------------------------------------------- */

/* A communicator's recent launches of ours, each with its decision and the kernel launch it
 * made. A call identical to one of them (collective, buffers, count, type, op), with nothing
 * else the decision reads changed since (windows, knobs, multicast), is launched as that one
 * was: no tuner, no kernel arguments built. The decision is a function of exactly those inputs,
 * the same on every rank, so this changes only the host time: 0.3-0.7 us per call on an H100
 * (perf/RESULTS.md 0). Guarded by launchLock. */
#define REPEAT_SLOTS 16
struct repeatKey {
  enum symmColl coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  int multicastReady;
  uint64_t windowsVersion, paramGeneration;
};

struct repeatEntry {
  struct repeatKey key;
  struct launchOp op;
  struct symmLaunchRecord record;
};

struct symmRepeats {
  struct repeatEntry entries[REPEAT_SLOTS];
  int used;    /* entries filled */
  int next;    /* the one replaced next (a cycle of up to REPEAT_SLOTS calls keeps them all) */
  int lastHit; /* looked at first */
};

static void repeatKeyOf(const struct symmComm* comm, const struct symmTask* task,
                        struct repeatKey* key) {
  *key = (struct repeatKey){.coll = task->coll, .sendbuff = task->sendbuff,
                            .recvbuff = task->recvbuff, .count = task->count,
                            .datatype = task->datatype, .op = task->op,
                            .multicastReady = symmTransportMulticastReady(comm),
                            .windowsVersion = symmTransportWindowsVersion(comm),
                            .paramGeneration = symmParamGeneration()};
}

static int sameKey(const struct repeatKey* a, const struct repeatKey* b) {
  return a->coll == b->coll && a->sendbuff == b->sendbuff && a->recvbuff == b->recvbuff &&
         a->count == b->count && a->datatype == b->datatype && a->op == b->op &&
         a->multicastReady == b->multicastReady && a->windowsVersion == b->windowsVersion &&
         a->paramGeneration == b->paramGeneration;
}

static struct repeatEntry* findRepeat(struct symmComm* comm, const struct repeatKey* key) {
  struct symmRepeats* r = comm->repeats;
  if (r == NULL) return NULL;
  if (r->lastHit < r->used && sameKey(&r->entries[r->lastHit].key, key))
    return &r->entries[r->lastHit];
  for (int i = 0; i < r->used; i++) {
    if (sameKey(&r->entries[i].key, key)) {
      r->lastHit = i;
      return &r->entries[i];
    }
  }
  return NULL;
}

/* A slot for a new decision (the oldest one goes), or NULL without host memory. */
static struct repeatEntry* newRepeat(struct symmComm* comm, const struct repeatKey* key,
                                     const struct launchOp* op) {
  if (comm->repeats == NULL && (comm->repeats = calloc(1, sizeof(*comm->repeats))) == NULL)
    return NULL;
  struct symmRepeats* r = comm->repeats;
  struct repeatEntry* e = &r->entries[r->next];
  r->next = (r->next + 1) % REPEAT_SLOTS;
  if (r->used < REPEAT_SLOTS) r->used++;
  e->key = *key;
  e->op = *op;
  e->record.valid = 0;
  return e;
}

/* Decides under launchLock: which algorithm (SYMM_ALGO_NCCL: forward) and the launch. */
static enum symmAlgo decideLocked(struct symmComm* comm, const struct symmTask* task,
                                  struct launchOp* op) {
  const size_t esize = symmTypeSize(task->datatype);
  const size_t bytes = symmCollBytes(task->coll, task->count, esize, comm->nranks);
  /* The buffer an algorithm may read or write in place: the input for all-reduce and
   * reduce-scatter, the output for all-gather. Symmetric windows sit at the same offset on
   * every rank (NCCL's contract), so "registered" is the same decision on all ranks. */
  const void* inPlace = task->coll == SYMM_COLL_ALLGATHER ? task->recvbuff : task->sendbuff;
  const int registered = symmTransportFindWindow(comm, inPlace, bytes, op->windowPeers) != 0;
  const struct symmTuneInput in = {
      .coll = task->coll, .nranks = comm->nranks, .datatype = task->datatype,
      .op = task->coll == SYMM_COLL_ALLGATHER ? ncclSum : task->op, .bytes = bytes,
      .registered = registered, .multicastReady = symmTransportMulticastReady(comm) != 0,
      .arch = comm->arch, .link = comm->link, .stagingBytes = symmTransportStagingBytes(comm),
      .ctaPolicy = comm->config.ctaPolicy, .table = comm->tuneTable};
  enum symmAlgo algo = symmTunerPick(&in);
  if (!symmPolicyAllows(comm->config.ctaPolicy, algo)) algo = SYMM_ALGO_NCCL;
  TRACE(SYMM_TUNER, "comm %p rank %d: %s of %zu bytes, type %d, op %d: %s", (void*)comm->real,
        comm->rank, symmCollName(task->coll), bytes, (int)task->datatype, (int)task->op,
        symmAlgoName(algo));
  if (algo == SYMM_ALGO_NCCL) return algo;
  int maxBlocks = 0, minBlocks = 0;
  symmGridBounds(&comm->config, &maxBlocks, &minBlocks);
  op->comm = comm;
  op->task = *task;
  op->call = (struct symmLaunch){
      .coll = task->coll, .algo = algo, .sendbuff = task->sendbuff, .recvbuff = task->recvbuff,
      .count = task->count, .datatype = task->datatype, .op = in.op,
      .emulateMultimem = !in.multicastReady, .maxBlocks = maxBlocks, .minBlocks = minBlocks,
      .windowPeers = symmTunerZeroCopy(&in, algo) ? op->windowPeers : NULL,
      /* ncclCommRegister memory: each rank says in the kernel whether its input is read in
       * place; the descriptor itself is read at launch, under the lock. */
      .exchangeDescs = symmTunerUserZeroCopy(&in, algo),
      /* griddepcontrol exists from sm_90 on (src/algos/sync.cuh, kernelEntry). */
      .pdl = symmParamPdl() != 0 && comm->arch >= 90};
  return algo;
}

static ncclResult_t deferLaunch(const struct launchOp* local, int needsStaging) {
  struct launchOp* op = malloc(sizeof(*op));
  if (op == NULL) {
    WARN("out of host memory deferring a collective");
    return ncclSystemError;
  }
  *op = *local;
  ncclResult_t res = symmGroupDeferOp(op->comm, SYMM_DEFERRED_LAUNCH, needsStaging,
                                      runDeferredLaunch, op);
  if (res != ncclSuccess) free(op);
  return res;
}

/* A failure or a refused argument inside a group fails NCCL's group too. */
static ncclResult_t refuse(ncclComm_t real, ncclResult_t res) {
  if (symmGroupDepth() > 0) symmGroupPoison(real);
  return res;
}

/* Forwarded with ordering, as every other operation on a communicator where ours run (the
 * caller checked that it is not gone and ran its parked operations). */
static ncclResult_t forwardOrdered(struct symmComm* comm, const struct symmTask* task) {
  struct symmForwardScope scope;
  memset(&scope, 0, sizeof(scope));
  ncclResult_t res = forwardEnter(comm, task->stream, &scope);
  if (res == ncclSuccess) res = callReal(task);
  else if (symmGroupDepth() > 0) symmGroupPoison(task->comm);
  forwardLeave(&scope);
  return res;
}

static ncclResult_t enqueueOn(struct symmComm* comm, const struct symmTask* task) {
  if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE)) return refuse(task->comm, ncclInvalidUsage);
  if (__atomic_load_n(&comm->job, __ATOMIC_ACQUIRE) == SYMM_JOB_RUNNING) symmCommWaitJob(comm);
  int ncclDecides = 0;
  ncclResult_t res = symmArgsCheck(task, comm->nranks, comm->arch, &ncclDecides);
  if (res != ncclSuccess) return refuse(task->comm, res);
  if (__atomic_load_n(&comm->parked, __ATOMIC_ACQUIRE) != NULL) {
    res = symmGroupRunParked(comm);
    if (res == ncclInProgress) {
      WARN("%s on communicator %p before the previous operation returned ncclSuccess",
           opNames[task->coll], (void*)task->comm);
      return refuse(task->comm, ncclInvalidArgument);
    }
    if (res != ncclSuccess) return refuse(task->comm, res);
  }
  /* Never ours on this communicator: nothing of ours to order it against (a failed one still
   * refuses, as every call on it does). */
  if (comm->transport == NULL) {
    res = symmFailureGet(&comm->failure);
    return res == ncclSuccess ? callReal(task) : refuse(task->comm, res);
  }
  if (ncclDecides) return forwardOrdered(comm, task);

  struct launchOp op;
  pthread_mutex_lock(&comm->launchLock);
  res = symmCommHealth(comm);
  if (res != ncclSuccess) {
    pthread_mutex_unlock(&comm->launchLock);
    return refuse(task->comm, res);
  }
  /* The common case, outside groups with staging built: decided (or repeated) and launched
   * under one hold of the lock. */
  const struct symmPeers* peers = symmGroupDepth() == 0 ? symmTransportLaunchPeers(comm) : NULL;
  struct repeatKey key;
  if (peers != NULL) {
    repeatKeyOf(comm, task, &key);
    struct repeatEntry* repeat = findRepeat(comm, &key);
    if (repeat != NULL && repeat->op.call.algo == SYMM_ALGO_NCCL) {
      pthread_mutex_unlock(&comm->launchLock);
      return forwardOrdered(comm, task);
    }
    if (repeat != NULL) {
      repeat->op.task.stream = task->stream;
      TRACE(SYMM_TUNER, "comm %p rank %d: %s of %zu elements as last time: %s", (void*)comm->real,
            comm->rank, symmCollName(task->coll), task->count, symmAlgoName(repeat->op.call.algo));
      res = launchLocked(&repeat->op, peers, &repeat->record);
      pthread_mutex_unlock(&comm->launchLock);
      return res;
    }
  }
  const enum symmAlgo algo = comm->transport != NULL ? decideLocked(comm, task, &op) : SYMM_ALGO_NCCL;
  const int needsStaging = algo != SYMM_ALGO_NCCL && symmTransportNeedsStaging(comm);
  if (algo == SYMM_ALGO_NCCL && peers != NULL) {
    /* Remembered too: an identical call forwards again without the tuner. */
    memset(&op, 0, sizeof(op));
    op.comm = comm;
    op.call.algo = SYMM_ALGO_NCCL;
    (void)newRepeat(comm, &key, &op);
    peers = NULL;
  } else if (algo != SYMM_ALGO_NCCL && !needsStaging && peers != NULL) {
    struct repeatEntry* slot = newRepeat(comm, &key, &op);
    res = slot != NULL ? launchLocked(&slot->op, peers, &slot->record) : launchLocked(&op, peers, NULL);
  } else {
    peers = NULL;
  }
  pthread_mutex_unlock(&comm->launchLock);
  if (peers != NULL) return res;
  if (algo == SYMM_ALGO_NCCL) return forwardOrdered(comm, task);

  if (needsStaging) {
    struct symmCapture cap;
    if (symmCaptureOf(task->stream, &cap) != ncclSuccess || cap.active) {
      /* Staging cannot be built inside a capture: this call forwards, the next one given to us
       * outside a capture builds it. Ranks capture the same calls, so they all do the same. */
      INFO(SYMM_INIT, "comm %p: first call given to our kernels is captured; it forwards and "
           "staging waits for an uncaptured one", (void*)comm->real);
      return forwardOrdered(comm, task);
    }
    if (!comm->config.blocking) {
      /* Never block a non-blocking caller on its peers: this call forwards (on every rank, as
       * they all reach it alike), the staging job follows it, and ncclCommGetAsyncError says
       * ncclInProgress until it is done. */
      res = callReal(task);
      if (res != ncclSuccess && res != ncclInProgress) return res;
      if (symmGroupDepth() > 0) {
        /* The group holds a reference on comm until it runs this. */
        (void)symmGroupDeferOp(comm, SYMM_DEFERRED_FORWARDED, 0, runDeferredStaging, comm);
        return res;
      }
      symmCommStartJob(comm, 1);
      return ncclInProgress;
    }
    if (symmGroupDepth() > 0) return deferLaunch(&op, 1);
    (void)symmTransportStage(&comm, 1);
  } else if (symmGroupDepth() > 0) {
    return deferLaunch(&op, 0);
  }
  return launchOp(&op);
}

ncclResult_t symmEnqueue(const struct symmTask* task) {
  struct symmComm* comm = symmCommAcquire(task->comm);
  /* NULL, destroyed or foreign communicators: the real NCCL's own answer. */
  if (comm == NULL) return callReal(task);
  int saved = -1;
  ncclResult_t res = enterDevice(comm, &saved);
  if (res == ncclSuccess) res = enqueueOn(comm, task);
  else if (symmGroupDepth() > 0) symmGroupPoison(task->comm);
  leaveDevice(saved);
  symmCommRelease(comm);
  return res;
}
