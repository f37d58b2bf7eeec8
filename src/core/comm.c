/* SPDX-License-Identifier: Apache-2.0 */
/* The communicator side table: a small hash map keyed by the real ncclComm_t, with reference
 * counted entries so that an abort on one thread never frees an entry another thread uses. */
#include "comm.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "checks.h"
#include "forward.h"
#include "order.h"
#include "param.h"

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

static void freeEntry(struct symmComm* comm) {
  free(comm->repeats);
  symmOrderDestroy(&comm->order);
  pthread_mutex_destroy(&comm->launchLock);
  pthread_mutex_destroy(&comm->transportLock);
  pthread_mutex_destroy(&comm->parkLock);
  pthread_mutex_destroy(&comm->pollLock);
  free(comm);
}

ncclResult_t symmCommAdd(ncclComm_t real, int blocking, struct symmComm** out) {
  struct symmCommConfig config = {.blocking = blocking != 0, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  return symmCommAddConfig(real, &config, SYMM_JOB_NONE, out);
}

ncclResult_t symmCommAddConfig(ncclComm_t real, const struct symmCommConfig* config, int job,
                               struct symmComm** out) {
  if (real == NULL || config == NULL) return ncclInvalidArgument;
  struct symmComm* comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    WARN("out of host memory for a communicator entry");
    return ncclSystemError;
  }
  comm->real = real;
  comm->config = *config;
  comm->refs = 1; /* the table's */
  comm->job = job;
  pthread_mutex_init(&comm->launchLock, NULL);
  pthread_mutex_init(&comm->transportLock, NULL);
  pthread_mutex_init(&comm->parkLock, NULL);
  pthread_mutex_init(&comm->pollLock, NULL);
  comm->rank = comm->nranks = comm->cudaDev = -1;
  comm->order.noMixing = symmOrderMixingOff(); /* fixed at creation, as NCCL reads it */
  unsigned b = bucketOf(real);
  struct symmComm* stale = NULL;
  pthread_rwlock_wrlock(&tableLock);
  /* A handle reused by the real NCCL after a destroy we did not see replaces the stale entry. */
  for (struct symmComm** it = &buckets[b]; *it; it = &(*it)->next) {
    if ((*it)->real == real) {
      stale = *it;
      *it = stale->next;
      liveCount--;
      break;
    }
  }
  comm->next = buckets[b];
  buckets[b] = comm;
  liveCount++;
  pthread_rwlock_unlock(&tableLock);
  if (stale != NULL) {
    /* Its transport stays with it (leaked rather than freed under a kernel we cannot see). */
    __atomic_store_n(&stale->gone, 1, __ATOMIC_RELEASE);
    WARN("communicator handle %p reused by the real NCCL while we still listed it", (void*)real);
    symmCommRelease(stale);
  }
  if (out) *out = comm;
  return ncclSuccess;
}

/* The entry of `real`, or NULL; with `retain`, a reference for the caller. */
static struct symmComm* lookup(ncclComm_t real, int retain) {
  if (real == NULL) return NULL;
  struct symmComm* found = NULL;
  pthread_rwlock_rdlock(&tableLock);
  for (struct symmComm* it = buckets[bucketOf(real)]; it; it = it->next) {
    if (it->real == real) {
      /* The table's reference keeps it alive until we hold our own. */
      if (retain) __atomic_add_fetch(&it->refs, 1, __ATOMIC_ACQ_REL);
      found = it;
      break;
    }
  }
  pthread_rwlock_unlock(&tableLock);
  return found;
}

struct symmComm* symmCommAcquire(ncclComm_t real) { return lookup(real, 1); }

void symmCommRetain(struct symmComm* comm) { __atomic_add_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL); }

void symmCommRelease(struct symmComm* comm) {
  if (comm == NULL) return;
  if (__atomic_sub_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL) == 0) freeEntry(comm);
}

struct symmComm* symmCommFind(ncclComm_t real) { return lookup(real, 0); }

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
  if (victim != NULL) {
    __atomic_store_n(&victim->gone, 1, __ATOMIC_RELEASE);
    symmCommRelease(victim);
  }
}

int symmCommCount(void) {
  pthread_rwlock_rdlock(&tableLock);
  int n = liveCount;
  pthread_rwlock_unlock(&tableLock);
  return n;
}

/* An NCCL_* integer from the environment, or NCCL_CONFIG_UNDEF_INT, read as NCCL 2.28 reads its
 * parameters (NCCL_PARAM): strtoll in base 0 with what follows the number ignored ("0 " is 0), a
 * range error keeps the default, and the 64-bit value is stored into an int. Ours must be the
 * value the real NCCL uses. */
int symmNcclEnvInt(const char* name) {
  return (int)symmNcclParam(name, NCCL_CONFIG_UNDEF_INT);
}

int symmConfigBlocking(const ncclConfig_t* config, int inherited) {
  const int env = symmNcclEnvInt("NCCL_COMM_BLOCKING");
  if (env == 0 || env == 1) return env;
  if (config == NULL) return inherited != 0;
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return 1;
  return config->blocking != 0;
}

/* NCCL's channel limit, which it clamps minCTAs/maxCTAs to. */
#define SYMM_NCCL_MAXCHANNELS 64

void symmConfigRead(const ncclConfig_t* config, const struct symmCommConfig* parent,
                    struct symmCommConfig* out) {
  int maxCTAs = NCCL_CONFIG_UNDEF_INT, minCTAs = NCCL_CONFIG_UNDEF_INT;
  int policy = NCCL_CONFIG_UNDEF_INT;
  if (config == NULL && parent != NULL) {
    maxCTAs = parent->maxCTAs > 0 ? parent->maxCTAs : NCCL_CONFIG_UNDEF_INT;
    minCTAs = parent->minCTAs > 0 ? parent->minCTAs : NCCL_CONFIG_UNDEF_INT;
    policy = parent->ctaPolicy;
  } else if (config != NULL && config->magic == 0xcafebeef) {
    /* Fields a caller's older struct does not have keep NCCL's defaults, as NCCL reads them. */
    if (config->version >= NCCL_VERSION(2, 17, 0)) {
      maxCTAs = config->maxCTAs;
      minCTAs = config->minCTAs;
    }
    if (config->version >= NCCL_VERSION(2, 27, 0)) policy = config->CTAPolicy;
  }
  out->blocking = symmConfigBlocking(config, parent != NULL ? parent->blocking : 1);
  /* The environment wins over the config, as in NCCL's parseCommConfig. */
  const int envMax = symmNcclEnvInt("NCCL_MAX_CTAS"), envMin = symmNcclEnvInt("NCCL_MIN_CTAS");
  const int envPolicy = symmNcclEnvInt("NCCL_CTA_POLICY");
  if (envMax != NCCL_CONFIG_UNDEF_INT && envMax > 0) maxCTAs = envMax;
  if (envMin != NCCL_CONFIG_UNDEF_INT && envMin > 0) minCTAs = envMin;
  if (envPolicy != NCCL_CONFIG_UNDEF_INT) policy = envPolicy;
  if (maxCTAs != NCCL_CONFIG_UNDEF_INT && maxCTAs > SYMM_NCCL_MAXCHANNELS) maxCTAs = SYMM_NCCL_MAXCHANNELS;
  if (minCTAs != NCCL_CONFIG_UNDEF_INT && minCTAs > SYMM_NCCL_MAXCHANNELS) minCTAs = SYMM_NCCL_MAXCHANNELS;
  out->maxCTAs = maxCTAs > 0 ? maxCTAs : 0;
  out->minCTAs = minCTAs > 0 ? minCTAs : 0;
  if (out->maxCTAs > 0 && out->minCTAs > out->maxCTAs) out->minCTAs = out->maxCTAs;
  if (policy < NCCL_CTA_POLICY_DEFAULT || policy > NCCL_CTA_POLICY_ZERO) policy = NCCL_CTA_POLICY_DEFAULT;
  out->ctaPolicy = policy;
}

ncclResult_t symmCommRealState(struct symmComm* comm, ncclResult_t* state) {
  ncclResult_t res;
  pthread_mutex_lock(&comm->pollLock);
  SYMM_CALL_REAL(res, ncclCommGetAsyncError, (comm->real, state));
  pthread_mutex_unlock(&comm->pollLock);
  return res;
}

ncclResult_t symmCommWaitIdle(struct symmComm* comm, int64_t timeoutMs) {
  if (comm->config.blocking) return ncclSuccess;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t res = symmCommRealState(comm, &state);
    if (res != ncclSuccess) return res;
    if (state != ncclInProgress) return state;
    if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE))
      return ncclInvalidUsage;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) * 1e-6;
    if (timeoutMs >= 0 && ms > (double)timeoutMs) return ncclInProgress;
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
