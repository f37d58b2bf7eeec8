/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test of the host path against the recording fake NCCL (test/abi/fake_nccl.c): a failed
 * communicator refuses every call without reaching NCCL, refused calls inside a group fail the
 * real group, deferred operations are dropped when the group does not launch, a non-blocking
 * communicator's setup job is the only caller of the real NCCL while it runs, an abort from
 * another thread during a stream of calls neither crashes nor leaks (run it under ASan), and a
 * rank with SYMMCOLL_DISABLE=1 still takes part in every communicator's setup, a launch blocked
 * under its lock keeps neither the health poll nor the abort flag waiting, a non-blocking
 * communicator created inside a group is set up only after the group's end, and a non-blocking
 * window registration left in progress returns at once, its mapping in a job. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algos.h"
#include "comm.h"
#include "cudriver.h"
#include "debug.h"
#include "failure.h"
#include "fake_nccl.h"
#include "forward.h"
#include "group.h"
#include "harness.h"
#include "init.h"
#include "internal.h"
#include "nccl_api.h"
#include "param.h"

static fakeNcclCallCountFn callCount;
static fakeNcclCallFn callAt;
static fakeNcclSetResultFn setResult;
static fakeNcclSetResultForFn setResultFor;
static fakeNcclSetAsyncErrorFn setAsyncError;
static fakeNcclDeferChildrenFn deferChildren;

static struct symmComm* knownComm(uintptr_t id, int blocking) {
  struct symmComm* c = NULL;
  CHECK_EQ_INT(symmCommAdd((ncclComm_t)id, blocking, &c), ncclSuccess);
  if (c == NULL) return NULL;
  c->rank = 0;
  c->nranks = 2;
  c->cudaDev = 0;
  c->attrsKnown = c->setupDone = 1;
  return c;
}
static struct symmComm* known(uintptr_t id) { return knownComm(id, 1); }

/* The datatype argument of the fake's last call, -2 if it has none. */
static int lastDatatype(void) {
  const struct fakeCall* call = callAt(callCount() - 1);
  if (call == NULL) return -2;
  for (int i = 0; i < call->nargs; i++)
    if (strcmp(call->args[i].name, "datatype") == 0) {
      int v = 0;
      memcpy(&v, call->args[i].bytes, sizeof(v));
      return v;
    }
  return -2;
}

static const char* lastName(void) {
  const struct fakeCall* call = callAt(callCount() - 1);
  return call != NULL ? call->name : "";
}

static void testFailedComm(void) {
  float buf[4] = {0};
  struct symmComm* c = known(0x100000);
  if (c == NULL) return;
  ncclComm_t h = c->real;
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, h, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, h, NULL), ncclSuccess);
  CHECK_EQ_INT(symmFailureRecord(&c->failure, SYMM_ERR_PEER), 1);
  const int before = callCount();
  /* Ours and forwarded ones alike return the asynchronous error and reach nothing. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, ncclFloat32, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclReduceScatter(buf, buf, 1, ncclFloat32, ncclSum, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclSend(buf, 4, ncclFloat32, 1, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclRecv(buf, 4, ncclFloat32, 1, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(ncclReduce(buf, buf, 4, ncclFloat32, ncclSum, 0, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(callCount(), before);
  /* Queries still reach the real NCCL. */
  int count = 0;
  CHECK_EQ_INT(ncclCommCount(h, &count), ncclSuccess);
  CHECK_EQ_INT(count, FAKE_COMM_COUNT);
  /* Inside a group the refusal fails NCCL's group too (an invalid call it refuses itself). */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  const int inGroup = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, h, NULL), ncclRemoteError);
  CHECK_EQ_INT(callCount(), inGroup + 1);
  CHECK_EQ_STR(lastName(), "ncclAllReduce");
  CHECK_EQ_INT(lastDatatype(), -1);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 0);
  symmCommRemove(h);
}

static void testArgumentErrors(void) {
  float buf[4] = {0};
  struct symmComm* c = known(0x200000);
  if (c == NULL) return;
  ncclComm_t h = c->real;
  /* What NCCL's own checks refuse reaches the real NCCL untouched, and its answer comes back
   * (this fake accepts everything; the real one says ncclInvalidArgument). */
  const int before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, h, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 1);
  CHECK_EQ_INT(lastDatatype(), 99);
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, (ncclDataType_t)-3, h, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 2);
  CHECK_EQ_INT(lastDatatype(), -3);
  /* What NCCL does not check (a byte size that overflows) is ours to refuse: nothing forwarded. */
  CHECK_EQ_INT(ncclReduceScatter(buf, buf, SIZE_MAX / 2, ncclFloat32, ncclSum, h, NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(callCount(), before + 2);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat32, ncclSum, h, NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(lastDatatype(), -1);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  /* A healthy communicator without our memory forwards valid calls. */
  const int valid = callCount();
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, ncclFloat32, h, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), valid + 1);
  CHECK_EQ_STR(lastName(), "ncclAllGather");
  symmCommRemove(h);
}

/* A deferred operation that records how it was run. */
struct probe {
  int runs, launched;
  int order; /* when it last ran (probeClock) */
};
static int probeClock;
static ncclResult_t probeRun(void* arg, int launch) {
  struct probe* p = arg;
  p->runs++;
  p->launched += launch;
  p->order = ++probeClock;
  return ncclSuccess;
}

static void testGroups(void) {
  float buf[4] = {0};
  struct symmComm* c = known(0x300000);
  if (c == NULL) return;
  struct probe ours = {0}, marker = {0}, unreg = {0};

  /* The group launches: everything runs. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, NULL, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(ours.runs, 1);
  CHECK_EQ_INT(ours.launched, 1);
  CHECK_EQ_INT(symmFailureGet(&c->failure), ncclSuccess);

  /* ncclGroupSimulateEnd: depth back to 0, our launch dropped, nothing failed, and the next
   * call is not deferred any more. */
  memset(&ours, 0, sizeof(ours));
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 2);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, NULL, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_UNREGISTER, 0, NULL, probeRun, &unreg), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 1);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK_EQ_INT(ncclGroupSimulateEnd(&sim), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 0);
  CHECK_EQ_INT(ours.runs, 1);
  CHECK_EQ_INT(ours.launched, 0);
  CHECK_EQ_INT(unreg.launched, 1);
  CHECK_EQ_INT(symmFailureGet(&c->failure), ncclSuccess);
  const int before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 1);

  /* A forwarded call's order mark runs before our launches of the group, whatever the call
   * order (the real NCCL already put its kernel on the stream: ours then follow it), and the
   * rest keep their call order (a deregistration after the launch before it). Two streams, so
   * the group also joins them (no transport here: nothing to do on the CPU). */
  memset(&ours, 0, sizeof(ours));
  memset(&marker, 0, sizeof(marker));
  memset(&unreg, 0, sizeof(unreg));
  struct probe ours2 = {0};
  cudaStream_t s1 = (cudaStream_t)(uintptr_t)0x10, s2 = (cudaStream_t)(uintptr_t)0x20;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, &s1, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_UNREGISTER, 0, NULL, probeRun, &unreg), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, &s2, probeRun, &ours2), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_FORWARDED, 0, &s2, probeRun, &marker), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(marker.launched, 1);
  CHECK_EQ_INT(ours.launched, 1);
  CHECK_EQ_INT(ours2.launched, 1);
  CHECK_EQ_INT(unreg.launched, 1);
  CHECK(marker.order < ours.order && ours.order < unreg.order && unreg.order < ours2.order);
  CHECK_EQ_INT(symmFailureGet(&c->failure), ncclSuccess);

  /* The real ncclGroupEnd fails: our launch is dropped and its communicator fails (its peers'
   * kernels would wait for ours); deregistrations and ordering marks still run. */
  memset(&ours, 0, sizeof(ours));
  memset(&marker, 0, sizeof(marker));
  memset(&unreg, 0, sizeof(unreg));
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, NULL, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_FORWARDED, 0, NULL, probeRun, &marker), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_UNREGISTER, 0, NULL, probeRun, &unreg), ncclSuccess);
  setResult(ncclInternalError);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInternalError);
  setResult(ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 0);
  CHECK_EQ_INT(ours.runs, 1);
  CHECK_EQ_INT(ours.launched, 0);
  CHECK_EQ_INT(marker.launched, 1);
  CHECK_EQ_INT(unreg.launched, 1);
  CHECK_EQ_INT(symmFailureGet(&c->failure), symmFailureResult(SYMM_ERR_LAUNCH));
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, NULL),
               symmFailureResult(SYMM_ERR_LAUNCH));
  symmCommRemove(c->real);
}

/* ---- a group's streams: all uncaptured or all in one capture ------------------------------ */

/* The driver's answer for every stream of this test (installed in main: there is no GPU here,
 * and a call inside a group reads its stream's capture): by handle, 0x20 and 0x50 in capture
 * 42, 0x30 in capture 43, every other one (NULL too) uncaptured. */
static int captureQueries;
static CUresult captureByHandle(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                CUgraph* graph, const CUgraphNode** deps,
                                const CUgraphEdgeData** edges, size_t* ndeps) {
  (void)edges;
  __atomic_add_fetch(&captureQueries, 1, __ATOMIC_RELAXED);
  const uintptr_t h = (uintptr_t)s;
  const int captured = h == 0x20 || h == 0x50 || h == 0x30;
  *status = captured ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  *id = captured ? (h == 0x30 ? 43 : 42) : 0;
  *graph = captured ? (CUgraph)(uintptr_t)(0x1000 + *id) : NULL;
  if (deps != NULL) *deps = NULL;
  if (ndeps != NULL) *ndeps = 0;
  return CUDA_SUCCESS;
}
static CUresult streamIdByHandle(CUstream s, unsigned long long* id) {
  *id = (unsigned long long)(uintptr_t)s;
  return CUDA_SUCCESS;
}

/* NCCL refuses a group whose calls on one communicator use captured and uncaptured streams, or
 * two captures (ncclInvalidUsage, and the group fails); the real NCCL sees only the calls given
 * to it, so ours checks every call: symmGroupUseStream, and through a forwarded call's entry. */
static void testGroupStreams(void) {
  struct symmComm* c = known(0x310000);
  struct symmComm* other = known(0x320000);
  if (c == NULL || other == NULL) return;
  const cudaStream_t unc = (cudaStream_t)0x10, unc2 = (cudaStream_t)0x40;
  const cudaStream_t cap = (cudaStream_t)0x20, cap2 = (cudaStream_t)0x50;
  const cudaStream_t otherCap = (cudaStream_t)0x30;
  /* Outside a group: nothing to agree with. */
  CHECK_EQ_INT(symmGroupUseStream(c, unc), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, cap), ncclSuccess);
  /* A communicator on one stream in a group (the common case): no capture is read. */
  captureQueries = 0;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < 3; k++) CHECK_EQ_INT(symmGroupUseStream(c, cap), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(other, unc), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(captureQueries, 0);

  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, unc), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, unc2), ncclSuccess); /* both uncaptured */
  CHECK_EQ_INT(captureQueries, 2);                         /* a second stream: both read */
  CHECK_EQ_INT(symmGroupUseStream(c, unc), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, cap), ncclInvalidUsage);
  CHECK_EQ_INT(captureQueries, 3);                         /* the first is read once */
  CHECK_EQ_INT(symmGroupUseStream(other, cap), ncclSuccess); /* per communicator */
  CHECK_EQ_INT(symmGroupUseStream(other, unc), ncclInvalidUsage);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);

  /* The next group starts afresh; one capture on two streams is fine, another capture not. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, cap), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess); /* nested: the group goes on */
  CHECK_EQ_INT(symmGroupUseStream(c, cap2), ncclSuccess);
  CHECK_EQ_INT(symmGroupUseStream(c, otherCap), ncclInvalidUsage);
  CHECK_EQ_INT(symmGroupUseStream(c, unc), ncclInvalidUsage);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);

  /* Through the API: a forwarded call that breaks the rule is refused before the real NCCL
   * sees it, and fails the real group (its one refused call: datatype -1). */
  float buf[4] = {0};
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  int before = callCount();
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, c->real, unc), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 1);
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, c->real, cap), ncclInvalidUsage);
  CHECK_EQ_INT(callCount(), before + 2);
  CHECK_EQ_INT(lastDatatype(), -1);
  /* An empty call is dropped by NCCL before it looks at the stream: not checked. */
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 0, ncclFloat32, 0, c->real, cap), ncclSuccess);
  /* The real group fails (its answer to the poisoning call); ncclGroupEnd returns the group's
   * first error, as NCCL does. */
  setResult(ncclInvalidArgument);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInvalidUsage);
  setResult(ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 0);

  /* One of our collectives: the route asks the same before anything else. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, cap), ncclSuccess);
  before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, unc), ncclInvalidUsage);
  CHECK_EQ_INT(callCount(), before + 1);
  CHECK_EQ_INT(lastDatatype(), -1);
  setResult(ncclInvalidArgument);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInvalidUsage);
  setResult(ncclSuccess);
  /* The first error is forgotten with its group: the next failed group answers its own. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  setResult(ncclInternalError);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInternalError);
  setResult(ncclSuccess);
  /* A real call's own error comes first where it came first (the real NCCL noted it). */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  setResult(ncclRemoteError);
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, c->real, unc), ncclRemoteError);
  setResult(ncclSuccess);
  CHECK_EQ_INT(ncclBroadcast(buf, buf, 4, ncclFloat32, 0, c->real, cap), ncclInvalidUsage);
  setResult(ncclInvalidArgument);
  CHECK_EQ_INT(ncclGroupEnd(), ncclRemoteError);
  setResult(ncclSuccess);
  symmCommRemove(c->real);
  symmCommRemove(other->real);
}

/* ---- a non-blocking communicator while our setup job runs ---------------------------------- */

/* The job is the real communicator's only user: ncclCommGetAsyncError says ncclInProgress without
 * asking the real NCCL (whose own completes finished operations unlocked: two pollers free them
 * twice), and asks it again once the job is done. */
static void testJobOwnsRealComm(void) {
  struct symmCommConfig config = {.blocking = 0, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  struct symmComm* c = NULL;
  const ncclComm_t h = (ncclComm_t)(uintptr_t)0x480000;
  CHECK_EQ_INT(symmCommAddConfig(h, &config, SYMM_JOB_RUNNING, &c), ncclSuccess);
  if (c == NULL) return;
  c->rank = 0;
  c->nranks = 2;
  c->cudaDev = 0;
  const int before = callCount();
  ncclResult_t state = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(h, &state), ncclSuccess);
  CHECK_EQ_INT(state, ncclInProgress);
  CHECK_EQ_INT(callCount(), before);
  /* Our failure still shows while the job runs. */
  CHECK_EQ_INT(symmFailureRecord(&c->failure, SYMM_ERR_PEER), 1);
  CHECK_EQ_INT(ncclCommGetAsyncError(h, &state), ncclSuccess);
  CHECK_EQ_INT(state, ncclRemoteError);
  CHECK_EQ_INT(callCount(), before);
  __atomic_store_n(&c->job, SYMM_JOB_DONE, __ATOMIC_RELEASE);
  state = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(h, &state), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 1);
  CHECK_EQ_STR(lastName(), "ncclCommGetAsyncError");
  CHECK_EQ_INT(state, FAKE_ASYNC_ERROR);
  symmCommRemove(h);
}

/* ---- parked operations of a non-blocking communicator go first --------------------------- */

/* A parked operation: how it ran, and how many calls had reached the fake NCCL by then. */
struct ordered {
  int runs, launched, callsBefore;
};
static ncclResult_t orderedRun(void* arg, int launch) {
  struct ordered* o = arg;
  o->callsBefore = callCount();
  o->launched += launch;
  __atomic_add_fetch(&o->runs, 1, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* Parks `op` behind a non-blocking group that the fake NCCL is still launching. */
static void parkBehindGroup(struct symmComm* c, struct ordered* op) {
  setAsyncError(ncclInProgress);
  setResultFor("ncclGroupEnd", ncclInProgress);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, NULL, orderedRun, op), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInProgress);
  setResultFor(NULL, ncclSuccess);
  CHECK_EQ_INT(op->runs, 0);
}

/* Where the fake NCCL logged its most recent `name` call with count `count`, -1 if it did not. */
static int findCall(const char* name, size_t count) {
  for (int i = callCount() - 1; i >= 0; i--) {
    const struct fakeCall* call = callAt(i);
    if (call == NULL) return -1;
    if (strcmp(call->name, name) != 0) continue;
    for (int a = 0; a < call->nargs; a++) {
      size_t v = 0;
      if (strcmp(call->args[a].name, "count") == 0 && call->args[a].size == sizeof(v)) {
        memcpy(&v, call->args[a].bytes, sizeof(v));
        if (v == count) return i;
      }
    }
  }
  return -1;
}

/* The runner pauses between taking the parked operations and running them. */
static pthread_mutex_t gateLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gateCond = PTHREAD_COND_INITIALIZER;
static int gatePaused, gateOpen;
static void pauseHook(struct symmComm* comm) {
  (void)comm;
  pthread_mutex_lock(&gateLock);
  gatePaused = 1;
  pthread_cond_broadcast(&gateCond);
  while (!gateOpen) pthread_cond_wait(&gateCond, &gateLock);
  pthread_mutex_unlock(&gateLock);
}

static void* pollOnce(void* arg) {
  ncclResult_t state = ncclInProgress;
  CHECK_EQ_INT(ncclCommGetAsyncError((ncclComm_t)arg, &state), ncclSuccess);
  return NULL;
}

/* The application's thread, after the group: polls until done, then issues its next call. */
struct issuer {
  ncclComm_t comm;
  const struct ordered* parked;
  ncclResult_t state, called;
  int parkedRanWhenDone, done;
};
static void* issueNext(void* arg) {
  struct issuer* k = arg;
  float buf[4] = {0};
  k->state = ncclInProgress;
  CHECK_EQ_INT(ncclCommGetAsyncError(k->comm, &k->state), ncclSuccess);
  k->parkedRanWhenDone = __atomic_load_n(&k->parked->runs, __ATOMIC_ACQUIRE);
  k->called = ncclAllReduce(buf, buf, 3, ncclFloat32, ncclSum, k->comm, NULL);
  __atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* A watchdog's ncclCommGetAsyncError takes the parked operation and is held before it runs it:
 * the application's thread must neither hear ncclSuccess nor reach the real NCCL before it ran
 * (if it did either, this rank would launch its next call ahead of the parked one). */
static void testParkedRace(void) {
  struct symmComm* c = knownComm(0x400000, 0);
  if (c == NULL) return;
  struct ordered parked = {0};
  parkBehindGroup(c, &parked);
  setAsyncError(ncclSuccess);
  gatePaused = gateOpen = 0;
  symmGroupParkedHook = pauseHook;
  pthread_t watchdog, app;
  pthread_create(&watchdog, NULL, pollOnce, c->real);
  pthread_mutex_lock(&gateLock);
  while (!gatePaused) pthread_cond_wait(&gateCond, &gateLock);
  pthread_mutex_unlock(&gateLock);
  struct issuer k = {.comm = c->real, .parked = &parked};
  pthread_create(&app, NULL, issueNext, &k);
  /* Long enough for the application's thread to get through if nothing holds it. */
  for (int i = 0; i < 200 && !__atomic_load_n(&k.done, __ATOMIC_ACQUIRE); i++) {
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
  }
  CHECK_EQ_INT(__atomic_load_n(&k.done, __ATOMIC_ACQUIRE), 0);
  pthread_mutex_lock(&gateLock);
  gateOpen = 1;
  pthread_cond_broadcast(&gateCond);
  pthread_mutex_unlock(&gateLock);
  pthread_join(watchdog, NULL);
  pthread_join(app, NULL);
  symmGroupParkedHook = NULL;
  CHECK_EQ_INT(parked.runs, 1);
  CHECK_EQ_INT(parked.launched, 1);
  CHECK_EQ_INT(k.state, ncclSuccess);
  CHECK_EQ_INT(k.parkedRanWhenDone, 1);
  CHECK_EQ_INT(k.called, ncclSuccess);
  const int at = findCall("ncclAllReduce", 3);
  CHECK(at >= 0);
  CHECK(parked.callsBefore <= at);
  setAsyncError(FAKE_ASYNC_ERROR);
  symmCommRemove(c->real);
}

struct hammer {
  ncclComm_t comm;
  int stop;
  long polls;
};
static void* hammerLoop(void* arg) {
  struct hammer* h = arg;
  while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
    ncclResult_t state;
    (void)ncclCommGetAsyncError(h->comm, &state);
    __atomic_add_fetch(&h->polls, 1, __ATOMIC_RELAXED);
    sched_yield();
  }
  return NULL;
}

/* The same without a pause: a thread hammers ncclCommGetAsyncError while the application parks
 * an operation per group and then issues its next call, grouped or not; each parked operation
 * must have run before that call reached the real NCCL. */
static void testParkedOrder(int rounds) {
  struct symmComm* c = knownComm(0x500000, 0);
  if (c == NULL) return;
  struct hammer h = {.comm = c->real};
  pthread_t t;
  pthread_create(&t, NULL, hammerLoop, &h);
  while (__atomic_load_n(&h.polls, __ATOMIC_RELAXED) == 0) sched_yield();
  float buf[4] = {0};
  int wrong = 0, unseen = 0;
  for (int i = 0; i < rounds; i++) {
    struct ordered parked = {0};
    parkBehindGroup(c, &parked);
    setAsyncError(ncclSuccess);
    if (i % 3 == 0) sched_yield(); /* now and then, let the hammer take them */
    const size_t marker = 1000 + (size_t)i;
    if (i % 2 == 0) {
      CHECK_EQ_INT(ncclAllReduce(buf, buf, marker, ncclFloat32, ncclSum, c->real, NULL), ncclSuccess);
    } else {
      CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
      CHECK_EQ_INT(ncclAllReduce(buf, buf, marker, ncclFloat32, ncclSum, c->real, NULL), ncclSuccess);
      CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
    }
    const int at = findCall("ncclAllReduce", marker);
    if (at < 0) {
      unseen++; /* dropped from the fake's ring by the hammer's calls */
      continue;
    }
    CHECK_EQ_INT(__atomic_load_n(&parked.runs, __ATOMIC_ACQUIRE), 1);
    wrong += parked.callsBefore > at;
  }
  __atomic_store_n(&h.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK_EQ_INT(wrong, 0);
  CHECK(unseen < rounds / 2);
  printf("parked order: %d rounds, %d out of order, %d not checked, %ld polls\n", rounds, wrong,
         unseen, h.polls);
  setAsyncError(FAKE_ASYNC_ERROR);
  symmCommRemove(c->real);
}

/* ---- children of non-blocking splits and shrinks ------------------------------------------ */

/* Polls ncclCommGetAsyncError until it leaves ncclInProgress (at most 10 s). */
static ncclResult_t settled(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 100000 && state == ncclInProgress; i++) {
    CHECK_EQ_INT(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    if (state == ncclInProgress) {
      struct timespec pause = {0, 100 * 1000};
      nanosleep(&pause, NULL);
    }
  }
  return state;
}

/* A split returns ncclInProgress on a non-blocking parent. Whether the real NCCL's thread has
 * stored the child by then (`early`) or stores it at completion (NCCL 2.28), every rank must do
 * the same: nothing known or handed out while the parent is in progress, then the child
 * registered (setting itself up in the background) before the caller gets it: registered at
 * once in the first case, or never in the second, is the failure this catches. */
static void testNonBlockingSplit(int early, int shrink) {
  const ncclComm_t expect = shrink ? FAKE_COMM_SHRINK : FAKE_COMM_SPLIT;
  struct symmComm* c = knownComm(0x600000 + (uintptr_t)(early * 2 + shrink) * 0x10000, 0);
  if (c == NULL) return;
  const ncclComm_t parent = c->real;
  deferChildren(!early);
  setAsyncError(ncclInProgress);
  setResultFor(shrink ? "ncclCommShrink" : "ncclCommSplit", ncclInProgress);
  ncclComm_t child = (ncclComm_t)(uintptr_t)0xbad;
  int exclude[1] = {1};
  const ncclResult_t res = shrink ? ncclCommShrink(parent, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT)
                                  : ncclCommSplit(parent, 0, 0, &child, NULL);
  setResultFor(NULL, ncclSuccess);
  CHECK_EQ_INT(res, ncclInProgress);
  CHECK(__atomic_load_n(&child, __ATOMIC_ACQUIRE) == NULL);
  CHECK(symmCommFind(expect) == NULL);
  ncclResult_t state = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(parent, &state), ncclSuccess);
  CHECK_EQ_INT(state, ncclInProgress);
  CHECK(__atomic_load_n(&child, __ATOMIC_ACQUIRE) == NULL);
  /* The real NCCL completes (child stored, then the parent's state). */
  setAsyncError(ncclSuccess);
  CHECK_EQ_INT(settled(parent), ncclSuccess);
  CHECK(__atomic_load_n(&child, __ATOMIC_ACQUIRE) == expect);
  const struct symmComm* k = symmCommFind(expect);
  CHECK(k != NULL);
  if (k != NULL) CHECK_EQ_INT(k->config.blocking, 0);
  /* Its own setup job (which finds no GPU here, so it forwards) ends too. */
  CHECK_EQ_INT(settled(expect), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(expect), ncclSuccess);
  CHECK(symmCommFind(expect) == NULL);
  deferChildren(0);
  setAsyncError(FAKE_ASYNC_ERROR);
  symmCommRemove(parent);
}

/* The parent is aborted while its child is being created: the caller still gets the child (the
 * real abort completes or fails it), unregistered: it forwards. */
static void testSplitThenAbort(void) {
  struct symmComm* c = knownComm(0xa00000, 0);
  if (c == NULL) return;
  const ncclComm_t parent = c->real;
  deferChildren(1);
  setAsyncError(ncclInProgress);
  setResultFor("ncclCommSplit", ncclInProgress);
  ncclComm_t child = NULL;
  CHECK_EQ_INT(ncclCommSplit(parent, 0, 0, &child, NULL), ncclInProgress);
  setResultFor(NULL, ncclSuccess);
  CHECK_EQ_INT(ncclCommAbort(parent), ncclSuccess);
  CHECK(__atomic_load_n(&child, __ATOMIC_ACQUIRE) == FAKE_COMM_SPLIT);
  CHECK(symmCommFind(FAKE_COMM_SPLIT) == NULL);
  CHECK(symmCommFind(parent) == NULL);
  deferChildren(0);
  setAsyncError(FAKE_ASYNC_ERROR);
}

/* Blocking parents: the child is final when the call returns and known at once; inside a group
 * the real NCCL stores it at the group's end, so it stays unknown (forwards) on every rank. */
static void testBlockingSplit(void) {
  struct symmComm* c = known(0x700000);
  if (c == NULL) return;
  ncclComm_t child = NULL;
  CHECK_EQ_INT(ncclCommSplit(c->real, 0, 0, &child, NULL), ncclSuccess);
  CHECK(child == FAKE_COMM_SPLIT);
  CHECK(symmCommFind(FAKE_COMM_SPLIT) != NULL);
  CHECK_EQ_INT(ncclCommDestroy(FAKE_COMM_SPLIT), ncclSuccess);
  child = NULL;
  deferChildren(1); /* stored at the group's end */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclCommSplit(c->real, 0, 0, &child, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  setAsyncError(ncclSuccess); /* the fake's group end */
  CHECK(child == FAKE_COMM_SPLIT);
  CHECK(symmCommFind(FAKE_COMM_SPLIT) == NULL);
  deferChildren(0);
  setAsyncError(FAKE_ASYNC_ERROR);
  symmCommRemove(c->real);
}

/* NCCL_SHRINK_ABORT raises the parent's abort state before the real shrink; later calls on the
 * parent forward to the real NCCL. */
static void testShrinkAbort(void) {
  struct symmComm* c = known(0x800000);
  if (c == NULL) return;
  ncclComm_t child = NULL;
  int exclude[1] = {1};
  CHECK_EQ_INT(__atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE), 0);
  CHECK_EQ_INT(ncclCommShrink(c->real, exclude, 1, &child, NULL, NCCL_SHRINK_ABORT), ncclSuccess);
  CHECK_EQ_INT(__atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE), 1);
  CHECK(child == FAKE_COMM_SHRINK);
  float buf[4] = {0};
  const int before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 1);
  CHECK_EQ_STR(lastName(), "ncclAllReduce");
  CHECK_EQ_INT(ncclCommDestroy(FAKE_COMM_SHRINK), ncclSuccess);
  symmCommRemove(c->real);
}

/* ---- abort from another thread during a stream of calls ----------------------------------- */

struct caller {
  ncclComm_t comm;
  int stop;
  long calls, refused;
};

static void* callLoop(void* arg) {
  struct caller* k = arg;
  float buf[4] = {0};
  while (!__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) {
    ncclResult_t r1 = ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, k->comm, NULL);
    ncclResult_t r2 = ncclBroadcast(buf, buf, 4, ncclFloat32, 0, k->comm, NULL);
    ncclResult_t r3 = ncclAllGather(buf, buf, 1, ncclFloat32, k->comm, NULL);
    ncclResult_t r4;
    (void)ncclCommGetAsyncError(k->comm, &r4);
    __atomic_add_fetch(&k->calls, 3, __ATOMIC_RELEASE);
    k->refused += (r1 == ncclInvalidUsage) + (r2 == ncclInvalidUsage) + (r3 == ncclInvalidUsage);
    CHECK(r1 == ncclSuccess || r1 == ncclInvalidUsage);
    CHECK(r2 == ncclSuccess || r2 == ncclInvalidUsage);
  }
  return NULL;
}

static void testAbortRace(int cycles) {
  long calls = 0;
  unsigned seed = 12345;
  for (int i = 0; i < cycles; i++) {
    struct symmComm* c = known(0x1000000 + (uintptr_t)i * 16);
    if (c == NULL) return;
    struct caller k = {.comm = c->real};
    pthread_t t;
    pthread_create(&t, NULL, callLoop, &k);
    /* Abort while calls are being made: after the first ones, at a random point. */
    while (__atomic_load_n(&k.calls, __ATOMIC_ACQUIRE) == 0) sched_yield();
    struct timespec pause = {0, (long)(rand_r(&seed) % 50) * 1000};
    nanosleep(&pause, NULL);
    CHECK_EQ_INT(ncclCommAbort(k.comm), ncclSuccess);
    /* After abort the handle is unknown: calls go to the (fake) real NCCL, as NCCL's own would
     * reach a freed communicator; ours never touch the freed entry. */
    __atomic_store_n(&k.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(symmCommFind(k.comm) == NULL);
    calls += k.calls;
  }
  CHECK_EQ_INT(symmCommCount(), 0);
  printf("abort race: %d cycles, %ld calls\n", cycles, calls);
}

/* ---- a launch blocked under launchLock ------------------------------------------------------ */

/* A launch of ours holds launchLock, and the CUDA call under it blocks while the launch queue is
 * full, behind our kernels that wait for a dead peer. The watchdog's ncclCommGetAsyncError
 * still answers (with the kernels' error word) and ncclCommAbort's flag (here through
 * ncclCommRevoke, the same flag) still goes up: the only way those kernels end. */
struct asyncCall {
  ncclComm_t comm;
  int revoke; /* else poll */
  ncclResult_t state;
  int done;   /* atomic */
};

static void* callAsync(void* arg) {
  struct asyncCall* a = arg;
  if (a->revoke)
    (void)ncclCommRevoke(a->comm, NCCL_REVOKE_DEFAULT);
  else
    (void)ncclCommGetAsyncError(a->comm, &a->state);
  __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* 1 once a->done, 0 after 2 s. */
static int finishes(struct asyncCall* a) {
  for (int ms = 0; ms < 2000; ms++) {
    if (__atomic_load_n(&a->done, __ATOMIC_ACQUIRE)) return 1;
    struct timespec pause = {0, 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  return 0;
}

static void testBlockedLaunch(void) {
  struct symmComm* c = known(0x5400000);
  struct symmTransport* t = calloc(1, sizeof(*t));
  static uint32_t hostWords[SYMM_HOST_SLOT_BYTES / sizeof(uint32_t)];
  CHECK(c != NULL && t != NULL);
  if (c == NULL || t == NULL) return;
  t->flags.host = hostWords;
  c->transport = t;
  setAsyncError(ncclSuccess); /* the real NCCL sees nothing wrong: ours must show */
  pthread_mutex_lock(&c->launchLock); /* the blocked launch */
  __atomic_store_n(&hostWords[SYMM_HOST_ERROR], (uint32_t)SYMM_ERR_PEER, __ATOMIC_RELEASE);
  struct asyncCall poll = {.comm = c->real}, revoke = {.comm = c->real, .revoke = 1};
  pthread_t pollThread, revokeThread;
  CHECK(pthread_create(&pollThread, NULL, callAsync, &poll) == 0);
  CHECK(finishes(&poll));
  CHECK(pthread_create(&revokeThread, NULL, callAsync, &revoke) == 0);
  CHECK(finishes(&revoke));
  CHECK_EQ_INT(__atomic_load_n(&hostWords[SYMM_HOST_ABORT], __ATOMIC_ACQUIRE), 1);
  pthread_mutex_unlock(&c->launchLock); /* the launch goes on (a failed check above ends here) */
  pthread_join(pollThread, NULL);
  pthread_join(revokeThread, NULL);
  CHECK_EQ_INT(poll.state, ncclRemoteError);
  CHECK_EQ_INT(symmFailureGet(&c->failure), ncclRemoteError);
  pthread_mutex_lock(&c->launchLock);
  c->transport = NULL; /* not a real one: nothing to tear down */
  pthread_mutex_unlock(&c->launchLock);
  free(t);
  setAsyncError(FAKE_ASYNC_ERROR);
  CHECK_EQ_INT(ncclCommDestroy(c->real), ncclSuccess);
}

/* A non-blocking communicator whose real NCCL keeps an error (a call it refused) refuses our
 * calls with it too, as NCCL refuses every later call; a blocking one does not ask. */
static void testStickyError(void) {
  for (int blocking = 0; blocking <= 1; blocking++) {
    struct symmComm* c = knownComm(blocking ? 0x5500000 : 0x5600000, blocking);
    struct symmTransport* t = calloc(1, sizeof(*t));
    static uint32_t hostWords[SYMM_HOST_SLOT_BYTES / sizeof(uint32_t)];
    CHECK(c != NULL && t != NULL);
    if (c == NULL || t == NULL) return;
    memset(hostWords, 0, sizeof(hostWords));
    t->flags.host = hostWords;
    c->transport = t;
    setAsyncError(ncclInvalidArgument);
    float buf[4] = {0};
    const int before = callCount();
    const ncclResult_t res = ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c->real, NULL);
    if (!blocking) {
      CHECK_EQ_INT(res, ncclInvalidArgument);
      CHECK_EQ_INT(callCount(), before + 1); /* the state, nothing else */
      CHECK_EQ_STR(lastName(), "ncclCommGetAsyncError");
    } else {
      CHECK(callCount() == before || strcmp(lastName(), "ncclCommGetAsyncError") != 0);
    }
    c->transport = NULL; /* not a real one: nothing to tear down */
    free(t);
    setAsyncError(FAKE_ASYNC_ERROR);
    symmCommRemove(c->real);
  }
}

/* ---- SYMMCOLL_DISABLE on this rank: its peers' setup exchange needs it ----------------------- */

/* An entry that went through setup (as a disabled rank: nothing of ours loaded or built). */
static void checkSetUpDisabled(ncclComm_t comm) {
  struct symmComm* e = symmCommFind(comm);
  CHECK(e != NULL);
  if (e == NULL) return;
  CHECK_EQ_INT(e->setupDone, 1);
  CHECK_EQ_INT(e->attrsKnown, 1); /* its record needs rank and size */
  CHECK_EQ_INT(e->rank, FAKE_COMM_RANK);
  CHECK_EQ_INT(e->kernelsLoaded, 0);
  CHECK(e->transport == NULL);
}

static void testDisabledRank(void) {
  setenv("SYMMCOLL_DISABLE", "1", 1);
  setenv("NCCL_COMM_BLOCKING", "1", 1); /* setup inside the creating call */
  symmParamResetAll();
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  ncclComm_t comm = NULL, grouped = NULL, split = NULL, shrunk = NULL, scalable = NULL;
  ncclComm_t all[2] = {NULL, NULL};
  CHECK_EQ_INT(ncclCommInitRank(&comm, FAKE_COMM_COUNT, id, FAKE_COMM_RANK), ncclSuccess);
  checkSetUpDisabled(comm);
  /* The real NCCL calling back into us (symmRealDepth > 0) still passes straight through. */
  symmRealDepth++;
  CHECK_EQ_INT(ncclCommSplit(comm, 0, 0, &split, NULL), ncclSuccess);
  symmRealDepth--;
  CHECK(split == FAKE_COMM_SPLIT);
  CHECK(symmCommFind(split) == NULL);
  CHECK_EQ_INT(ncclCommDestroy(split), ncclSuccess);
  /* Inside a group: set up at the outermost end, as on every other rank. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 1);
  CHECK_EQ_INT(ncclCommInitRankConfig(&grouped, FAKE_COMM_COUNT, id, FAKE_COMM_RANK, &config),
               ncclSuccess);
  struct symmComm* g = symmCommFind(grouped);
  CHECK(g != NULL && !g->setupDone);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDepth(), 0);
  checkSetUpDisabled(grouped);
  /* Every other way of creating one. */
  CHECK_EQ_INT(ncclCommSplit(comm, 0, 0, &split, NULL), ncclSuccess);
  checkSetUpDisabled(split);
  int exclude[1] = {0};
  CHECK_EQ_INT(ncclCommShrink(comm, exclude, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
  checkSetUpDisabled(shrunk);
  CHECK_EQ_INT(ncclCommInitRankScalable(&scalable, FAKE_COMM_COUNT, FAKE_COMM_RANK, 1, &id, NULL),
               ncclSuccess);
  checkSetUpDisabled(scalable);
  CHECK_EQ_INT(ncclCommInitAll(all, 2, NULL), ncclSuccess);
  checkSetUpDisabled(all[0]);
  checkSetUpDisabled(all[1]);
  /* Collectives on the disabled rank pass straight through: one call each, nothing of ours. */
  float buf[4] = {0};
  const int before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, ncclFloat32, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclReduceScatter(buf, buf, 1, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  CHECK_EQ_INT(callCount(), before + 3);
  CHECK_EQ_STR(lastName(), "ncclReduceScatter");
  struct symmComm* e = symmCommFind(comm);
  CHECK(e != NULL && e->launches == 0);
  ncclResult_t state = ncclInProgress;
  CHECK_EQ_INT(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  CHECK_EQ_INT(state, FAKE_ASYNC_ERROR); /* the fake's answer, nothing of ours added */
  const ncclComm_t made[] = {comm, grouped, split, shrunk, scalable, all[0], all[1]};
  for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
    CHECK_EQ_INT(ncclCommDestroy(made[i]), ncclSuccess);
    CHECK(symmCommFind(made[i]) == NULL);
  }
  unsetenv("SYMMCOLL_DISABLE");
  unsetenv("NCCL_COMM_BLOCKING");
  symmParamResetAll();
}

/* A non-blocking communicator created inside a group: the real NCCL creates it only at the
 * group's outermost end (before, it reports no error and 0 ranks), so our setup job starts
 * there, not at the creating call. */
static void testNonBlockingInGroup(void) {
  setenv("SYMMCOLL_DISABLE", "1", 1); /* setup runs (attributes, exchange), nothing is built */
  unsetenv("NCCL_COMM_BLOCKING");
  symmParamResetAll();
  setAsyncError(ncclSuccess); /* the real creation is over once the job asks */
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, FAKE_COMM_COUNT, id, FAKE_COMM_RANK, &config),
               ncclSuccess);
  struct symmComm* e = symmCommFind(comm);
  CHECK(e != NULL);
  if (e != NULL) {
    struct timespec pause = {0, 20 * 1000 * 1000}; /* a job started too early would be done */
    nanosleep(&pause, NULL);
    CHECK_EQ_INT(symmCommJobState(e), ncclSuccess); /* no job yet */
    CHECK_EQ_INT(e->setupDone, 0);
    CHECK_EQ_INT(e->attrsKnown, 0);
  }
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  if (e != NULL) symmCommWaitJob(e);
  checkSetUpDisabled(comm);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK(symmCommFind(comm) == NULL);
  /* Destroyed inside the group that created it: no job at the group's end (the real
   * communicator may be freed by then), so the real NCCL hears nothing more about it. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(ncclCommInitRankConfig(&comm, FAKE_COMM_COUNT, id, FAKE_COMM_RANK, &config),
               ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  const int afterEnd = callCount();
  struct timespec settle = {0, 50 * 1000 * 1000};
  nanosleep(&settle, NULL);
  CHECK_EQ_INT(callCount(), afterEnd);
  CHECK_EQ_STR(lastName(), "ncclGroupEnd");
  CHECK(symmCommFind(comm) == NULL);
  setAsyncError(FAKE_ASYNC_ERROR);
  unsetenv("SYMMCOLL_DISABLE");
  symmParamResetAll();
}

/* ---- a non-blocking window registration the real NCCL leaves in progress -------------------
 * NCCL completes it in its own thread with a barrier over every rank, which one thread driving
 * several ranks reaches only after this call returns; 2.28 answers ncclSuccess meanwhile (the
 * handle is written at the end, the communicator says ncclInProgress), other versions
 * ncclInProgress. The call must return NCCL's answer at once, and the communicator say
 * ncclInProgress until the registration and our mapping job are done. */
struct windowCall {
  ncclComm_t comm;
  ncclWindow_t win;
  ncclResult_t res;
  int done;
};
static void* registerWindow(void* arg) {
  struct windowCall* w = arg;
  static float buf[64];
  w->res = ncclCommWindowRegister(w->comm, buf, sizeof(buf), &w->win, NCCL_WIN_COLL_SYMMETRIC);
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void testNonBlockingWindow(ncclResult_t realAnswer) {
  struct symmComm* c = knownComm(0x5700000, 0);
  if (c == NULL) return;
  setAsyncError(ncclInProgress);
  setResultFor("ncclCommWindowRegister", realAnswer);
  struct windowCall w = {.comm = c->real};
  pthread_t th;
  CHECK_EQ_INT(pthread_create(&th, NULL, registerWindow, &w), 0);
  for (int i = 0; i < 2000 && !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE); i++) {
    struct timespec pause = {0, 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  /* Before: the call waited for the real registration, which here never completes meanwhile
   * (ncclInProgress), or read the handle before NCCL wrote it (ncclSuccess). */
  CHECK_EQ_INT(__atomic_load_n(&w.done, __ATOMIC_ACQUIRE), 1);
  ncclResult_t state = ncclSuccess;
  if (__atomic_load_n(&w.done, __ATOMIC_ACQUIRE)) {
    CHECK_EQ_INT(w.res, realAnswer);
    CHECK_EQ_INT(ncclCommGetAsyncError(c->real, &state), ncclSuccess);
    CHECK_EQ_INT(state, ncclInProgress);
    CHECK_EQ_INT(symmCommJobState(c), ncclInProgress); /* our mapping waits in its job */
    /* A second registration meanwhile is refused, as NCCL refuses a call on a communicator
     * whose previous operation is in progress (it would map beside the job). */
    static float other[16];
    ncclWindow_t second = NULL;
    CHECK_EQ_INT(ncclCommWindowRegister(c->real, other, sizeof(other), &second,
                                        NCCL_WIN_COLL_SYMMETRIC),
                 ncclInvalidArgument);
  }
  setAsyncError(ncclSuccess); /* the real registration completes */
  for (int i = 0; i < 5000; i++) {
    CHECK_EQ_INT(ncclCommGetAsyncError(c->real, &state), ncclSuccess);
    if (state != ncclInProgress) break;
    struct timespec pause = {0, 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  CHECK_EQ_INT(state, ncclSuccess);
  CHECK_EQ_INT(pthread_join(th, NULL), 0);
  CHECK_EQ_INT(symmCommJobState(c), ncclSuccess);
  setResultFor(NULL, ncclSuccess);
  setAsyncError(FAKE_ASYNC_ERROR);
  symmCommRemove(c->real);
}

/* ---- the real NCCL's own calls from its own threads ------------------------------------------
 * NCCL's group job (a non-blocking communicator's window registration) calls ncclCommRegister
 * and ncclMemAlloc from a thread of its own, where symmRealDepth is 0: our entry points must
 * still see the real NCCL as the caller (its return address lies in its object) and forward. */
static __attribute__((noinline)) int calledByReal(void) {
  const int answer = SYMM_CALLED_BY_REAL();
  __asm__ volatile("" ::: "memory"); /* no tail call: the return address is this frame's */
  return answer;
}

static void testCalledByReal(void* fake, fakeNcclRunOnOwnThreadFn runOnOwnThread) {
  CHECK_EQ_INT(symmRealLoad(), ncclSuccess);
  const uintptr_t fakeFn = (uintptr_t)dlsym(fake, "ncclGetVersion");
  CHECK(symmRealLo <= fakeFn && fakeFn < symmRealHi);
  CHECK(!(symmRealLo <= (uintptr_t)&symmRealLoad && (uintptr_t)&symmRealLoad < symmRealHi));
  CHECK_EQ_INT(calledByReal(), 0);             /* the application */
  CHECK_EQ_INT(runOnOwnThread(calledByReal), 1); /* NCCL's own thread */
  int viaReal;
  symmRealDepth++; /* under SYMM_CALL_REAL on this thread */
  viaReal = calledByReal();
  symmRealDepth--;
  CHECK_EQ_INT(viaReal, 1);
}

int main(int argc, char** argv) {
  (void)symmLogLevel();
  void* fake = harnessUseFakeNccl(argc, argv, "test_fake_paths /path/fake/libnccl.so.2 [abort cycles]");
  if (fake == NULL) return harnessReport("core_fake_paths");
  *(void**)&callCount = dlsym(fake, "fakeNcclCallCount");
  *(void**)&callAt = dlsym(fake, "fakeNcclCall");
  *(void**)&setResult = dlsym(fake, "fakeNcclSetResult");
  *(void**)&setResultFor = dlsym(fake, "fakeNcclSetResultFor");
  *(void**)&setAsyncError = dlsym(fake, "fakeNcclSetAsyncError");
  *(void**)&deferChildren = dlsym(fake, "fakeNcclDeferChildren");
  fakeNcclRunOnOwnThreadFn runOnOwnThread;
  *(void**)&runOnOwnThread = dlsym(fake, "fakeNcclRunOnOwnThread");
  CHECK(runOnOwnThread != NULL);
  if (runOnOwnThread != NULL) testCalledByReal(fake, runOnOwnThread);
  CHECK(callCount != NULL && callAt != NULL && setResult != NULL && setResultFor != NULL &&
        setAsyncError != NULL && deferChildren != NULL);
  if (callCount == NULL || callAt == NULL || setResult == NULL || setResultFor == NULL ||
      setAsyncError == NULL || deferChildren == NULL)
    return harnessReport("core_fake_paths");
  symmCu.p_cuStreamGetCaptureInfo = captureByHandle;
  symmCu.p_cuStreamGetId = streamIdByHandle;
  testFailedComm();
  testArgumentErrors();
  testGroups();
  testGroupStreams();
  testJobOwnsRealComm();
  testParkedRace();
  testParkedOrder(500);
  for (int early = 0; early <= 1; early++)
    for (int shrink = 0; shrink <= 1; shrink++) testNonBlockingSplit(early, shrink);
  testSplitThenAbort();
  testBlockingSplit();
  testShrinkAbort();
  testAbortRace(argc > 2 ? atoi(argv[2]) : 1000);
  testBlockedLaunch();
  testStickyError();
  testNonBlockingInGroup();
  testNonBlockingWindow(ncclSuccess); /* NCCL 2.28 */
  testNonBlockingWindow(ncclInProgress);
  testDisabledRank();
  CHECK_EQ_INT(symmCommCount(), 0);
  return harnessReport("core_fake_paths");
}
