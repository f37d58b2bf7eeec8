/* SPDX-License-Identifier: Apache-2.0 */
/* ncclGroupStart/End/SimulateEnd: track nesting, then run what the outermost group deferred. */
#include "group.h"

#include <stdlib.h>
#include <string.h>

#include "algos.h"
#include "checks.h"
#include "failure.h"
#include "forward.h"
#include "forwarded.h"
#include "init.h"
#include "order.h"
#include "setup.h"
#include "transport.h"

struct deferredOp {
  struct symmComm* comm; /* one reference held */
  enum symmDeferredKind kind;
  int needsStaging;
  int hasStream; /* it puts work on `stream` (a launch of ours, a forwarded call's order mark) */
  cudaStream_t stream;
  symmDeferredFn run;
  void* arg;
};

/* Operations parked behind a non-blocking communicator's group launch. */
struct symmDeferredList {
  struct deferredOp* ops;
  int count;
};

/* Per thread, as NCCL's groups are. */
static __thread int groupDepth;
static __thread struct symmComm** pendingComms;
static __thread int pendingCount, pendingCap;
static __thread struct deferredOp* pendingOps;
static __thread int opCount, opCap;
static __thread struct symmWindowReg* pendingWindows;
static __thread int windowCount, windowCap;
/* The streams the calls of the outermost group used, per communicator (symmGroupUseStream). A
 * communicator's first stream is read only once a second one comes: a group on one stream, the
 * common case, costs no query. */
struct groupStream {
  const struct symmComm* comm;
  cudaStream_t stream;
  int read; /* captured and captureId are known */
  int captured;
  unsigned long long captureId;
};
static __thread struct groupStream* groupStreams;
static __thread int groupStreamCount, groupStreamCap;
/* The first error of a call in the outermost group (symmGroupNoteError). */
static __thread ncclResult_t groupFirstError;

int symmGroupDepth(void) { return groupDepth; }

static int grow(void** array, int* cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int newCap = *cap ? *cap * 2 : 8;
  while (newCap < need) newCap *= 2;
  void* p = realloc(*array, (size_t)newCap * elem);
  if (p == NULL) return -1;
  *array = p;
  *cap = newCap;
  return 0;
}

ncclResult_t symmGroupDeferSetup(struct symmComm* comm) {
  if (grow((void**)&pendingComms, &pendingCap, pendingCount + 1, sizeof(*pendingComms)) != 0) {
    WARN("out of host memory deferring communicator setup");
    return ncclSystemError;
  }
  symmCommRetain(comm);
  pendingComms[pendingCount++] = comm;
  return ncclSuccess;
}

ncclResult_t symmGroupDeferWindow(const struct symmWindowReg* reg) {
  if (grow((void**)&pendingWindows, &windowCap, windowCount + 1, sizeof(*pendingWindows)) != 0) {
    WARN("out of host memory deferring a window registration");
    return ncclSystemError;
  }
  if (reg->comm != NULL) symmCommRetain(reg->comm);
  pendingWindows[windowCount++] = *reg;
  return ncclSuccess;
}

ncclResult_t symmGroupDeferOp(struct symmComm* comm, enum symmDeferredKind kind, int needsStaging,
                              const cudaStream_t* stream, symmDeferredFn run, void* arg) {
  if (grow((void**)&pendingOps, &opCap, opCount + 1, sizeof(*pendingOps)) != 0) {
    WARN("out of host memory deferring a grouped operation");
    return ncclSystemError;
  }
  symmCommRetain(comm);
  pendingOps[opCount++] = (struct deferredOp){.comm = comm, .kind = kind,
                                              .needsStaging = needsStaging,
                                              .hasStream = stream != NULL,
                                              .stream = stream != NULL ? *stream : NULL,
                                              .run = run, .arg = arg};
  return ncclSuccess;
}

static ncclResult_t readStream(struct groupStream* g) {
  if (g->read) return ncclSuccess;
  struct symmCapture cap;
  NCCLCHECK(symmCaptureOf(g->stream, &cap));
  g->read = 1;
  g->captured = cap.active;
  g->captureId = cap.id;
  return ncclSuccess;
}

ncclResult_t symmGroupUseStream(const struct symmComm* comm, cudaStream_t stream) {
  if (groupDepth == 0) return ncclSuccess;
  struct groupStream* first = NULL;
  for (int i = 0; i < groupStreamCount; i++) {
    if (groupStreams[i].comm != comm) continue;
    if (groupStreams[i].stream == stream) return ncclSuccess;
    if (first == NULL) first = &groupStreams[i];
  }
  struct groupStream now = {.comm = comm, .stream = stream};
  if (first != NULL) {
    NCCLCHECK(readStream(first));
    NCCLCHECK(readStream(&now));
  }
  if (first != NULL && (first->captured != now.captured || first->captureId != now.captureId)) {
    WARN("communicator %p: a call on %s stream %p inside a group whose calls on it use %s; its "
         "calls in one group must all be uncaptured or all in one capture: ncclInvalidUsage, and "
         "the group fails", (void*)comm->real, now.captured ? "a captured" : "an uncaptured",
         (void*)stream,
         !first->captured ? "uncaptured streams" : now.captured ? "another capture" : "a capture");
    return ncclInvalidUsage;
  }
  if (grow((void**)&groupStreams, &groupStreamCap, groupStreamCount + 1, sizeof(*groupStreams)) !=
      0) {
    WARN("out of host memory noting a grouped call's stream");
    return ncclSystemError;
  }
  groupStreams[groupStreamCount++] = now;
  return ncclSuccess;
}

void symmGroupNoteError(ncclResult_t why) {
  if (groupDepth > 0 && groupFirstError == ncclSuccess && why != ncclInProgress) groupFirstError = why;
}

void symmGroupPoison(ncclComm_t real, ncclResult_t why) {
  symmGroupNoteError(why);
  ncclResult_t ignored;
  /* An invalid datatype: the real NCCL refuses it before anything else and records the error in
   * its group (it logs "invalid type" once; ours was logged first). */
  SYMM_CALL_REAL(ignored, ncclAllReduce, (NULL, NULL, 0, (ncclDataType_t)-1, ncclSum, real, NULL));
  (void)ignored;
}

/* Launches (or drops) one operation; a dropped launch fails its communicator on every rank, as
 * its peers' kernels would otherwise wait for ours forever. */
static ncclResult_t runOp(struct deferredOp* op, int launch) {
  ncclResult_t res = ncclSuccess;
  if (launch || op->kind != SYMM_DEFERRED_LAUNCH) {
    res = op->run(op->arg, 1);
  } else {
    (void)op->run(op->arg, 0);
    pthread_mutex_lock(&op->comm->launchLock);
    symmCommFail(op->comm, SYMM_ERR_LAUNCH, 1);
    pthread_mutex_unlock(&op->comm->launchLock);
  }
  symmCommRelease(op->comm);
  return res;
}

static ncclResult_t park(struct deferredOp* op);

ncclResult_t symmGroupParkOp(struct symmComm* comm, enum symmDeferredKind kind,
                             cudaStream_t stream, symmDeferredFn run, void* arg) {
  symmCommRetain(comm);
  struct deferredOp op = {.comm = comm, .kind = kind, .hasStream = 1, .stream = stream,
                          .run = run, .arg = arg};
  return park(&op);
}

static ncclResult_t park(struct deferredOp* op) {
  struct symmComm* c = op->comm;
  pthread_mutex_lock(&c->parkLock);
  struct symmDeferredList* l = c->parked;
  if (l == NULL) l = calloc(1, sizeof(*l));
  int cap = l != NULL ? l->count : 0;
  struct deferredOp* grown = l != NULL ? realloc(l->ops, (size_t)(cap + 1) * sizeof(*grown)) : NULL;
  if (grown == NULL) {
    if (l != c->parked) free(l);
    pthread_mutex_unlock(&c->parkLock);
    WARN("out of host memory parking a grouped operation");
    return runOp(op, 0);
  }
  l->ops = grown;
  l->ops[l->count++] = *op;
  __atomic_store_n(&c->parked, l, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->parkLock);
  return ncclInProgress;
}

/* The streams of `comm`'s operations in `ops` from `first` on, other than `anchor` (each once):
 * how many, written to `others` (room for n) when not NULL. */
static int otherStreams(const struct deferredOp* ops, int n, int first, cudaStream_t anchor,
                        cudaStream_t* others) {
  int m = 0;
  for (int k = first; k < n; k++) {
    if (ops[k].comm != ops[first].comm || !ops[k].hasStream || ops[k].stream == anchor) continue;
    if (others == NULL) return 1;
    int dup = 0;
    for (int j = 0; j < m && !dup; j++) dup = others[j] == ops[k].stream;
    if (!dup) others[m++] = ops[k].stream;
  }
  return m;
}

/* Whether every stream is uncaptured or all are captured by one graph (NCCL refuses a group
 * that mixes them, and so does symmGroupUseStream before such a call is deferred; a join across
 * them would break the capture). */
static int sameCapture(cudaStream_t anchor, const cudaStream_t* others, int m) {
  struct symmCapture a, o;
  if (symmCaptureOf(anchor, &a) != ncclSuccess) return 0;
  for (int i = 0; i < m; i++)
    if (symmCaptureOf(others[i], &o) != ncclSuccess || o.active != a.active || o.id != a.id)
      return 0;
  return 1;
}

/* Joins the streams `comm`'s operations in `ops` use (symmOrderJoinStreams), where ours order
 * this communicator; a failure as symmCommFailOrdering says. */
static ncclResult_t joinComm(const struct deferredOp* ops, int n, int first) {
  struct symmComm* comm = ops[first].comm;
  const cudaStream_t anchor = ops[first].stream;
  if (otherStreams(ops, n, first, anchor, NULL) == 0) return ncclSuccess; /* one stream */
  cudaStream_t* others = malloc((size_t)n * sizeof(*others));
  int saved = -1;
  ncclResult_t res = others == NULL ? ncclSystemError : symmDeviceEnter(comm, &saved);
  if (others == NULL) WARN("out of host memory joining a group's streams");
  pthread_mutex_lock(&comm->launchLock);
  if (res == ncclSuccess && symmCommHealth(comm) == ncclSuccess &&
      symmTransportOrdersForwarded(comm, 1)) {
    const int m = otherStreams(ops, n, first, anchor, others);
    if (sameCapture(anchor, others, m)) {
      res = symmOrderJoinStreams(&comm->order, anchor, others, m);
    } else {
      static int told;
      if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        WARN("a group's streams on communicator %p are not all uncaptured or all in one capture "
             "(NCCL refuses such a group): their order is not joined", (void*)comm->real);
    }
  }
  symmCommFailOrdering(comm, res);
  pthread_mutex_unlock(&comm->launchLock);
  symmDeviceLeave(saved);
  free(others);
  return res;
}

/* Whether ops[i] is the first operation with a stream of its communicator, and taken (those of
 * non-blocking communicators are not when `skipNonBlocking`: they are parked, and joined when
 * they run). */
static int firstOfComm(const struct deferredOp* ops, int i, int skipNonBlocking) {
  if (!ops[i].hasStream || (skipNonBlocking && !ops[i].comm->config.blocking)) return 0;
  for (int k = 0; k < i; k++)
    if (ops[k].comm == ops[i].comm && ops[k].hasStream) return 0;
  return 1;
}

/* Whether some communicator's operations in `ops` use several streams. */
static int needsJoin(const struct deferredOp* ops, int n, int skipNonBlocking) {
  for (int i = 0; i < n; i++)
    if (firstOfComm(ops, i, skipNonBlocking) && otherStreams(ops, n, i, ops[i].stream, NULL) > 0)
      return 1;
  return 0;
}

/* joinComm for every communicator of `ops`; the first failure. */
static ncclResult_t joinStreams(const struct deferredOp* ops, int n, int skipNonBlocking) {
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < n; i++) {
    if (!firstOfComm(ops, i, skipNonBlocking)) continue;
    const ncclResult_t r = joinComm(ops, n, i);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  return res;
}

/* Moves the order marks of forwarded calls (the real NCCL has already put those calls on their
 * streams) ahead of the rest, keeping each kind's call order: our launches then wait for them
 * through the order event, so our kernels never run beside NCCL's kernels of the same group
 * (NCCL runs a communicator's group as one launch; two kernels of one communicator resident
 * at once on different ranks in a different order could each wait for SMs the other holds). */
static int isOrderMark(const struct deferredOp* op) {
  return op->kind == SYMM_DEFERRED_FORWARDED && op->hasStream;
}

static void marksFirst(struct deferredOp* ops, int n) {
  int marks = 0;
  for (int i = 0; i < n; i++) marks += isOrderMark(&ops[i]);
  if (marks == 0 || marks == n) return;
  struct deferredOp* sorted = malloc((size_t)n * sizeof(*sorted));
  if (sorted == NULL) return; /* call order: only the overlap above is left */
  int front = 0, back = marks;
  for (int i = 0; i < n; i++) {
    sorted[isOrderMark(&ops[i]) ? front++ : back++] = ops[i];
  }
  memcpy(ops, sorted, (size_t)n * sizeof(*ops));
  free(sorted);
}

void (*symmGroupParkedHook)(struct symmComm* comm);

/* The communicator whose parked operations this thread is running. */
static __thread struct symmComm* runningParked;

ncclResult_t symmGroupRunParked(struct symmComm* comm) {
  if (__atomic_load_n(&comm->parked, __ATOMIC_ACQUIRE) == NULL) return ncclSuccess;
  /* Re-entered by an operation being run here: it is part of that run (never waits on itself). */
  if (runningParked == comm) return ncclSuccess;
  /* Held until the list has run and is cleared: whoever sees it NULL afterwards issues behind
   * every parked operation, on this rank as on the others. */
  pthread_mutex_lock(&comm->parkLock);
  struct symmDeferredList* l = comm->parked;
  ncclResult_t state = ncclSuccess, res = ncclSuccess;
  if (l != NULL) res = symmCommRealState(comm, &state);
  if (l == NULL || res != ncclSuccess || state == ncclInProgress) {
    pthread_mutex_unlock(&comm->parkLock);
    return res != ncclSuccess ? res : l == NULL ? ncclSuccess : ncclInProgress;
  }
  if (symmGroupParkedHook != NULL) symmGroupParkedHook(comm);
  /* NCCL's group has been launched: ours follow it on every stream, in call order. */
  runningParked = comm;
  ncclResult_t ours = ncclSuccess;
  for (int i = 0; i < l->count; i++) {
    const ncclResult_t r = runOp(&l->ops[i], state == ncclSuccess);
    if (r != ncclSuccess && ours == ncclSuccess) ours = r;
  }
  /* After them, every stream of the group waits for all (each op is on `comm`, which our
   * caller holds). */
  if (state == ncclSuccess) {
    const ncclResult_t joined = joinStreams(l->ops, l->count, 0);
    if (joined != ncclSuccess && ours == ncclSuccess) ours = joined;
  }
  runningParked = NULL;
  __atomic_store_n(&comm->parked, NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->parkLock);
  free(l->ops);
  free(l);
  return state != ncclSuccess ? state : ours;
}

void symmGroupDropParked(struct symmComm* comm) {
  pthread_mutex_lock(&comm->parkLock);
  struct symmDeferredList* l = comm->parked;
  __atomic_store_n(&comm->parked, NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->parkLock);
  if (l == NULL) return;
  for (int i = 0; i < l->count; i++) {
    (void)l->ops[i].run(l->ops[i].arg, 0);
    symmCommRelease(l->ops[i].comm);
  }
  free(l->ops);
  free(l);
}

/* Staging for every blocking communicator whose first call given to our kernels is in this
 * group, in one batch (one thread may drive every rank). Non-blocking ones build it in their
 * background job, after their group. */
static void stageDeferred(const struct deferredOp* ops, int n) {
  if (n <= 0) return;
  struct symmComm** comms = calloc((size_t)n, sizeof(*comms));
  if (comms == NULL) return;
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (!ops[i].needsStaging || !ops[i].comm->config.blocking) continue;
    int seen = 0;
    for (int k = 0; k < m && !seen; k++) seen = comms[k] == ops[i].comm;
    if (!seen && symmTransportNeedsStaging(ops[i].comm)) comms[m++] = ops[i].comm;
  }
  if (m > 0) (void)symmTransportStage(comms, m);
  free(comms);
}

/* Runs what the outermost group deferred: communicator setups, window mappings, then our
 * operations (deregistrations among them, in call order). `launch` = 0 when the real group did
 * not launch (it failed, or was only simulated): our launches are dropped too. */
static ncclResult_t flushDeferred(ncclResult_t groupResult, int launch, int simulated) {
  ncclResult_t res = ncclSuccess;
  const int groupOk = groupResult == ncclSuccess || groupResult == ncclInProgress;
  if (pendingCount > 0) {
    int n = pendingCount;
    pendingCount = 0;
    /* Blocking ones are ready now and set up together (one thread may own several ranks); the
     * real NCCL still creates non-blocking ones in its own threads: each in its own job, which
     * waits for that (NCCL refuses to mix both kinds in one group). One destroyed or aborted
     * inside the group is not set up: its real communicator may be freed already (NCCL ran the
     * teardown in the same group). */
    int blocking = 0;
    for (int i = 0; i < n; i++) {
      struct symmComm* c = pendingComms[i];
      const int gone = __atomic_load_n(&c->gone, __ATOMIC_ACQUIRE);
      if (c->config.blocking && !gone) {
        pendingComms[blocking++] = c;
        continue;
      }
      if (groupOk && !gone)
        symmCommStartJob(c, 0);
      else
        c->setupDone = 1;
      symmCommRelease(c);
    }
    if (groupOk && blocking > 0) (void)symmCommSetupMany(pendingComms, blocking);
    for (int i = 0; i < blocking; i++) symmCommRelease(pendingComms[i]);
  }
  if (windowCount > 0) {
    int n = windowCount;
    windowCount = 0;
    /* Non-blocking communicators: the handles are filled in once the group has completed, and
     * every rank must map (the mapping is collective), so wait for that first. */
    int ok = groupOk;
    for (int i = 0; i < n && ok && groupResult == ncclInProgress; i++)
      if (pendingWindows[i].comm != NULL) ok = symmCommWaitIdle(pendingWindows[i].comm, -1) == ncclSuccess;
    if (ok) symmTransportWindowsRegistered(pendingWindows, n);
    for (int i = 0; i < n; i++) symmCommRelease(pendingWindows[i].comm);
  }
  int nops = opCount;
  opCount = 0;
  marksFirst(pendingOps, nops);
  if (launch && groupOk) stageDeferred(pendingOps, nops);
  /* A launch that falls back to the real NCCL (staging failed on every rank) is issued inside
   * one real group with the others, as one thread may drive several ranks. */
  const int regroup = launch && groupResult == ncclSuccess && nops > 1;
  /* The group's references stay held until the streams are joined after the operations. */
  const int parking = launch && groupResult == ncclInProgress;
  const int join = launch && groupOk && !simulated && needsJoin(pendingOps, nops, parking);
  for (int i = 0; i < nops && join; i++) symmCommRetain(pendingOps[i].comm);
  ncclResult_t ignored;
  if (regroup) SYMM_CALL_REAL(ignored, ncclGroupStart, ());
  for (int i = 0; i < nops; i++) {
    struct deferredOp* op = &pendingOps[i];
    ncclResult_t r;
    if (parking && !op->comm->config.blocking)
      r = park(op); /* behind NCCL's group, which its own thread is still launching */
    else
      r = runOp(op, launch && groupOk);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  if (regroup) {
    SYMM_CALL_REAL(ignored, ncclGroupEnd, ());
    if (ignored != ncclSuccess && res == ncclSuccess) res = ignored;
  }
  /* Every stream of a communicator's operations waits for all of them (NCCL's "as if posted on
   * every stream"); parked ones are joined when they run. */
  if (join) {
    const ncclResult_t joined = joinStreams(pendingOps, nops, parking);
    if (joined != ncclSuccess && res == ncclSuccess) res = joined;
  }
  for (int i = 0; i < nops && join; i++) symmCommRelease(pendingOps[i].comm);
  return res;
}

/* The outermost group ends: forgets its streams, returns its first noted error (and forgets it). */
static ncclResult_t endOfGroup(void) {
  const ncclResult_t first = groupFirstError;
  groupFirstError = ncclSuccess;
  groupStreamCount = 0;
  return first;
}

/* What the outermost ncclGroupEnd returns where the real one answered `real` (not ncclSuccess):
 * the group's first noted error, as NCCL returns (the real NCCL's own answer may be the one to
 * our poisoning call), else the real answer. ncclInProgress (non-blocking) stays. */
static ncclResult_t failedGroupResult(ncclResult_t real, ncclResult_t first) {
  return real != ncclInProgress && first != ncclSuccess ? first : real;
}

SYMM_EXPORT ncclResult_t ncclGroupStart(void) {
  SYMM_FORWARD_IF_CALLBACK(ncclGroupStart, (), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclGroupStart, ());
  if (res == ncclSuccess) groupDepth++;
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGroupStart, (void))

SYMM_EXPORT ncclResult_t ncclGroupEnd(void) {
  SYMM_FORWARD_IF_CALLBACK(ncclGroupEnd, (), ncclSystemError);
  ncclResult_t res;
  /* Before NCCL launches the group: every stream of a communicator's operations (ours and
   * forwarded) waits for the work issued on all of them so far, as NCCL's launch does for the
   * streams it is given (it is not given the streams of ours). Harmless if the group fails. */
  const ncclResult_t joined = groupDepth == 1 ? joinStreams(pendingOps, opCount, 0) : ncclSuccess;
  SYMM_CALL_REAL(res, ncclGroupEnd, ());
  if (groupDepth > 0) groupDepth--;
  if (groupDepth > 0) return res;
  const ncclResult_t first = endOfGroup();
  ncclResult_t ours = flushDeferred(res, 1, 0);
  if (ours == ncclSuccess) ours = joined;
  return res != ncclSuccess ? failedGroupResult(res, first) : ours;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGroupEnd, (void))

/* NCCL plans the group without launching it: ours are dropped as well, and the depth drops as
 * for ncclGroupEnd (deregistrations and setups still run: they are not launches). */
SYMM_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  SYMM_FORWARD_IF_CALLBACK(ncclGroupSimulateEnd, (simInfo), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclGroupSimulateEnd, (simInfo));
  if (groupDepth > 0) groupDepth--;
  if (groupDepth > 0) return res;
  const ncclResult_t first = endOfGroup();
  /* Dropped launches here fail nothing: no rank launches the simulated group. */
  int nops = opCount;
  for (int i = 0; i < nops; i++)
    if (pendingOps[i].kind == SYMM_DEFERRED_LAUNCH) {
      (void)pendingOps[i].run(pendingOps[i].arg, 0);
      pendingOps[i].run = NULL;
    }
  int kept = 0;
  for (int i = 0; i < nops; i++) {
    if (pendingOps[i].run == NULL) symmCommRelease(pendingOps[i].comm);
    else pendingOps[kept++] = pendingOps[i];
  }
  opCount = kept;
  ncclResult_t ours = flushDeferred(res, 1, 1);
  return res != ncclSuccess ? failedGroupResult(res, first) : ours;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo))
