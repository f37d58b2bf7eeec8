/* SPDX-License-Identifier: Apache-2.0 */
/* The communicator side table: a small hash map keyed by the real ncclComm_t. */
#include "comm.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "checks.h"
#include "forward.h"

#define TABLE_BUCKETS 256

static pthread_rwlock_t tableLock = PTHREAD_RWLOCK_INITIALIZER;
static struct symmComm* buckets[TABLE_BUCKETS];
static int liveCount;

static unsigned bucketOf(ncclComm_t real) {
  uintptr_t v = (uintptr_t)real;
  v ^= v >> 17;
  v *= 0x9E3779B97F4A7C15ull;
  return (unsigned)(v >> 56) % TABLE_BUCKETS;
}

ncclResult_t symmCommAdd(ncclComm_t real, int blocking, struct symmComm** out) {
  if (real == NULL) return ncclInvalidArgument;
  struct symmComm* comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    WARN("out of host memory for a communicator entry");
    return ncclSystemError;
  }
  comm->real = real;
  comm->blocking = blocking;
  pthread_rwlock_init(&comm->transportLock, NULL);
  comm->rank = comm->nranks = comm->cudaDev = -1;
  unsigned b = bucketOf(real);
  pthread_rwlock_wrlock(&tableLock);
  /* A handle reused by the real NCCL after a destroy we did not see replaces the stale entry. */
  for (struct symmComm** it = &buckets[b]; *it; it = &(*it)->next) {
    if ((*it)->real == real) {
      struct symmComm* stale = *it;
      *it = stale->next;
      pthread_rwlock_destroy(&stale->transportLock);
      free(stale);
      liveCount--;
      break;
    }
  }
  comm->next = buckets[b];
  buckets[b] = comm;
  liveCount++;
  pthread_rwlock_unlock(&tableLock);
  if (out) *out = comm;
  return ncclSuccess;
}

struct symmComm* symmCommFind(ncclComm_t real) {
  if (real == NULL) return NULL;
  struct symmComm* found = NULL;
  pthread_rwlock_rdlock(&tableLock);
  for (struct symmComm* it = buckets[bucketOf(real)]; it; it = it->next) {
    if (it->real == real) {
      found = it;
      break;
    }
  }
  pthread_rwlock_unlock(&tableLock);
  return found;
}

void symmCommRemove(ncclComm_t real) {
  struct symmComm* victim = NULL;
  pthread_rwlock_wrlock(&tableLock);
  for (struct symmComm** it = &buckets[bucketOf(real)]; *it; it = &(*it)->next) {
    if ((*it)->real == real) {
      victim = *it;
      *it = victim->next;
      liveCount--;
      break;
    }
  }
  pthread_rwlock_unlock(&tableLock);
  if (victim != NULL) pthread_rwlock_destroy(&victim->transportLock);
  free(victim);
}

int symmCommCount(void) {
  pthread_rwlock_rdlock(&tableLock);
  int n = liveCount;
  pthread_rwlock_unlock(&tableLock);
  return n;
}

int symmConfigBlocking(const ncclConfig_t* config, int inherited) {
  const char* env = getenv("NCCL_COMM_BLOCKING");
  if (env != NULL && env[0] != '\0') {
    char* end = NULL;
    const long long v = strtoll(env, &end, 0);
    if (*end == '\0' && (v == 0 || v == 1)) return (int)v;
  }
  if (config == NULL) return inherited != 0;
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return 1;
  return config->blocking != 0;
}

ncclResult_t symmCommWaitIdle(const struct symmComm* comm, int64_t timeoutMs) {
  if (comm->blocking) return ncclSuccess;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    ncclResult_t state = ncclSuccess, res;
    SYMM_CALL_REAL(res, ncclCommGetAsyncError, (comm->real, &state));
    if (res != ncclSuccess) return res;
    if (state != ncclInProgress) return state;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) * 1e-6;
    if (ms > (double)timeoutMs) return ncclInProgress;
    sched_yield();
  }
}

ncclResult_t symmCommReadAttrs(struct symmComm* comm) {
  if (comm->attrsKnown) return ncclSuccess;
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommUserRank, (comm->real, &comm->rank));
  if (res != ncclSuccess) return res;
  SYMM_CALL_REAL(res, ncclCommCount, (comm->real, &comm->nranks));
  if (res != ncclSuccess) return res;
  SYMM_CALL_REAL(res, ncclCommCuDevice, (comm->real, &comm->cudaDev));
  if (res != ncclSuccess) return res;
  comm->attrsKnown = 1;
  INFO(SYMM_INIT, "comm %p rank %d/%d on cuda device %d", (void*)comm->real, comm->rank,
       comm->nranks, comm->cudaDev);
  return ncclSuccess;
}
