/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap without a GPU: rendezvous, groups, argument checks, timeouts, abort,
 * split and shrink. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <nccl.h>

#include "harness.h"

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
int symmTestBootstrapIsFake(void);

#define MAX_WORLD 8

struct threadArg {
  int rank, nranks;
  ncclUniqueId id;
  ncclComm_t comm;
  ncclResult_t initRes, opRes, mismatchRes;
  int count, userRank;
};

static void* rankThread(void* p) {
  struct threadArg* a = p;
  a->initRes = ncclCommInitRank(&a->comm, a->nranks, a->id, a->rank);
  if (a->initRes != ncclSuccess) return NULL;
  ncclCommCount(a->comm, &a->count);
  ncclCommUserRank(a->comm, &a->userRank);
  /* Count 0 touches no device memory: the rendezvous alone is exercised. */
  a->opRes = ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, a->comm, NULL);
  /* Rank 0 disagrees on the datatype: every rank must get ncclInvalidUsage. */
  a->mismatchRes = ncclAllGather(NULL, NULL, 0, a->rank == 0 ? ncclInt32 : ncclFloat32, a->comm, NULL);
  return NULL;
}

static void threadedWorld(int nranks) {
  struct threadArg args[MAX_WORLD];
  pthread_t tids[MAX_WORLD];
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    memset(&args[r], 0, sizeof(args[r]));
    args[r].rank = r;
    args[r].nranks = nranks;
    args[r].id = id;
    CHECK_EQ_INT(pthread_create(&tids[r], NULL, rankThread, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) {
    pthread_join(tids[r], NULL);
    CHECK_EQ_INT(args[r].initRes, ncclSuccess);
    CHECK_EQ_INT(args[r].count, nranks);
    CHECK_EQ_INT(args[r].userRank, r);
    CHECK_EQ_INT(args[r].opRes, ncclSuccess);
    CHECK_EQ_INT(args[r].mismatchRes, nranks > 1 ? ncclInvalidUsage : ncclSuccess);
    if (args[r].comm) CHECK_EQ_INT(ncclCommDestroy(args[r].comm), ncclSuccess);
  }
}

/* One thread creates and drives every rank through groups (ncclCommInitAll, -g style). */
static void groupedWorld(int nranks) {
  ncclComm_t comms[MAX_WORLD] = {0};
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < nranks; r++) CHECK_EQ_INT(ncclCommInitRank(&comms[r], nranks, id, r), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < nranks; r++)
    CHECK_EQ_INT(ncclBroadcast(NULL, NULL, 0, ncclInt8, 1 % nranks, comms[r], NULL), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    int rank = -1;
    CHECK_EQ_INT(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    CHECK_EQ_INT(rank, r);
    CHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
  }
  ncclComm_t all[MAX_WORLD] = {0};
  CHECK_EQ_INT(ncclCommInitAll(all, nranks, NULL), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    int count = 0, rank = -1;
    CHECK(all[r] != NULL);
    if (all[r] == NULL) continue;
    CHECK_EQ_INT(ncclCommCount(all[r], &count), ncclSuccess);
    CHECK_EQ_INT(ncclCommUserRank(all[r], &rank), ncclSuccess);
    CHECK_EQ_INT(count, nranks);
    CHECK_EQ_INT(rank, r);
  }
  for (int r = 0; r < nranks; r++)
    if (all[r]) CHECK_EQ_INT(ncclCommDestroy(all[r]), ncclSuccess);
}

static void* lonelyWaiter(void* p) {
  struct threadArg* a = p;
  a->opRes = ncclAllReduce(NULL, NULL, 0, ncclInt32, ncclSum, a->comm, NULL);
  return NULL;
}

/* ---- split (blocking and not) and shrink ------------------------------------------------- */
struct splitArg {
  int rank, nranks, blocking;
  ncclUniqueId id;
  pthread_barrier_t* barrier;
  ncclResult_t splitRes, state, childOp;
  ncclComm_t child;
  int childRank, childCount;
};

/* After a split or shrink on `parent`: waits until the parent is no longer in progress (*state),
 * then takes the child it left in *slot, if any, and asks it its rank and size and runs a first
 * collective on it. Returns the child. */
static ncclComm_t awaitChild(ncclComm_t parent, ncclComm_t* slot, ncclResult_t* state, int* rank,
                             int* count, ncclResult_t* op) {
  *state = ncclInProgress;
  while (*state == ncclInProgress) {
    CHECK_EQ_INT(ncclCommGetAsyncError(parent, state), ncclSuccess);
    if (*state == ncclInProgress) usleep(100);
  }
  ncclComm_t child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (child != NULL) {
    CHECK_EQ_INT(ncclCommUserRank(child, rank), ncclSuccess);
    CHECK_EQ_INT(ncclCommCount(child, count), ncclSuccess);
    *op = ncclAllReduce(NULL, NULL, 0, ncclInt32, ncclSum, child, NULL);
  }
  return child;
}

/* Odd and even ranks apart, in reverse order; rank 0 takes no part (NCCL_SPLIT_NOCOLOR). */
static void* splitThread(void* p) {
  struct splitArg* a = p;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = a->blocking;
  ncclComm_t parent = NULL;
  CHECK_EQ_INT(ncclCommInitRankConfig(&parent, a->nranks, a->id, a->rank, &config), ncclSuccess);
  if (parent == NULL) return NULL;
  const int color = a->rank == 0 ? NCCL_SPLIT_NOCOLOR : a->rank % 2;
  a->splitRes = ncclCommSplit(parent, color, -a->rank, &a->child, NULL);
  ncclComm_t child = awaitChild(parent, &a->child, &a->state, &a->childRank, &a->childCount, &a->childOp);
  pthread_barrier_wait(a->barrier);
  if (child != NULL) CHECK_EQ_INT(ncclCommDestroy(child), ncclSuccess);
  CHECK_EQ_INT(ncclCommDestroy(parent), ncclSuccess);
  return NULL;
}

static void splitWorld(int nranks, int blocking) {
  struct splitArg args[MAX_WORLD];
  pthread_t tids[MAX_WORLD];
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)nranks);
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct splitArg){.rank = r, .nranks = nranks, .blocking = blocking, .id = id,
                                .barrier = &barrier};
    CHECK_EQ_INT(pthread_create(&tids[r], NULL, splitThread, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(tids[r], NULL);
  pthread_barrier_destroy(&barrier);
  for (int r = 0; r < nranks; r++) {
    CHECK_EQ_INT(args[r].splitRes, blocking ? ncclSuccess : ncclInProgress);
    CHECK_EQ_INT(args[r].state, ncclSuccess);
    if (r == 0) {
      CHECK(args[r].child == NULL);
      continue;
    }
    /* Members of color r % 2 other than rank 0, by descending parent rank. */
    int count = 0, above = 0;
    for (int q = 1; q < nranks; q++) {
      count += q % 2 == r % 2;
      above += q % 2 == r % 2 && q > r;
    }
    CHECK(args[r].child != NULL);
    CHECK_EQ_INT(args[r].childCount, count);
    CHECK_EQ_INT(args[r].childRank, above);
    CHECK_EQ_INT(args[r].childOp, ncclSuccess);
  }
}

/* Rank n-1 never takes part again: the others shrink it away and use the child; then it aborts
 * its parent. */
struct shrinkArg {
  int rank, nranks;
  ncclComm_t parent, child;
  pthread_barrier_t* barrier;
  ncclResult_t res, state, childOp;
  int childRank, childCount;
};

static void* shrinkThread(void* p) {
  struct shrinkArg* a = p;
  const int gone = a->nranks - 1;
  if (a->rank != gone) {
    int exclude[1] = {gone};
    a->res = ncclCommShrink(a->parent, exclude, 1, &a->child, NULL, NCCL_SHRINK_ABORT);
    (void)awaitChild(a->parent, &a->child, &a->state, &a->childRank, &a->childCount, &a->childOp);
  }
  pthread_barrier_wait(a->barrier);
  if (a->child != NULL) CHECK_EQ_INT(ncclCommDestroy(a->child), ncclSuccess);
  CHECK_EQ_INT(ncclCommAbort(a->parent), ncclSuccess);
  return NULL;
}

static void shrinkWorld(int nranks) {
  struct shrinkArg args[MAX_WORLD];
  pthread_t tids[MAX_WORLD];
  ncclComm_t comms[MAX_WORLD] = {0};
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)nranks);
  CHECK_EQ_INT(ncclCommInitAll(comms, nranks, NULL), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct shrinkArg){.rank = r, .nranks = nranks, .parent = comms[r],
                                 .barrier = &barrier};
    CHECK_EQ_INT(pthread_create(&tids[r], NULL, shrinkThread, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(tids[r], NULL);
  pthread_barrier_destroy(&barrier);
  for (int r = 0; r < nranks - 1; r++) {
    CHECK_EQ_INT(args[r].res, ncclSuccess);
    CHECK_EQ_INT(args[r].state, ncclSuccess);
    CHECK_EQ_INT(args[r].childCount, nranks - 1);
    CHECK_EQ_INT(args[r].childRank, r);
    CHECK_EQ_INT(args[r].childOp, ncclSuccess);
  }
}

/* Abort from another thread while the rank's own thread waits in a collective: the waiter
 * returns ncclRemoteError and the rank is freed only after it left. */
static void* abortedWaiter(void* p) {
  ncclComm_t comm = p;
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclInt32, ncclSum, comm, NULL), ncclRemoteError);
  return NULL;
}

static void abortOwnWaiter(void) {
  ncclComm_t comms[2] = {0};
  CHECK_EQ_INT(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
  pthread_t tid;
  CHECK_EQ_INT(pthread_create(&tid, NULL, abortedWaiter, comms[0]), 0);
  usleep(100 * 1000);
  CHECK_EQ_INT(ncclCommAbort(comms[0]), ncclSuccess);
  pthread_join(tid, NULL);
  CHECK_EQ_INT(ncclCommAbort(comms[1]), ncclSuccess);
}

/* Run with SYMM_BOOTSTRAP_DISCARD_EMPTY=1 (the second meson test): an empty collective is
 * checked and dropped at once, as NCCL drops it, so a rank whose peer never calls returns. */
static int discardEmptyMode(void) {
  ncclComm_t comms[2] = {0};
  CHECK_EQ_INT(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comms[0], NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllGather(NULL, NULL, 0, ncclInt32, comms[1], NULL), ncclSuccess);
  CHECK_EQ_INT(ncclReduceScatter(NULL, NULL, 0, ncclInt8, ncclMax, comms[0], NULL), ncclSuccess);
  /* Its arguments are still checked. */
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, (ncclDataType_t)99, ncclSum, comms[0], NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclInt32, (ncclRedOp_t)77, comms[1], NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument);
  for (int r = 0; r < 2; r++) CHECK_EQ_INT(ncclCommDestroy(comms[r]), ncclSuccess);
  return harnessReport("bootstrap_cpu (empty calls discarded)");
}

int main(void) {
  const char* discard = getenv("SYMM_BOOTSTRAP_DISCARD_EMPTY");
  if (discard != NULL && atoi(discard) != 0) {
    /* Without the knob this first call would wait for rank 1 until the timeout. */
    setenv("SYMM_BOOTSTRAP_TIMEOUT", "2", 1);
    return discardEmptyMode();
  }
  int version = 0;
  CHECK_EQ_INT(ncclGetVersion(&version), ncclSuccess);
  CHECK_EQ_INT(version, NCCL_VERSION_CODE);
  CHECK_EQ_INT(symmTestBootstrapIsFake(), 1);
  CHECK(ncclGetErrorString(ncclInvalidUsage) != NULL);

  ncclUniqueId a, b;
  CHECK_EQ_INT(ncclGetUniqueId(&a), ncclSuccess);
  CHECK_EQ_INT(ncclGetUniqueId(&b), ncclSuccess);
  CHECK(memcmp(&a, &b, sizeof(a)) != 0);

  for (int n = 1; n <= MAX_WORLD; n++) threadedWorld(n);
  for (int n = 1; n <= MAX_WORLD; n++) groupedWorld(n);
  for (int n = 1; n <= MAX_WORLD; n++) {
    splitWorld(n, 1);
    splitWorld(n, 0);
  }
  for (int n = 2; n <= MAX_WORLD; n++) shrinkWorld(n);
  abortOwnWaiter();

  /* Argument checks and unsupported entry points. */
  ncclComm_t comms[2] = {0};
  CHECK_EQ_INT(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, (ncclDataType_t)99, ncclSum, comms[0], NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclInt32, (ncclRedOp_t)77, comms[0], NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclBroadcast(NULL, NULL, 0, ncclInt32, 2, comms[0], NULL), ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(NULL, NULL, 0, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument);
  CHECK_EQ_INT(ncclSend(NULL, 0, ncclInt32, 1, comms[0], NULL), ncclInvalidUsage);
  CHECK_EQ_INT(ncclGroupEnd(), ncclInvalidUsage);
  ncclComm_t bad = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&bad, 2, a, 2), ncclInvalidArgument);
  CHECK(bad == NULL);
  void* handle = NULL;
  CHECK_EQ_INT(ncclCommRegister(comms[0], NULL, 0, &handle), ncclSuccess);
  CHECK(handle != NULL);
  CHECK_EQ_INT(ncclCommDeregister(comms[0], handle), ncclSuccess);

  /* Abort wakes a rank that waits for its peer, with ncclRemoteError. */
  struct threadArg waiter = {.comm = comms[0]};
  pthread_t tid;
  CHECK_EQ_INT(pthread_create(&tid, NULL, lonelyWaiter, &waiter), 0);
  usleep(100 * 1000);
  CHECK_EQ_INT(ncclCommAbort(comms[1]), ncclSuccess);
  pthread_join(tid, NULL);
  CHECK_EQ_INT(waiter.opRes, ncclRemoteError);
  ncclResult_t async = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  CHECK_EQ_INT(async, ncclRemoteError);
  CHECK_EQ_INT(ncclCommDestroy(comms[0]), ncclSuccess);

  /* A rank whose peers never come gives up after SYMM_BOOTSTRAP_TIMEOUT seconds. */
  setenv("SYMM_BOOTSTRAP_TIMEOUT", "1", 1);
  ncclComm_t alone = NULL;
  CHECK_EQ_INT(ncclCommInitRank(&alone, 2, b, 0), ncclSystemError);
  CHECK(alone == NULL);
  return harnessReport("bootstrap_cpu");
}
