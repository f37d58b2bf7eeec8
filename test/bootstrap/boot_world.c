/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's worlds: errors, the registry where ranks of one unique id meet, leaving a
 * world (abort fails the others), and the rendezvous of communicator creation. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "condvar.h"

/* --- errors ----------------------------------------------------------------------------------- */

__thread char lastError[256];

void bootWarn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof(lastError), fmt, ap);
  va_end(ap);
  fprintf(stderr, "nccl-bootstrap: %s\n", lastError);
}

int waitLimitSeconds(void) {
  const char* s = getenv("SYMM_BOOTSTRAP_TIMEOUT");
  int v = s ? atoi(s) : 0;
  return v > 0 ? v : 300;
}

/* --- worlds, communicators, operations ---------------------------------------------------------- */

const char* const opKindName[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
                                  "Split"};

pthread_mutex_t bootLock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t bootCond;
static pthread_once_t condOnce = PTHREAD_ONCE_INIT;
static struct bootWorld* collecting;

static void condInit(void) { symmCondInitMonotonic(&bootCond); }

struct timespec deadlineFromNow(void) {
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
void worldLeave(struct ncclComm* comm, int abort) {
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

ncclResult_t initPost(struct ncclComm* comm, int nranks, const ncclUniqueId* id, int rank) {
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

ncclResult_t initWait(struct ncclComm* comm) {
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
