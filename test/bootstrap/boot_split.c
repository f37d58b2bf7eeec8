/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's ncclCommSplit and ncclCommShrink: a rendezvous in the parent's sequence of
 * operations (a shrink's among the survivors), blocking or not. */
#include <stdlib.h>

#include "bootstrap.h"

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
