/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator creation, setup and destruction: forward to the real NCCL, then keep our side
 * table entry and set up (blocking: now; non-blocking: in a background job). */
#include "init.h"

#include <stdlib.h>
#include <time.h>

#include "algos.h"
#include "checks.h"
#include "comm.h"
#include "failure.h"
#include "forward.h"
#include "group.h"
#include "transport.h"

ncclResult_t symmCommSetupMany(struct symmComm** comms, int n) {
  for (int i = 0; i < n; i++) {
    ncclResult_t res = symmCommReadAttrs(comms[i]);
    if (res != ncclSuccess) {
      /* Not ready or failed: leave it forwarding; never fail the user's init. */
      INFO(SYMM_INIT, "comm %p: libsymmcoll kernels inactive: attributes unavailable (%d)",
           (void*)comms[i]->real, (int)res);
      for (int k = 0; k < n; k++) comms[k]->setupDone = 1;
      return ncclSuccess;
    }
  }
  /* Before any of our kernels can spin (see symmAlgosLoadKernels); a rank whose kernels do
   * not load says so in its setup record, and the communicator forwards on every rank. */
  for (int i = 0; i < n; i++)
    comms[i]->kernelsLoaded = symmAlgosLoadKernels(comms[i]->cudaDev) == ncclSuccess;
  ncclResult_t res = symmTransportSetup(comms, n);
  for (int i = 0; i < n; i++) comms[i]->setupDone = 1;
  return res;
}

/* ---- background jobs (non-blocking communicators) ----------------------------------------- */

struct commJob {
  struct symmComm* comm; /* one reference, dropped when the job ends */
  int staging;
};

static void* jobMain(void* arg) {
  struct commJob* job = arg;
  struct symmComm* comm = job->comm;
  /* The real NCCL may still be creating the communicator or launching its last operation. */
  if (symmCommWaitIdle(comm, -1) == ncclSuccess) {
    if (job->staging) {
      if (symmTransportNeedsStaging(comm)) (void)symmTransportStage(&comm, 1);
    } else {
      (void)symmCommSetupMany(&comm, 1);
    }
  } else {
    comm->setupDone = 1;
    INFO(SYMM_INIT, "comm %p: libsymmcoll kernels inactive: the real NCCL did not finish "
         "creating it", (void*)comm->real);
  }
  __atomic_store_n(&comm->job, SYMM_JOB_DONE, __ATOMIC_RELEASE);
  symmCommRelease(comm);
  free(job);
  return NULL;
}

void symmCommStartJob(struct symmComm* comm, int staging) {
  struct commJob* job = malloc(sizeof(*job));
  pthread_attr_t attr;
  if (job == NULL) goto fail;
  *job = (struct commJob){.comm = comm, .staging = staging};
  symmCommRetain(comm);
  __atomic_store_n(&comm->job, SYMM_JOB_RUNNING, __ATOMIC_RELEASE);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int err = pthread_create(&comm->jobThread, &attr, jobMain, job);
  pthread_attr_destroy(&attr);
  if (err == 0) return;
  __atomic_store_n(&comm->job, SYMM_JOB_DONE, __ATOMIC_RELEASE);
  symmCommRelease(comm);
  free(job);
fail:
  /* Every rank could fail to start it for different reasons: it is then the setup that stays
   * undone, which forwards without disagreement only if nobody starts; so say it loudly. */
  WARN("comm %p: cannot start the setup job of a non-blocking communicator", (void*)comm->real);
  if (!staging) comm->setupDone = 1;
}

ncclResult_t symmCommJobState(const struct symmComm* comm) {
  return __atomic_load_n(&comm->job, __ATOMIC_ACQUIRE) == SYMM_JOB_RUNNING ? ncclInProgress
                                                                           : ncclSuccess;
}

void symmCommWaitJob(struct symmComm* comm) {
  while (symmCommJobState(comm) == ncclInProgress) {
    struct timespec pause = {0, 100 * 1000};
    nanosleep(&pause, NULL);
  }
}

/* ---- creation ----------------------------------------------------------------------------- */

/* Records a communicator the real NCCL returned; sets it up now, at the outermost GroupEnd, or
 * (non-blocking) in a background job. Our failures never fail the user's call. */
static void commCreated(ncclResult_t res, ncclComm_t real, const struct symmCommConfig* config) {
  if ((res != ncclSuccess && res != ncclInProgress) || real == NULL) return;
  struct symmComm* comm = NULL;
  const int job = config->blocking ? SYMM_JOB_NONE : SYMM_JOB_RUNNING;
  if (symmCommAddConfig(real, config, job, &comm) != ncclSuccess) return;
  if (!config->blocking) {
    symmCommStartJob(comm, 0);
    return;
  }
  if (symmGroupDepth() > 0) {
    if (symmGroupDeferSetup(comm) != ncclSuccess) comm->setupDone = 1;
    return;
  }
  if (res == ncclSuccess) (void)symmCommSetupMany(&comm, 1);
}

/* The parent's config, which a split or shrink without one inherits. */
static void childConfig(ncclComm_t parent, const ncclConfig_t* config, struct symmCommConfig* out) {
  struct symmComm* p = symmCommAcquire(parent);
  struct symmCommConfig inherited = {.blocking = 1, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  if (p != NULL) inherited = p->config;
  symmConfigRead(config, &inherited, out);
  symmCommRelease(p);
}

#define LOAD_OR_FAIL()                                          \
  do {                                                          \
    if (symmRealLoad() != ncclSuccess) return ncclSystemError;  \
  } while (0)

SYMM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                          int rank) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRank, (comm, nranks, commId, rank), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig config;
  symmConfigRead(NULL, NULL, &config);
  SYMM_CALL_REAL(res, ncclCommInitRank, (comm, nranks, commId, rank));
  if (comm != NULL) commCreated(res, *comm, &config);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRank,
                     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))

SYMM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                int rank, ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRankConfig, (comm, nranks, commId, rank, config),
                              ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  symmConfigRead(config, NULL, &ours);
  SYMM_CALL_REAL(res, ncclCommInitRankConfig, (comm, nranks, commId, rank, config));
  if (comm != NULL) commCreated(res, *comm, &ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankConfig,
                     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                      ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId* commIds,
                                                  ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRankScalable,
                              (newcomm, nranks, myrank, nId, commIds, config), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  symmConfigRead(config, NULL, &ours);
  SYMM_CALL_REAL(res, ncclCommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
  if (newcomm != NULL) commCreated(res, *newcomm, &ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                     (ncclComm_t * newcomm, int nranks, int myrank, int nId,
                      ncclUniqueId* commIds, ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitAll, (comms, ndev, devlist), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommInitAll, (comms, ndev, devlist));
  if (res != ncclSuccess || comms == NULL || ndev <= 0) return res;
  /* One thread owns every rank: set them up together, as one deferred group. */
  struct symmComm** entries = calloc((size_t)ndev, sizeof(*entries));
  if (entries == NULL) return res;
  struct symmCommConfig config;
  symmConfigRead(NULL, NULL, &config);
  int n = 0;
  for (int i = 0; i < ndev; i++)
    if (comms[i] != NULL && symmCommAddConfig(comms[i], &config, SYMM_JOB_NONE, &entries[n]) == ncclSuccess)
      n++;
  if (symmGroupDepth() > 0) {
    for (int i = 0; i < n; i++) (void)symmGroupDeferSetup(entries[i]);
  } else if (n == ndev) {
    (void)symmCommSetupMany(entries, n);
  }
  free(entries);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

/* A non-blocking split or shrink may store the child's handle only after the call returned (the
 * real NCCL's own thread stores it): such a child is unknown to us and forwards for its life. */
static void childCreated(ncclResult_t res, ncclComm_t* newcomm, const struct symmCommConfig* config) {
  if (newcomm == NULL) return;
  ncclComm_t child = __atomic_load_n(newcomm, __ATOMIC_ACQUIRE);
  if (child == NULL && res == ncclInProgress)
    INFO(SYMM_INIT, "a non-blocking split or shrink returned before its child existed: that "
         "communicator forwards to the real NCCL");
  commCreated(res, child, config);
}

static void stopStaging(struct symmComm* ours);

/* NCCL_SHRINK_ABORT ("terminate ongoing parent operations"): ours on the parent stop as on an
 * abort before the real shrink: the abort flag goes up (our kernels exit), setup work stops,
 * parked operations are dropped; after it our memory on the parent goes (its teardown also
 * releases copy-engine waits). From then on every call on the parent forwards to the real NCCL,
 * on every rank that shrank, whether or not a kernel of ours was in flight there (a kernel that
 * stopped for the abort flag is no failure, see symmCommHealth). */
static void stopForShrink(struct symmComm* parent) {
  symmTransportSetAbort(parent);
  symmCommWaitJob(parent);
  stopStaging(parent);
  symmGroupDropParked(parent);
}

SYMM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommSplit, (comm, color, key, newcomm, config), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  childConfig(comm, config, &ours);
  SYMM_CALL_REAL(res, ncclCommSplit, (comm, color, key, newcomm, config));
  childCreated(res, newcomm, &ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommSplit,
                     (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommShrink,
                              (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
                              ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  childConfig(comm, config, &ours);
  struct symmComm* parent = (shrinkFlags & NCCL_SHRINK_ABORT) ? symmCommAcquire(comm) : NULL;
  if (parent != NULL) stopForShrink(parent);
  SYMM_CALL_REAL(res, ncclCommShrink,
                 (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  /* The real shrink ended the exchange a staging thread may have been blocked in (stopStaging);
   * should it still be blocked (no ncclCommRevoke, and the real NCCL's abort flag was up only
   * briefly), our memory waits for the parent's abort. */
  if (parent != NULL && !__atomic_load_n(&parent->stagingBusy, __ATOMIC_ACQUIRE))
    symmTransportTeardown(parent, 1);
  symmCommRelease(parent);
  childCreated(res, newcomm, &ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommShrink,
                     (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags))

/* ---- destruction -------------------------------------------------------------------------- */

/* The first teardown of an entry wins (`gone`); it holds a reference until done. NULL: not ours,
 * or another thread is tearing it down. */
static struct symmComm* beginTeardown(ncclComm_t real) {
  struct symmComm* comm = symmCommAcquire(real);
  if (comm == NULL) return NULL;
  int expected = 0;
  if (!__atomic_compare_exchange_n(&comm->gone, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    symmCommRelease(comm);
    return NULL;
  }
  return comm;
}

/* Our resources go first: we wait for our kernels, then the real NCCL tears its part down. */
SYMM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (symmRealDepth == 0) {
    struct symmComm* ours = beginTeardown(comm);
    if (ours != NULL) {
      symmCommWaitJob(ours);
      symmGroupDropParked(ours);
      symmTransportTeardown(ours, 0);
      symmCommRemove(comm);
      symmCommRelease(ours);
    } else {
      symmCommRemove(comm); /* finalized before, or never ours */
    }
  }
  SYMM_FORWARD(ncclCommDestroy, (comm), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

/* After finalize no collective may run: our memory goes now (the entry stays until destroy). */
SYMM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (symmRealDepth == 0) {
    struct symmComm* ours = beginTeardown(comm);
    if (ours != NULL) {
      symmCommWaitJob(ours);
      symmGroupDropParked(ours);
      symmTransportTeardown(ours, 0);
      symmCommRelease(ours);
    }
  }
  SYMM_FORWARD(ncclCommFinalize, (comm), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

/* Stops a thread that builds staging on `ours` (the caller raised our abort flag: its own waits
 * end within 20 ms and it enters no real call any more). It may be blocked inside the real
 * NCCL, in a setup exchange, waiting for peers that will never call (the real NCCL connects to
 * its peers on the host at a first collective; the test bootstrap's collectives wait for every
 * rank). With ncclCommRevoke (NCCL 2.28 and later) the real communicator is revoked, which ends
 * that wait with an error, and we wait until the thread is done. Without it, we wait until the
 * thread is done or inside the real NCCL: the caller's next step, the real abort (or shrink
 * with NCCL_SHRINK_ABORT), raises the real NCCL's abort flag, which ends that call as it ends an
 * application thread's own call blocked in NCCL; the caller waits for the thread after it
 * (symmTransportTeardown). Nothing here depends on time: every rank's staging fails alike. */
static void stopStaging(struct symmComm* ours) {
  int revokeTried = 0;
  while (__atomic_load_n(&ours->stagingBusy, __ATOMIC_ACQUIRE)) {
    if (__atomic_load_n(&ours->inRealExchange, __ATOMIC_SEQ_CST) > 0) {
      if (symmRealLoad() != ncclSuccess || symmReal.ncclCommRevoke == NULL) {
        INFO(SYMM_INIT, "comm %p: aborted while building staging; the real NCCL has no "
             "ncclCommRevoke, so its abort ends the exchange", (void*)ours->real);
        return;
      }
      if (!revokeTried) {
        ncclResult_t res = ncclSuccess;
        SYMM_CALL_REAL(res, ncclCommRevoke, (ours->real, NCCL_REVOKE_DEFAULT));
        INFO(SYMM_INIT, "comm %p: aborted while building staging; real communicator revoked (%d)",
             (void*)ours->real, (int)res);
        revokeTried = 1;
      }
    }
    struct timespec pause = {0, 100 * 1000};
    nanosleep(&pause, NULL);
  }
}

/* From any thread, also while another one is inside a call on the communicator (PyTorch's
 * watchdog): the abort flag goes up first so that our kernels exit, our setup work stops at its
 * next wait (or is ended by the real abort, see stopStaging), the real NCCL aborts (its kernels
 * exit too), then our memory goes once our work has drained (teardown waits at most 2 s, the
 * releaser thread the rest). Calls in flight hold their own reference on the entry. */
SYMM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  struct symmComm* ours = NULL;
  if (symmRealDepth == 0) {
    ours = beginTeardown(comm);
    if (ours != NULL) {
      symmTransportSetAbort(ours);
      symmCommWaitJob(ours);
      stopStaging(ours);
      symmGroupDropParked(ours);
    } else {
      symmCommRemove(comm);
    }
  }
  ncclResult_t res = ncclSystemError;
  if (symmRealLoad() == ncclSuccess && symmReal.ncclCommAbort != NULL) res = symmReal.ncclCommAbort(comm);
  if (ours != NULL) {
    symmTransportTeardown(ours, 1);
    symmCommRemove(comm);
    symmCommRelease(ours);
  }
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

/* Revoke stops our spinning kernels too; later calls go to the real NCCL, which refuses them
 * (the communicator stays until destroy/abort). */
SYMM_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (symmRealDepth == 0) {
    struct symmComm* ours = symmCommAcquire(comm);
    symmTransportSetAbort(ours);
    symmCommRelease(ours);
  }
  SYMM_FORWARD(ncclCommRevoke, (comm, revokeFlags), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

/* The real NCCL's answer combined with ours: our failure (a kernel's error, a peer's failure
 * word, a launch we could not make), our setup job or operations still waiting behind a
 * non-blocking group (ncclInProgress). */
SYMM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommGetAsyncError, (comm, asyncError), ncclSystemError);
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommGetAsyncError, (comm, asyncError));
  if (res != ncclSuccess || asyncError == NULL) return res;
  struct symmComm* ours = symmCommAcquire(comm);
  if (ours == NULL) return res;
  ncclResult_t mine = symmCommJobState(ours);
  if (mine == ncclSuccess && *asyncError != ncclInProgress) mine = symmGroupRunParked(ours);
  const ncclResult_t health = symmCommPollHealth(ours);
  if (health != ncclSuccess) mine = health;
  *asyncError = symmFailureCombine(*asyncError, mine);
  symmCommRelease(ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
