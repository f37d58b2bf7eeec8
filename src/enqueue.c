/* SPDX-License-Identifier: Apache-2.0 */
/* The one enqueue path (src/include/enqueue.h): gathers what the call's route (src/route.c)
 * asks for, then carries the route out: refuse, forward (ordered with our operations), or launch
 * now, at the outermost group end or once staging is built. It decides nothing itself. */
#include "enqueue.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "failure.h"
#include "forward.h"
#include "forwarded.h"
#include "group.h"
#include "init.h"
#include "order.h"
#include "param.h"
#include "route.h"
#include "transport.h"

SYMMCOLL_PARAM_FULL(TestFailRank, "TEST_FAIL_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: on this rank, one launch of ours (TEST_FAIL_CALL) behaves as a "
                    "kernel that gave up (error word and every rank's failure word)")
SYMMCOLL_PARAM_FULL(TestFailCall, "TEST_FAIL_CALL", 0, 0, INT64_MAX, SYMM_PARAM_TEST,
                    "tests only: which launch of ours (counted per communicator from 0) fails on "
                    "the rank TEST_FAIL_RANK names")

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
  op->call.side = symmTransportSideStream(comm);
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
    /* What a kernel that gives up does: its error word, the gave-up word, every rank's failure
     * word, and no touching user memory. The call itself succeeds; the error is asynchronous. */
    symmTransportInjectKernelError(comm, SYMM_ERR_DEADLINE, stream);
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

/* ---- repeated calls -------------------------------------------------------------------------- */

/* A communicator's recent routes of ours, each with the kernel launch it made. A call identical
 * to one of them (collective, buffers, count, type, op), with nothing else the route reads
 * changed since (windows, knobs, multicast), takes that route again (src/route.c says when): no
 * tuner, no kernel arguments built. The route is a function of exactly those inputs, the same
 * on every rank, so this changes only the host time (0.64 us less per call, median, on one
 * H100: perf/RESULTS.md, Decisions, "Repeated calls relaunch their record"). Guarded by
 * launchLock. */
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
  struct symmRoute route; /* a remembered FORWARD or LAUNCH */
  struct launchOp op;     /* LAUNCH: what it launches */
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

/* A slot for a new route (the oldest one goes), or NULL without host memory. */
static struct repeatEntry* newRepeat(struct symmComm* comm, const struct repeatKey* key,
                                     const struct symmRoute* route, const struct launchOp* op) {
  if (comm->repeats == NULL && (comm->repeats = calloc(1, sizeof(*comm->repeats))) == NULL)
    return NULL;
  struct symmRepeats* r = comm->repeats;
  struct repeatEntry* e = &r->entries[r->next];
  r->next = (r->next + 1) % REPEAT_SLOTS;
  if (r->used < REPEAT_SLOTS) r->used++;
  e->key = *key;
  e->route = *route;
  if (op != NULL) e->op = *op;
  else memset(&e->op, 0, sizeof(e->op));
  e->record.valid = 0;
  return e;
}

/* ---- the facts a route asks for ------------------------------------------------------------- */

/* One call (or one decided launch being issued) on its way through the route. */
struct call {
  const struct symmTask* task;
  struct symmComm* comm;
  int ownsRef;  /* comm's reference is this call's own */
  int savedDev; /* the caller's device, restored at the end (-1: unchanged) */
  int locked;   /* comm->launchLock held */
  const struct symmPeers* peers;
  struct repeatKey key;
  struct repeatEntry* repeat;
  void* windowPeers[SYMM_MAX_RANKS];
  struct symmRouteFacts f;
};

static void readState(struct call* c) {
  c->f.hasTransport = c->comm->transport != NULL;
  c->f.failure = symmFailureGet(&c->comm->failure);
}

static void gatherOne(struct call* c, unsigned need);
static void unlockCall(struct call* c);

/* Whether the buffer an algorithm may use in place is the output: for all-gather, and for an
 * all-reduce whose two-shot writes the peers' outputs (by size, the same on every rank). */
static int inPlaceIsOutput(const struct symmTask* task, int nranks) {
  const size_t bytes =
      symmCollBytes(task->coll, task->count, symmTypeSize(task->datatype), nranks);
  return task->coll == SYMM_COLL_ALLGATHER ||
         (task->coll == SYMM_COLL_ALLREDUCE && symmTunerAllReduceWritesOutputs(bytes));
}

/* That buffer, and its bytes. */
static const void* inPlaceBuffer(const struct symmTask* task, int nranks, size_t* bytes) {
  *bytes = symmCollBytes(task->coll, task->count, symmTypeSize(task->datatype), nranks);
  return inPlaceIsOutput(task, nranks) ? task->recvbuff : task->sendbuff;
}

/* NCCL_CHECK_POINTERS, read once per process as NCCL reads its parameters. */
static int checkPointersOn(void) {
  static int cached = -1;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    /* NCCL checks only when the value is 1 (64-bit, NCCL_PARAM). */
    v = symmNcclParam("NCCL_CHECK_POINTERS", 0) == 1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* NCCL's CudaPtrCheck: a pointer CUDA does not know, without a device address, or in another
 * device's memory is refused. */
static int pointerRefused(const void* p, int cudaDev) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return a.devicePointer == NULL || (a.type == cudaMemoryTypeDevice && a.device != cudaDev);
}

static int communicatorFailed(struct symmComm* comm) {
  return symmCommPollHealth(comm) != ncclSuccess;
}

/* SYMM_NEED_GRAPH_PEERS, with the lock held: the exchange waits for the peers, so without it
 * (teardown waits for the lock, not for peers); then the lock's facts again. Inside a group, or
 * with our kernels unable to run, this rank says no at once (the peers then do not wait). */
static void exchangeGraphPeers(struct call* c) {
  struct symmRouteFacts* f = &c->f;
  struct symmComm* comm = c->comm;
  const struct symmTask* task = c->task;
  f->graphPeers = 0;
  struct symmTransport* t = symmTransportHold(comm);
  if (t == NULL) return; /* detached: the route sees it (stillOurs) */
  struct symmCapture cap;
  /* Buffers in a window: this rank says no (the route asks every rank alike, route.c). */
  const int join = symmCaptureOf(task->stream, &cap) == ncclSuccess && cap.active &&
                   f->groupDepth == 0 && f->peersLive && f->health == ncclSuccess &&
                   !f->registered;
  size_t bytes;
  const void* inPlace = inPlaceBuffer(task, comm->nranks, &bytes);
  unlockCall(c);
  const int got = symmTransportGraphPeers(comm, t, inPlace, bytes, join, join ? cap.graph : NULL,
                                          communicatorFailed, c->windowPeers);
  symmTransportDrop(t);
  f->graphPeers = got > 0;
  gatherOne(c, SYMM_NEED_LOCK);
  if (got < 0) symmCommFail(comm, SYMM_ERR_LAUNCH, 1); /* peers run it in place; we cannot */
  gatherOne(c, SYMM_NEED_HEALTH);
  f->gone = __atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE);
}

/* Finds out one group of facts the route asked for (src/include/route.h says what each means);
 * nothing but the communicator's own group when there is no communicator. */
static void gatherOne(struct call* c, unsigned need) {
  struct symmRouteFacts* f = &c->f;
  struct symmComm* comm = c->comm;
  const struct symmTask* task = c->task;
  f->have |= need;
  if (comm == NULL && need != SYMM_NEED_COMM) return;
  switch (need) {
    case SYMM_NEED_COMM:
      if (comm == NULL) {
        comm = c->comm = symmCommAcquire(task->comm);
        c->ownsRef = 1;
      }
      f->known = comm != NULL;
      if (comm == NULL) break;
      f->device = symmDeviceEnter(comm, &c->savedDev);
      if (!f->issuing) {
        f->gone = __atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE);
        f->jobRunning = __atomic_load_n(&comm->job, __ATOMIC_ACQUIRE) == SYMM_JOB_RUNNING;
      }
      f->config = comm->config;
      f->checkPointers = checkPointersOn();
      break;
    case SYMM_NEED_JOB:
      symmCommWaitJob(comm);
      f->jobRunning = 0;
      gatherOne(c, SYMM_NEED_SETTLED); /* what the job settled */
      break;
    case SYMM_NEED_SETTLED:
      f->nranks = comm->nranks;
      f->arch = comm->arch;
      f->link = comm->link;
      f->table = comm->tuneTable;
      f->parked = __atomic_load_n(&comm->parked, __ATOMIC_ACQUIRE) != NULL;
      readState(c);
      break;
    case SYMM_NEED_PARKED:
      f->parkedResult = symmGroupRunParked(comm);
      f->parked = 0;
      readState(c); /* what they did */
      break;
    case SYMM_NEED_LOCK:
      pthread_mutex_lock(&comm->launchLock);
      c->locked = 1;
      if (f->issuing) f->gone = __atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE);
      c->peers = symmTransportLaunchPeers(comm);
      f->peersLive = c->peers != NULL;
      f->stillOurs = comm->transport != NULL;
      f->needsStaging = symmTransportNeedsStaging(comm);
      break;
    case SYMM_NEED_HEALTH:
      f->health = symmCommHealth(comm);
      /* A non-blocking communicator keeps the error of a call the real NCCL refused (its
       * ncclEnqueueCheck sets it as the communicator's) and refuses every later call with it. */
      if (f->health == ncclSuccess && !comm->config.blocking) {
        ncclResult_t state = ncclSuccess;
        if (symmCommRealState(comm, &state) == ncclSuccess && state != ncclInProgress)
          f->health = state;
      }
      break;
    case SYMM_NEED_REPEAT:
      repeatKeyOf(comm, task, &c->key);
      c->repeat = findRepeat(comm, &c->key);
      f->repeat = c->repeat != NULL ? &c->repeat->route : NULL;
      break;
    case SYMM_NEED_WINDOW: {
      /* Symmetric windows sit at the same offset on every rank (NCCL's contract), so
       * "registered" is the same on all ranks of a correct program; what must agree even when
       * it is not (the graph exchange, route.c) does not rest on it. */
      size_t bytes;
      const void* inPlace = inPlaceBuffer(task, comm->nranks, &bytes);
      f->registered = symmTransportFindWindow(comm, inPlace, bytes, c->windowPeers) != 0;
      f->multicastReady = symmTransportMulticastReady(comm) != 0;
      f->stagingBytes = symmTransportStagingBytes(comm);
      f->graphPeersReady = symmTransportGraphPeersReady(comm);
      break;
    }
    case SYMM_NEED_GRAPH_PEERS:
      exchangeGraphPeers(c);
      break;
    case SYMM_NEED_POINTERS:
      f->pointersRefused = pointerRefused(task->sendbuff, comm->cudaDev) ||
                           pointerRefused(task->recvbuff, comm->cudaDev);
      break;
    case SYMM_NEED_GROUP_STREAM:
      f->groupStream = symmGroupUseStream(comm, task->stream);
      break;
    case SYMM_NEED_CAPTURE: {
      struct symmCapture cap;
      f->captured = symmCaptureOf(task->stream, &cap) != ncclSuccess || cap.active;
      break;
    }
    default:
      break;
  }
}

static struct symmRoute routeOf(struct call* c) {
  struct symmRoute r;
  while ((r = symmRoute(&c->f, c->task)).kind == SYMM_ROUTE_NEED)
    for (unsigned bit = 1; bit <= r.need; bit <<= 1)
      if (r.need & bit) gatherOne(c, bit);
  return r;
}

static void unlockCall(struct call* c) {
  if (!c->locked) return;
  pthread_mutex_unlock(&c->comm->launchLock);
  c->locked = 0;
}

/* ---- carrying a route out -------------------------------------------------------------------- */

/* Issues a decided launch (eager, or at GroupEnd): its route at this moment says whether it
 * still runs, is refused, or goes to the real NCCL. */
static ncclResult_t launchOp(struct launchOp* op) {
  struct call c = {.task = &op->task, .comm = op->comm, .savedDev = -1, .f = {.issuing = 1}};
  const struct symmRoute r = routeOf(&c);
  ncclResult_t res = r.kind == SYMM_ROUTE_REFUSE ? r.result : ncclSuccess;
  if (r.kind == SYMM_ROUTE_LAUNCH) res = launchLocked(op, c.peers, NULL);
  unlockCall(&c);
  if (r.kind == SYMM_ROUTE_FORWARD) res = symmCallReal(&op->task);
  symmDeviceLeave(c.savedDev);
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

static ncclResult_t deferLaunch(const struct launchOp* local, int needsStaging) {
  struct launchOp* op = malloc(sizeof(*op));
  if (op == NULL) {
    WARN("out of host memory deferring a collective");
    return ncclSystemError;
  }
  *op = *local;
  ncclResult_t res = symmGroupDeferOp(op->comm, SYMM_DEFERRED_LAUNCH, needsStaging,
                                      &op->task.stream, runDeferredLaunch, op);
  if (res != ncclSuccess) free(op);
  return res;
}

static void buildLaunch(const struct call* c, const struct symmRoute* r, struct launchOp* op) {
  const struct symmTask* t = c->task;
  memset(op, 0, sizeof(*op));
  op->comm = c->comm;
  op->task = *t;
  memcpy(op->windowPeers, c->windowPeers, sizeof(op->windowPeers));
  op->call = (struct symmLaunch){
      .coll = t->coll, .algo = r->algo, .sendbuff = t->sendbuff, .recvbuff = t->recvbuff,
      .count = t->count, .datatype = t->datatype, .op = r->op,
      .emulateMultimem = r->emulateMultimem, .maxBlocks = r->maxBlocks,
      .minBlocks = r->minBlocks, .windowPeers = r->zeroCopy ? op->windowPeers : NULL,
      .windowsAreOutputs = inPlaceIsOutput(t, c->comm->nranks),
      .exchangeDescs = r->exchangeDescs, .pdl = r->pdl};
}

/* symmPlainBuffers' lookup: the windows of the communicator `ctx`. */
static int windowAlias(const void* ctx, const void* ptr, size_t bytes, void** alias) {
  return symmTransportWindowAlias((const struct symmComm*)ctx, ptr, bytes, alias);
}

/* One switch over the route; called with the lock held if the route took it. */
static ncclResult_t carryOut(struct call* c, const struct symmRoute* r) {
  const struct symmTask* task = c->task;
  struct symmComm* comm = c->comm;
  if (r->tuned)
    TRACE(SYMM_TUNER, "comm %p rank %d: %s of %zu bytes, type %d, op %d: %s", (void*)comm->real,
          comm->rank, symmCollName(task->coll),
          symmCollBytes(task->coll, task->count, symmTypeSize(task->datatype), comm->nranks),
          (int)task->datatype, (int)task->op, symmAlgoName(r->algo));
  struct launchOp op;
  ncclResult_t res;
  switch (r->kind) {
    case SYMM_ROUTE_REFUSE:
      unlockCall(c);
      if (r->note == SYMM_NOTE_PARKED_BUSY)
        WARN("%s on communicator %p before the previous operation returned ncclSuccess",
             symmCollApiName(task->coll), (void*)task->comm);
      if (r->failGroup) symmGroupPoison(task->comm, r->result);
      return r->result;
    case SYMM_ROUTE_FORWARD: {
      if (r->remember) (void)newRepeat(comm, &c->key, r, NULL);
      /* ncclplain: windows' aliases, looked up while the lock keeps the transport attached. */
      struct symmTask plain;
      const int onAlias = r->algo == SYMM_ALGO_NCCLPLAIN && c->locked &&
                          symmPlainBuffers(task, comm->nranks, windowAlias, comm, &plain) > 0;
      if (onAlias) comm->plainForwards++;
      unlockCall(c);
      if (r->note == SYMM_NOTE_CAPTURED_FIRST)
        INFO(SYMM_INIT, "comm %p: first call given to our kernels is captured; it forwards and "
             "staging waits for an uncaptured one", (void*)comm->real);
      if (r->note == SYMM_NOTE_NCCL_REFUSES) {
        const char* problem = symmArgsProblem(task, c->f.arch);
        WARN("%s on communicator %p: %s (datatype %d, op %d, sendbuff %p, recvbuff %p); the real "
             "NCCL refuses it", symmCollApiName(task->coll), (void*)task->comm,
             problem != NULL ? problem : "a buffer NCCL_CHECK_POINTERS refuses",
             (int)task->datatype, (int)task->op, task->sendbuff, (void*)task->recvbuff);
      }
      if (r->untouched) return symmCallRealUntouched(task);
      if (!r->ordered) return symmCallReal(task);
      return symmForwardOrdered(comm, onAlias ? &plain : task, onAlias);
    }
    case SYMM_ROUTE_LAUNCH:
      if (r->when == SYMM_WHEN_NOW && r->repeated) {
        c->repeat->op.task.stream = task->stream;
        TRACE(SYMM_TUNER, "comm %p rank %d: %s of %zu elements as last time: %s",
              (void*)comm->real, comm->rank, symmCollName(task->coll), task->count,
              symmAlgoName(r->algo));
        res = launchLocked(&c->repeat->op, c->peers, &c->repeat->record);
        unlockCall(c);
        return res;
      }
      buildLaunch(c, r, &op);
      if (r->when == SYMM_WHEN_NOW) {
        struct repeatEntry* slot = r->remember ? newRepeat(comm, &c->key, r, &op) : NULL;
        res = slot != NULL ? launchLocked(&slot->op, c->peers, &slot->record)
                           : launchLocked(&op, c->peers, NULL);
        unlockCall(c);
        return res;
      }
      unlockCall(c);
      return r->when == SYMM_WHEN_GROUP_END ? deferLaunch(&op, 0) : launchOp(&op);
    case SYMM_ROUTE_STAGE_LAUNCH:
      buildLaunch(c, r, &op);
      unlockCall(c);
      if (r->when == SYMM_WHEN_GROUP_END) return deferLaunch(&op, 1);
      (void)symmTransportStage(&comm, 1);
      return launchOp(&op);
    case SYMM_ROUTE_FORWARD_STAGE:
      unlockCall(c);
      res = symmCallReal(task);
      if (res != ncclSuccess && res != ncclInProgress) return res;
      if (r->when == SYMM_WHEN_GROUP_END) {
        /* The group holds a reference on comm until it runs this. */
        (void)symmGroupDeferOp(comm, SYMM_DEFERRED_FORWARDED, 0, NULL, runDeferredStaging, comm);
        return res;
      }
      symmCommStartJob(comm, 1);
      return ncclInProgress;
    default:
      unlockCall(c);
      return ncclInternalError;
  }
}

ncclResult_t symmEnqueue(const struct symmTask* task) {
  struct call c = {.task = task, .savedDev = -1};
  c.f.passthrough = symmPassthrough();
  c.f.realMissing = symmRealLoad() != ncclSuccess || !symmRealHas(task->coll);
  c.f.groupDepth = symmGroupDepth();
  const struct symmRoute r = routeOf(&c);
  const ncclResult_t res = carryOut(&c, &r);
  symmDeviceLeave(c.savedDev);
  if (c.ownsRef) symmCommRelease(c.comm);
  return res;
}
