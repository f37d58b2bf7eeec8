/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test of the host path against the recording fake NCCL (test/abi/fake_nccl.c): a failed
 * communicator refuses every call without reaching NCCL, refused calls inside a group fail the
 * real group, deferred operations are dropped when the group does not launch, a non-blocking
 * communicator's setup job is the only caller of the real NCCL while it runs, an abort from
 * another thread during a stream of calls neither crashes nor leaks (run it under ASan), and a
 * rank with SYMMCOLL_DISABLE=1 still takes part in every communicator's setup. */
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
#include "debug.h"
#include "failure.h"
#include "fake_nccl.h"
#include "forward.h"
#include "group.h"
#include "harness.h"
#include "nccl_api.h"
#include "param.h"

static fakeNcclCallCountFn callCount;
static fakeNcclCallFn callAt;
static fakeNcclSetResultFn setResult;

static struct symmComm* known(uintptr_t id) {
  struct symmComm* c = NULL;
  CHECK_EQ_INT(symmCommAdd((ncclComm_t)id, 1, &c), ncclSuccess);
  if (c == NULL) return NULL;
  c->rank = 0;
  c->nranks = 2;
  c->cudaDev = 0;
  c->attrsKnown = c->setupDone = 1;
  return c;
}

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
  const int before = callCount();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, h, NULL), ncclInvalidArgument);
  CHECK_EQ_INT(ncclReduceScatter(buf, buf, SIZE_MAX / 2, ncclFloat32, ncclSum, h, NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, (ncclDataType_t)-3, h, NULL), ncclInvalidArgument);
  CHECK_EQ_INT(callCount(), before);
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
};
static ncclResult_t probeRun(void* arg, int launch) {
  struct probe* p = arg;
  p->runs++;
  p->launched += launch;
  return ncclSuccess;
}

static void testGroups(void) {
  float buf[4] = {0};
  struct symmComm* c = known(0x300000);
  if (c == NULL) return;
  struct probe ours = {0}, marker = {0}, unreg = {0};

  /* The group launches: everything runs. */
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, probeRun, &ours), ncclSuccess);
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
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_UNREGISTER, 0, probeRun, &unreg), ncclSuccess);
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

  /* The real ncclGroupEnd fails: our launch is dropped and its communicator fails (its peers'
   * kernels would wait for ours); deregistrations and ordering marks still run. */
  memset(&ours, 0, sizeof(ours));
  memset(&unreg, 0, sizeof(unreg));
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_LAUNCH, 0, probeRun, &ours), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_FORWARDED, 0, probeRun, &marker), ncclSuccess);
  CHECK_EQ_INT(symmGroupDeferOp(c, SYMM_DEFERRED_UNREGISTER, 0, probeRun, &unreg), ncclSuccess);
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

/* ---- a non-blocking communicator while our setup job runs ---------------------------------- */

/* The job is the real communicator's only user: ncclCommGetAsyncError says ncclInProgress without
 * asking the real NCCL (whose own completes finished operations unlocked: two pollers free them
 * twice), and asks it again once the job is done. */
static void testJobOwnsRealComm(void) {
  struct symmCommConfig config = {.blocking = 0, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  struct symmComm* c = NULL;
  const ncclComm_t h = (ncclComm_t)(uintptr_t)0x400000;
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

int main(int argc, char** argv) {
  (void)symmLogLevel();
  if (argc < 2) {
    fprintf(stderr, "usage: test_fake_paths /path/fake/libnccl.so.2 [abort cycles]\n");
    return 2;
  }
  setenv("SYMMCOLL_NCCL_LIB", argv[1], 1);
  void* fake = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(fake != NULL);
  if (fake == NULL) return harnessReport("core_fake_paths");
  *(void**)&callCount = dlsym(fake, "fakeNcclCallCount");
  *(void**)&callAt = dlsym(fake, "fakeNcclCall");
  *(void**)&setResult = dlsym(fake, "fakeNcclSetResult");
  CHECK(callCount != NULL && callAt != NULL && setResult != NULL);
  if (callCount == NULL || callAt == NULL || setResult == NULL) return harnessReport("core_fake_paths");
  testFailedComm();
  testArgumentErrors();
  testGroups();
  testJobOwnsRealComm();
  testAbortRace(argc > 2 ? atoi(argv[2]) : 1000);
  testDisabledRank();
  CHECK_EQ_INT(symmCommCount(), 0);
  return harnessReport("core_fake_paths");
}
