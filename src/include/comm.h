/* SPDX-License-Identifier: Apache-2.0 */
/* Our per-communicator state, in a thread-safe side table keyed by the real NCCL handle. */
#ifndef SYMMCOLL_COMM_H
#define SYMMCOLL_COMM_H

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "nccl_api.h"

struct symmTransport; /* src/transport: peer memory, signals, abort flag */
struct symmTuneFile;  /* src/tuner: the tuning table a communicator uses */

/* What ncclConfig_t (and NCCL's own environment overrides) fixed at creation, as the real NCCL
 * reads it; identical on every rank given the same configs and environment. */
struct symmCommConfig {
  int blocking;
  int maxCTAs, minCTAs; /* 0: not set */
  int ctaPolicy;        /* NCCL_CTA_POLICY_* */
};

/* Cross-stream order of every operation on the communicator (src/core/order.c). Touched only under
 * the communicator's launchLock. */
struct symmCaptureState; /* src/core/order.c: one capture that ran operations of this comm */
struct symmOrder {
  cudaEvent_t event;               /* recorded after every eager operation and every replay */
  unsigned long long lastStreamId; /* cudaStreamGetId of the latest eager operation's stream */
  int issued;                      /* an eager operation was issued */
  int everCaptured;                /* eager operations then wait on `event` every time */
  int created;                     /* `event` exists */
  cudaEvent_t joinEvent;           /* joins a group's streams (symmOrderJoinStreams) */
  int joinCreated;                 /* `joinEvent` exists */
  int noMixing;                    /* NCCL_GRAPH_MIXING_SUPPORT=0: graphs add no event nodes */
  struct symmCaptureState* captures; /* captures seen, newest first; pruned as graphs go */
};

/* A failed communicator: SYMM_ERR_* bits and the error every later call returns. */
struct symmFailure {
  int result;    /* ncclResult_t; ncclSuccess while healthy (atomic) */
  uint32_t bits; /* SYMM_ERR_* reasons seen, or-ed (atomic) */
};

/* Where a non-blocking communicator's setup job stands (symmComm.job). */
enum symmJobState { SYMM_JOB_NONE = 0, SYMM_JOB_RUNNING = 1, SYMM_JOB_DONE = 2 };

struct symmDeferredList; /* src/group.c: our operations parked behind a non-blocking group */
struct symmChildWait;    /* src/init.c: a split's child the real NCCL is still creating */
struct symmRepeats;      /* src/enqueue.c: recent routes of ours, to repeat */

struct symmComm {
  ncclComm_t real; /* the handle the application holds */
  int rank, nranks, cudaDev;
  struct symmCommConfig config;
  int arch;          /* comm-wide compute capability * 10, 0 if ranks differ (agreed at setup) */
  int link;          /* enum symmLink, agreed at setup */
  const struct symmTuneFile* tuneTable; /* agreed at setup (NULL: the built-in table) */
  int attrsKnown;    /* rank/nranks/cudaDev read from the real NCCL */
  int setupDone;     /* creation setup attempted (successfully or not) */
  int kernelsLoaded; /* our kernels are loaded in this device's context */
  /* References: one held by the table while the entry is listed, one by every call in flight
   * (symmCommAcquire). The entry is freed when the last one goes (atomic). */
  int refs;
  int gone;                   /* destroy/finalize/abort started: no new work of ours (atomic) */
  struct symmFailure failure; /* our error, communicator-wide (src/failure.c) */
  int job;                    /* enum symmJobState (atomic) */
  pthread_t jobThread;
  int stagingBusy;            /* a thread is building staging (atomic) */
  /* ncclCommAbort, ncclCommRevoke or a shrink with NCCL_SHRINK_ABORT began: setup waits stop
   * and no setup exchange enters the real NCCL any more (atomic). */
  int aborting;
  int inRealExchange;         /* setup exchanges of ours inside the real NCCL now (atomic) */
  /* Serialises our launches, the order state and the transport pointer against teardown; held
   * only for host work that never waits on peers itself (but a CUDA launch under it can block
   * while the launch queue is full: see transportLock). */
  pthread_mutex_t launchLock;
  /* Also guards the transport pointer, taken inside launchLock by whoever changes it, and alone
   * by the two readers that must never wait behind a launch: ncclCommAbort's flag and the health
   * poll of ncclCommGetAsyncError. A launch can block for as long as our kernels in flight wait
   * for a dead peer (a full launch queue), and only the abort flag ends those kernels. Never
   * held across a CUDA call. */
  pthread_mutex_t transportLock;
  struct symmOrder order;
  uint64_t launches;                 /* launches of ours issued (tests read it) */
  uint64_t zeroCopyLaunches;         /* of those, on registered windows in place (tests) */
  uint64_t replays;                  /* of those, an identical call's launch issued again (tests) */
  uint64_t plainForwards;            /* calls forwarded with windows' aliases (ncclplain; tests) */
  struct symmTransport* transport;   /* non-NULL when eligible and set up */
  struct symmRepeats* repeats;       /* NULL until the first launch of ours (launchLock) */
  /* The child of a non-blocking split or shrink of this parent, handed to the caller by the
   * parent's job (src/init.c); touched by that job, or by a teardown after waiting for it. */
  struct symmChildWait* pendingChild;
  /* Non-blocking: ours behind NCCL's group launch. Changed under parkLock, which is also held
   * while they run, and cleared only once they ran: a thread that sees it NULL (atomic) may
   * issue, one that sees a list waits on parkLock. Taken before launchLock, never after. */
  struct symmDeferredList* parked;
  pthread_mutex_t parkLock;
  pthread_mutex_t pollLock;          /* symmCommRealState */
  struct symmComm* next;             /* hash chain, guarded by the table lock */
};

/* Registers a communicator that the real NCCL just created (or is creating, non-blocking); the
 * table holds one reference. `job` is its symmJobState as it becomes visible. *out is borrowed
 * (valid while the table lists it). */
ncclResult_t symmCommAddConfig(ncclComm_t real, const struct symmCommConfig* config, int job,
                               struct symmComm** out);
/* The same with the default config of a blocking or non-blocking communicator (tests). */
ncclResult_t symmCommAdd(ncclComm_t real, int blocking, struct symmComm** out);
/* The listed entry for `real` with one more reference, or NULL (unknown, or going away).
 * Every entry point that uses an entry holds one until it returns. */
struct symmComm* symmCommAcquire(ncclComm_t real);
void symmCommRetain(struct symmComm* comm);
/* Drops a reference; the last one frees the entry (its transport must be detached). */
void symmCommRelease(struct symmComm* comm);
/* The listed entry for `real` without a reference (tests, and callers that own the handle's
 * lifetime), or NULL. */
struct symmComm* symmCommFind(ncclComm_t real);
/* Unlinks the entry and drops the table's reference (after its transport was torn down). */
void symmCommRemove(ncclComm_t real);
/* Number of listed entries (tests). */
int symmCommCount(void);

/* A non-blocking communicator may still be launching its last operation (ncclInProgress):
 * polls the real NCCL until that is done, at most timeoutMs (< 0: no limit). ncclSuccess when
 * idle (at once for blocking communicators); ncclInProgress on timeout; ncclInvalidUsage once
 * the communicator is going away or aborting; else its error. */
ncclResult_t symmCommWaitIdle(struct symmComm* comm, int64_t timeoutMs);

/* The real NCCL's ncclCommGetAsyncError, one thread at a time per communicator (our jobs, parked
 * operations and the application's watchdog all poll it): NCCL 2.28 completes and frees a
 * non-blocking communicator's group job in that call, and two threads there at once can both do
 * it. pollLock is taken last, around that call only. */
ncclResult_t symmCommRealState(struct symmComm* comm, ncclResult_t* state);

/* Whether the real NCCL will make this communicator blocking, decided as NCCL does: the
 * NCCL_COMM_BLOCKING environment variable (0 or 1) wins, then config->blocking, then
 * `inherited` when there is no config (a split's parent; 1 for new communicators), else 1. */
int symmConfigBlocking(const ncclConfig_t* config, int inherited);

/* An NCCL_* integer from the environment as NCCL 2.28 reads its parameters (strtoll, base 0,
 * what follows the number ignored), or NCCL_CONFIG_UNDEF_INT when unset or out of range. */
int symmNcclEnvInt(const char* name);

/* The whole config as NCCL reads it: fields of versions the caller's struct has, NCCL_MAX_CTAS,
 * NCCL_MIN_CTAS and NCCL_CTA_POLICY from the environment, NCCL's clamps. `parent` (or NULL) is
 * inherited when `config` is NULL (ncclCommSplit/Shrink). */
void symmConfigRead(const ncclConfig_t* config, const struct symmCommConfig* parent,
                    struct symmCommConfig* out);

/* Reads rank/size/device from the real NCCL once the communicator is ready. */
ncclResult_t symmCommReadAttrs(struct symmComm* comm);

#endif
