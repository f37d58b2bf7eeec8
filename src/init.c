/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator creation, setup and destruction: forward to the real NCCL, then keep our side
 * table entry and set up (blocking: now; non-blocking: in a background job). */
#include "init.h"

#include <stdlib.h>
#include <time.h>

#include "checks.h"
#include "comm.h"
#include "failure.h"
#include "forward.h"
#include "group.h"
#include "setup.h"
#include "transport.h"

/* ---- background jobs (non-blocking communicators) ----------------------------------------- */

enum jobKind { JOB_SETUP, JOB_STAGING, JOB_CHILD, JOB_WINDOW };

struct commJob {
  struct symmComm* comm; /* one reference, dropped when the job ends */
  enum jobKind kind;
  struct symmWindowReg window; /* JOB_WINDOW: its comm is the job's */
  ncclWindow_t handle;         /* JOB_WINDOW: NCCL's handle, read once it is written */
};

static int harvestChild(struct symmComm* parent);
static struct symmChildWait* takeChild(struct symmComm* parent);
static void publishChild(struct symmChildWait* w, int known);

static void* jobMain(void* arg) {
  struct commJob* job = arg;
  struct symmComm* comm = job->comm;
  if (job->kind == JOB_CHILD) {
    /* Left to the teardown of the parent if that began first (harvestChild returns 0). */
    if (harvestChild(comm)) publishChild(takeChild(comm), 1);
  } else if (job->kind == JOB_WINDOW) {
    /* The real registration is complete on every rank once it is on ours (a barrier): then
     * the mapping, collective too. Not when it failed or the communicator went: NCCL's peers
     * fail alike, or the teardown ends theirs. */
    if (symmCommWaitIdle(comm, -1) == ncclSuccess) {
      /* NCCL wrote the handle as it completed: read the user's variable once, now (it must live
       * until then for NCCL too), and map from the job's copy. */
      job->handle = *job->window.win;
      job->window.win = &job->handle;
      symmTransportWindowsRegistered(&job->window, 1);
    }
  } else if (symmCommWaitIdle(comm, -1) == ncclSuccess) {
    /* The real NCCL may still be creating the communicator or launching its last operation. */
    if (job->kind == JOB_STAGING) {
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

/* 1 when started, 0 when the job could not start, -1 when the communicator's teardown began (no
 * job: its real communicator may be gone already). */
static int startJob(struct symmComm* comm, enum jobKind kind, const struct symmWindowReg* window) {
  struct commJob* job = malloc(sizeof(*job));
  pthread_attr_t attr;
  if (job == NULL) return 0;
  *job = (struct commJob){.comm = comm, .kind = kind};
  if (window != NULL) job->window = *window;
  symmCommRetain(comm);
  /* A teardown raises `gone`, then waits while a job runs (both sequentially consistent): it
   * sees this job, or this sees `gone`. */
  __atomic_store_n(&comm->job, SYMM_JOB_RUNNING, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&comm->gone, __ATOMIC_SEQ_CST)) {
    __atomic_store_n(&comm->job, SYMM_JOB_DONE, __ATOMIC_RELEASE);
    symmCommRelease(comm);
    free(job);
    return -1;
  }
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int err = pthread_create(&comm->jobThread, &attr, jobMain, job);
  pthread_attr_destroy(&attr);
  if (err == 0) return 1;
  __atomic_store_n(&comm->job, SYMM_JOB_DONE, __ATOMIC_RELEASE);
  symmCommRelease(comm);
  free(job);
  return 0;
}

void symmCommStartJob(struct symmComm* comm, int staging) {
  const int started = startJob(comm, staging ? JOB_STAGING : JOB_SETUP, NULL);
  if (started < 0 && !staging) comm->setupDone = 1;
  if (started != 0) return;
  /* Every rank could fail to start it for different reasons: it is then the setup that stays
   * undone, which forwards without disagreement only if nobody starts; so say it loudly. */
  WARN("comm %p: cannot start the setup job of a non-blocking communicator", (void*)comm->real);
  if (!staging) comm->setupDone = 1;
}

int symmCommStartWindowJob(struct symmComm* comm, const struct symmWindowReg* reg) {
  if (symmCommJobState(comm) == ncclInProgress) return 0; /* one job at a time */
  struct symmWindowReg window = *reg;
  window.comm = comm;
  return startJob(comm, JOB_WINDOW, &window) > 0;
}

ncclResult_t symmCommJobState(const struct symmComm* comm) {
  return __atomic_load_n(&comm->job, __ATOMIC_SEQ_CST) == SYMM_JOB_RUNNING ? ncclInProgress
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
 * (non-blocking) in a background job. Our failures never fail the user's call.
 * Inside a group the real NCCL only queues the creation until the outermost ncclGroupEnd: until
 * then the communicator reports no error and rank 0 of 0 ranks, so a job started now would set
 * up from nothing, or not, as the race with the group's end goes on each rank. Both kinds wait
 * for that end (flushDeferred in group.c starts the non-blocking one's job there). */
static void commCreated(ncclResult_t res, ncclComm_t real, const struct symmCommConfig* config) {
  if ((res != ncclSuccess && res != ncclInProgress) || real == NULL) return;
  struct symmComm* comm = NULL;
  const int grouped = symmGroupDepth() > 0;
  const int job = config->blocking || grouped ? SYMM_JOB_NONE : SYMM_JOB_RUNNING;
  if (symmCommAddConfig(real, config, job, &comm) != ncclSuccess) return;
  if (grouped) {
    if (symmGroupDeferSetup(comm) != ncclSuccess) comm->setupDone = 1;
    return;
  }
  if (!config->blocking) {
    symmCommStartJob(comm, 0);
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
  SYMM_FORWARD_IF_CALLBACK(ncclCommInitRank, (comm, nranks, commId, rank), ncclSystemError);
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
  SYMM_FORWARD_IF_CALLBACK(ncclCommInitRankConfig, (comm, nranks, commId, rank, config),
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
  SYMM_FORWARD_IF_CALLBACK(ncclCommInitRankScalable,
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
  SYMM_FORWARD_IF_CALLBACK(ncclCommInitAll, (comms, ndev, devlist), ncclSystemError);
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

/* ---- split and shrink ---------------------------------------------------------------------- */

/* NCCL (2.28: ncclCommInitChildComm) sets *newcomm to NULL and stores the child only once its
 * creation has completed, from its own thread when the parent is non-blocking (the call then
 * returns ncclInProgress and the parent's ncclCommGetAsyncError says so until that thread is
 * done, child stored). Whether the child existed when the call returned is therefore a race,
 * different on every rank; so the rule is taken from what the call returned, which is the same
 * on every rank: outside a group, with a parent of ours, the real NCCL stores the child into a
 * slot of ours, and
 *  - ncclSuccess (blocking): the child is final; registered and set up now (blocking) or in its
 *    background job (non-blocking), then stored where the caller asked;
 *  - ncclInProgress, or ncclSuccess on a non-blocking parent (NCCL 2.28 returns that while its
 *    own thread still creates the child): a job of the parent waits until the real NCCL says the parent is no longer
 *    in progress (child stored or failed), registers the child (its setup job follows) and only
 *    then stores it for the caller; the parent's ncclCommGetAsyncError says ncclInProgress
 *    meanwhile, so the caller learns the split is done only after that;
 *  - an error: whatever the real NCCL left in the slot is passed on.
 * Inside a group the real NCCL stores the child at the group's end, which we do not track: it
 * forwards for its life (one INFO line), on every rank. */
struct symmChildWait {
  ncclComm_t slot;   /* where the real NCCL stores the child */
  ncclComm_t* user;  /* where the caller asked for it */
  struct symmCommConfig config;
};

/* Hands the child to the caller, registered first when `known` (its setup follows). */
static void publishChild(struct symmChildWait* w, int known) {
  if (w == NULL) return;
  const ncclComm_t child = __atomic_load_n(&w->slot, __ATOMIC_ACQUIRE);
  if (known) commCreated(ncclSuccess, child, &w->config);
  __atomic_store_n(w->user, child, __ATOMIC_RELEASE);
  free(w);
}

/* The parent's job: waits until the real NCCL is no longer creating the child. 0 when the
 * parent's teardown began first: the real abort or destroy completes the child (or gives up on
 * it), and the teardown passes it on unregistered after that (takeChild). */
static int harvestChild(struct symmComm* parent) {
  for (;;) {
    if (__atomic_load_n(&parent->gone, __ATOMIC_ACQUIRE)) return 0;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t res = symmCommRealState(parent, &state);
    if (res != ncclSuccess || state != ncclInProgress) return 1;
    struct timespec pause = {0, 50 * 1000};
    nanosleep(&pause, NULL);
  }
}

/* A teardown of the parent, after its job: the child still waiting for the caller, if any. */
static struct symmChildWait* takeChild(struct symmComm* parent) {
  return __atomic_exchange_n(&parent->pendingChild, NULL, __ATOMIC_ACQ_REL);
}

/* Before the real split or shrink: a slot of ours (NULL: the caller's pointer is used and the
 * child stays unknown). The parent's job must be over first: it uses the real parent. */
static struct symmChildWait* childBegin(struct symmComm* parent, ncclComm_t* newcomm,
                                        const struct symmCommConfig* config) {
  if (parent == NULL || newcomm == NULL) return NULL;
  symmCommWaitJob(parent);
  (void)symmGroupRunParked(parent); /* ours of the last group go before the real call */
  if (symmGroupDepth() > 0) {
    INFO(SYMM_INIT, "comm %p: a split or shrink inside a group stores its child at the group's "
         "end: that communicator forwards to the real NCCL", (void*)parent->real);
    return NULL;
  }
  struct symmChildWait* w = malloc(sizeof(*w));
  if (w == NULL) {
    WARN("out of host memory for a split or shrink; a non-blocking child of it forwards to the "
         "real NCCL");
    return NULL;
  }
  *w = (struct symmChildWait){.slot = *newcomm, .user = newcomm, .config = *config};
  return w;
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

/* After it: see the rules above. */
static void childEnd(struct symmComm* parent, struct symmChildWait* w, ncclResult_t res,
                     ncclComm_t* newcomm, const struct symmCommConfig* config) {
  if (w == NULL) {
    /* Only a final child: after ncclInProgress the caller's pointer is the real NCCL's race. */
    if (newcomm != NULL && res == ncclSuccess) commCreated(res, *newcomm, config);
    return;
  }
  /* NCCL 2.28's split and shrink return ncclSuccess on a non-blocking parent although the child
   * is created by its own thread and stored later (the group's ncclInProgress is not passed on):
   * a non-blocking parent's child is always waited for, on every rank alike. */
  const int later = res == ncclInProgress || (res == ncclSuccess && !parent->config.blocking);
  if (!later) {
    publishChild(w, res == ncclSuccess);
    return;
  }
  __atomic_store_n(newcomm, NULL, __ATOMIC_RELEASE);
  parent->pendingChild = w;
  if (startJob(parent, JOB_CHILD, NULL)) return;
  /* No thread: this call waits for the child itself (never leave the caller without it). */
  WARN("comm %p: cannot start the job of a non-blocking split or shrink; waiting for it here",
       (void*)parent->real);
  const int final = harvestChild(parent);
  publishChild(takeChild(parent), final);
}

SYMM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  SYMM_FORWARD_IF_CALLBACK(ncclCommSplit, (comm, color, key, newcomm, config), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  childConfig(comm, config, &ours);
  struct symmComm* parent = symmCommAcquire(comm);
  struct symmChildWait* w = childBegin(parent, newcomm, &ours);
  SYMM_CALL_REAL(res, ncclCommSplit, (comm, color, key, w != NULL ? &w->slot : newcomm, config));
  childEnd(parent, w, res, newcomm, &ours);
  symmCommRelease(parent);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommSplit,
                     (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  SYMM_FORWARD_IF_CALLBACK(ncclCommShrink,
                              (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
                              ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  struct symmCommConfig ours;
  childConfig(comm, config, &ours);
  struct symmComm* parent = symmCommAcquire(comm);
  const int aborting = parent != NULL && (shrinkFlags & NCCL_SHRINK_ABORT) != 0;
  if (aborting) stopForShrink(parent);
  struct symmChildWait* w = childBegin(parent, newcomm, &ours);
  SYMM_CALL_REAL(res, ncclCommShrink, (comm, excludeRanksList, excludeRanksCount,
                                       w != NULL ? &w->slot : newcomm, config, shrinkFlags));
  /* The real shrink ended the exchange a staging thread may have been blocked in (stopStaging);
   * should it still be blocked (no ncclCommRevoke, and the real NCCL's abort flag was up only
   * briefly), our memory waits for the parent's abort. */
  if (aborting && !__atomic_load_n(&parent->stagingBusy, __ATOMIC_ACQUIRE))
    symmTransportTeardown(parent, 1);
  childEnd(parent, w, res, newcomm, &ours);
  symmCommRelease(parent);
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
  /* Sequentially consistent: startJob's side of the handshake (see there). */
  if (!__atomic_compare_exchange_n(&comm->gone, &expected, 1, 0, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST)) {
    symmCommRelease(comm);
    return NULL;
  }
  return comm;
}

/* Our resources go first: we wait for our kernels, then the real NCCL tears its part down. */
/* A teardown another call began (finalize before destroy, say): the child it left, if any. */
static struct symmChildWait* leftChild(ncclComm_t real) {
  struct symmComm* c = symmCommAcquire(real);
  if (c == NULL) return NULL;
  symmCommWaitJob(c);
  struct symmChildWait* w = takeChild(c);
  symmCommRelease(c);
  return w;
}

SYMM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  struct symmChildWait* child = NULL;
  if (!SYMM_CALLED_BY_REAL()) {
    struct symmComm* ours = beginTeardown(comm);
    if (ours != NULL) {
      symmCommWaitJob(ours);
      child = takeChild(ours);
      symmGroupDropParked(ours);
      symmTransportTeardown(ours, 0);
      symmCommRemove(comm);
      symmCommRelease(ours);
    } else {
      child = leftChild(comm);
      symmCommRemove(comm); /* finalized before, or never ours */
    }
  }
  ncclResult_t res = ncclSystemError;
  if (symmRealLoad() == ncclSuccess && symmReal.ncclCommDestroy != NULL)
    res = symmReal.ncclCommDestroy(comm);
  /* The real NCCL finished (or gave up) the split it was running on the parent. */
  publishChild(child, 0);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

/* After finalize no collective may run: our memory goes now (the entry stays until destroy). */
SYMM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!SYMM_CALLED_BY_REAL()) {
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
  struct symmChildWait* child = NULL;
  if (!SYMM_CALLED_BY_REAL()) {
    ours = beginTeardown(comm);
    if (ours != NULL) {
      symmTransportSetAbort(ours);
      symmCommWaitJob(ours);
      stopStaging(ours);
      symmGroupDropParked(ours);
    } else {
      child = leftChild(comm);
      symmCommRemove(comm);
    }
  }
  if (ours != NULL) child = takeChild(ours);
  ncclResult_t res = ncclSystemError;
  if (symmRealLoad() == ncclSuccess && symmReal.ncclCommAbort != NULL) res = symmReal.ncclCommAbort(comm);
  publishChild(child, 0); /* the real abort ended the split it was running on the parent */
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
  if (!SYMM_CALLED_BY_REAL()) {
    struct symmComm* ours = symmCommAcquire(comm);
    symmTransportSetAbort(ours);
    symmCommRelease(ours);
  }
  SYMM_FORWARD(ncclCommRevoke, (comm, revokeFlags), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

/* The real NCCL's answer combined with ours: our failure (a kernel's error, a peer's failure
 * word, a launch we could not make), our setup job or operations still waiting behind a
 * non-blocking group (ncclInProgress).
 * While our job runs it is the real communicator's only user, so the answer is ncclInProgress
 * without asking the real NCCL: its ncclCommGetAsyncError completes a finished non-blocking
 * operation (ncclGroupJobComplete) unlocked, and the job polls it too (symmCommWaitIdle); two
 * threads seeing the same finished operation both drop its reference, and the second frees it
 * under the first (NCCL 2.28.9, src/init.cc and src/group.cc). */
SYMM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  /* Only this thread's depth, not the caller's address: NCCL's own readiness checks
   * (ncclCommEnsureReady, reached from calls forwarded as they are and from NCCL's threads)
   * must see our job as in progress, and poll the real state under pollLock as the job does. */
  if (symmRealDepth > 0 || symmRealLoad() != ncclSuccess || symmReal.ncclCommGetAsyncError == NULL)
    SYMM_FORWARD(ncclCommGetAsyncError, (comm, asyncError), ncclSystemError);
  struct symmComm* ours = asyncError != NULL ? symmCommAcquire(comm) : NULL;
  if (ours != NULL && symmCommJobState(ours) == ncclInProgress) {
    *asyncError = symmFailureCombine(ncclInProgress, symmCommPollHealth(ours));
    symmCommRelease(ours);
    return ncclSuccess;
  }
  ncclResult_t res;
  if (ours != NULL) {
    res = symmCommRealState(ours, asyncError);
  } else {
    SYMM_CALL_REAL(res, ncclCommGetAsyncError, (comm, asyncError));
  }
  if (res != ncclSuccess || ours == NULL) {
    symmCommRelease(ours);
    return res;
  }
  ncclResult_t mine = symmCommJobState(ours);
  if (mine == ncclSuccess && *asyncError != ncclInProgress) {
    mine = symmGroupRunParked(ours);
    /* What it ran may have started our staging job: in progress until that ends (a call of the
     * application's meanwhile would meet the job; ncclCommWindowRegister refuses it). */
    if (mine == ncclSuccess) mine = symmCommJobState(ours);
  }
  const ncclResult_t health = symmCommPollHealth(ours);
  if (health != ncclSuccess) mine = health;
  *asyncError = symmFailureCombine(*asyncError, mine);
  symmCommRelease(ours);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
