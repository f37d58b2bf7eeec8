/* SPDX-License-Identifier: Apache-2.0 */
/* The one decision per collective call (src/route.c): the real NCCL or ours, and how. A pure
 * function of what is known about the communicator and the call: the enqueue path gathers the
 * facts it asks for and carries the answer out; it decides nothing itself. */
#ifndef SYMMCOLL_ROUTE_H
#define SYMMCOLL_ROUTE_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "coll.h"
#include "comm.h"
#include "nccl_api.h"
#include "tuner.h"

/* One call as the entry points received it (NCCL's ncclInfo). `count` is NCCL's argument:
 * all-reduce count, all-gather sendcount, reduce-scatter recvcount. */
struct symmTask {
  enum symmColl coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op; /* all-gather: ncclSum (ignored) */
  int root;       /* -1: none */
  ncclComm_t comm;
  cudaStream_t stream;
};

/* What the route may ask the enqueue path to find out (or do) before it can decide; each names
 * a group of facts below. One request may name several, gathered in this order. */
enum symmRouteNeed {
  SYMM_NEED_COMM = 1u << 0,    /* look the communicator up (a reference), enter its device */
  SYMM_NEED_JOB = 1u << 1,     /* wait for its background setup job (then SETTLED again) */
  SYMM_NEED_SETTLED = 1u << 2, /* what setup agreed, and what waits on it now */
  SYMM_NEED_PARKED = 1u << 3,  /* run what waits behind a non-blocking group first */
  SYMM_NEED_LOCK = 1u << 4,    /* take its launchLock; what the lock guards */
  SYMM_NEED_HEALTH = 1u << 5,  /* its failure, kernels' error words included (under the lock) */
  SYMM_NEED_REPEAT = 1u << 6,  /* the route an identical recent call got (under the lock) */
  SYMM_NEED_WINDOW = 1u << 7,  /* the call's buffer in a symmetric window, the tuner's inputs */
  SYMM_NEED_CAPTURE = 1u << 8, /* whether the call's stream is capturing */
  /* Exchange the call's plain buffer with the peers for zero copy in its graph (collective:
   * every rank's route asks for the same calls; waits for the peers; under launchLock on
   * return, with the lock's facts read again) */
  SYMM_NEED_GRAPH_PEERS = 1u << 9,
  SYMM_NEED_GROUP_STREAM = 1u << 10, /* inside a group: the stream against the group's others */
  SYMM_NEED_POINTERS = 1u << 11, /* NCCL_CHECK_POINTERS: NCCL's pointer check of the buffers */
};

struct symmRoute;

/* Everything the route reads. `have`: the SYMM_NEED_* groups gathered so far; a group's fields
 * mean nothing before it. */
struct symmRouteFacts {
  unsigned have;
  /* Always known. */
  int passthrough; /* the real NCCL calls us back, or SYMMCOLL_DISABLE */
  int realMissing; /* no real NCCL, or it lacks this collective */
  int groupDepth;  /* ncclGroupStart nesting on this thread */
  int issuing;     /* a launch decided earlier, issued now (the outermost GroupEnd, after staging,
                      or parked behind a non-blocking group): only whether it still can run */
  /* SYMM_NEED_COMM */
  int known;              /* the communicator is in our table */
  ncclResult_t device;    /* making its device current */
  int gone;               /* destroy, finalize or abort began (an issued launch: read under the
                             lock, with SYMM_NEED_LOCK) */
  int jobRunning;         /* its non-blocking setup job runs (0 once waited for) */
  struct symmCommConfig config;
  int checkPointers;      /* NCCL_CHECK_POINTERS is on */
  /* SYMM_NEED_SETTLED (after the job) */
  int nranks, arch, link;
  const struct symmTuneFile* table;
  int parked;             /* operations wait behind a non-blocking group (0 once run) */
  ncclResult_t parkedResult; /* what running them returned */
  int hasTransport;       /* setup made it ours (read again after parked operations ran) */
  ncclResult_t failure;   /* its recorded failure (the same) */
  /* SYMM_NEED_LOCK */
  int stillOurs;          /* the transport is still attached (teardown may have detached it) */
  int peersLive;          /* staging built, not aborted or revoked: our kernels can run now */
  int needsStaging;       /* ours, staging not built yet */
  /* SYMM_NEED_HEALTH */
  ncclResult_t health;
  /* SYMM_NEED_REPEAT */
  const struct symmRoute* repeat; /* what an identical recent call got, or NULL */
  /* SYMM_NEED_WINDOW */
  int registered;         /* the in-place buffer lies in a symmetric window on every rank */
  int multicastReady;
  size_t stagingBytes;
  int graphPeersReady;    /* plain buffers of captured calls may be exchanged (agreed) */
  /* SYMM_NEED_CAPTURE */
  int captured;           /* the stream is capturing (or its state could not be read) */
  /* SYMM_NEED_GROUP_STREAM */
  ncclResult_t groupStream; /* symmGroupUseStream: the communicator's streams in the group all
                               uncaptured or all in one capture, this one included */
  /* SYMM_NEED_POINTERS */
  int pointersRefused;    /* NCCL's CudaPtrCheck would refuse sendbuff or recvbuff */
  /* SYMM_NEED_GRAPH_PEERS */
  int graphPeers;         /* every rank agreed: the peers' buffers are mapped (windowPeers) */
};

enum symmRouteKind {
  SYMM_ROUTE_NEED,          /* not decided yet: gather `need`, then ask again */
  SYMM_ROUTE_REFUSE,        /* return `result`; with failGroup also fail the real NCCL's group */
  SYMM_ROUTE_FORWARD,       /* the real NCCL runs it (`ordered` with our operations on it, or
                               `untouched`: as if we were not there) */
  SYMM_ROUTE_FORWARD_STAGE, /* forward it, then build staging in a background job (non-blocking
                               communicators, which must never wait for their peers here) */
  SYMM_ROUTE_STAGE_LAUNCH,  /* build staging (collective), then launch */
  SYMM_ROUTE_LAUNCH,        /* launch one of our algorithms */
};

enum symmRouteWhen {
  SYMM_WHEN_NOW,         /* under the launchLock hold that decided it */
  SYMM_WHEN_GROUP_END,   /* at the outermost ncclGroupEnd */
  SYMM_WHEN_ISSUE,       /* issued after the lock is released (which may still forward) */
};

enum symmRouteNote {
  SYMM_NOTE_NONE,
  SYMM_NOTE_CAPTURED_FIRST, /* INFO: the first call given to our kernels is captured */
  SYMM_NOTE_PARKED_BUSY,    /* WARN: a call before the previous operation returned ncclSuccess */
  SYMM_NOTE_NCCL_REFUSES,   /* WARN: arguments NCCL refuses (symmArgsProblem, or pointers) */
};

struct symmRoute {
  enum symmRouteKind kind;
  unsigned need;           /* NEED: SYMM_NEED_* bits */
  ncclResult_t result;     /* REFUSE */
  int failGroup;           /* REFUSE inside a group */
  int ordered, untouched;  /* FORWARD */
  int remember;            /* FORWARD, LAUNCH: the repeat cache keeps this route for the call */
  int repeated;            /* FORWARD, LAUNCH: the route an identical call got (facts->repeat) */
  int tuned;               /* the tuner chose (a TRACE line says what) */
  /* LAUNCH: NOW, GROUP_END or ISSUE. STAGE_LAUNCH: staging now and the launch issued after it,
   * or both at the group's end. FORWARD_STAGE: the staging job starts now (the call returns
   * ncclInProgress) or at the group's end. */
  enum symmRouteWhen when;
  enum symmRouteNote note;
  /* LAUNCH, STAGE_LAUNCH: what runs (struct symmLaunch's fields). FORWARD after the tuner: NCCL,
   * or NCCLPLAIN (the real NCCL is given windows' aliases, symmPlainBuffers); a first call given
   * to our kernels that is captured: the algorithm it will get. */
  enum symmAlgo algo;
  ncclRedOp_t op;
  int maxBlocks, minBlocks; /* grid bounds from the communicator's CTA config */
  int zeroCopy;             /* use the registered window in place (windowPeers) */
  int exchangeDescs;        /* ncclCommRegister descriptors are exchanged in the kernel */
  int emulateMultimem;
  int pdl;
};

/* The route of `task` given `facts`. Pure: the same facts and task give the same route (knobs
 * are read once per process; the tuner logs each distinct choice once). */
struct symmRoute symmRoute(const struct symmRouteFacts* facts, const struct symmTask* task);

/* Largest message (symmCollBytes) the route may give to a staged algorithm of ours on a
 * communicator with these facts (`comm`: nranks, multicastReady, arch, link, table; the rest
 * ignored) and CTA policy: what setup sizes staging by. SIZE_MAX when unbounded. */
size_t symmRouteLargestStaged(const struct symmTuneInput* comm, int ctaPolicy);

/* The route's rules that tests also check one by one. */

/* What symmArgsCheck leaves to the real NCCL. */
enum symmNcclDecides {
  SYMM_OURS_MAY_RUN = 0,
  SYMM_NCCL_RUNS = 1,    /* NCCL judges and runs it: user-defined ops, count 0, NULL buffers */
  SYMM_NCCL_REFUSES = 2, /* NCCL's own checks refuse it (invalid datatype, negative op, fp8
                            below sm_90): given to NCCL untouched, which returns its error,
                            fails its group and, on a non-blocking communicator, keeps the error
                            as the communicator's (ncclCommGetAsyncError), as without us */
};

/* What NCCL's own argument checks refuse in this call (invalid datatype, negative op, fp8
 * below sm_90 with `arch` known), in words for the log, or NULL. */
const char* symmArgsProblem(const struct symmTask* task, int arch);

/* NCCL's argument checks (ArgsCheck, taskAppend) before we launch. A count whose byte size
 * overflows -> ncclInvalidArgument (ours: NCCL does not check it); otherwise ncclSuccess with
 * *ncclDecides one of enum symmNcclDecides (fp8 below sm_90: `arch` known, not 0). */
ncclResult_t symmArgsCheck(const struct symmTask* task, int nranks, int arch, int* ncclDecides);

/* The `ncclplain` choice: `task` with each buffer that lies in a symmetric window with an alias
 * replaced by that alias (`lookup`: symmTransportWindowAlias's answer for [ptr, ptr+bytes), 1
 * and *alias, or 0), so that the real NCCL sees plain memory. A buffer inside the other one's
 * range (in place) moves with it or not at all: NCCL still sees the call in place. Returns how
 * many buffers moved (0: `out` is `task`). Sizes as NCCL's: the all-gather's output and the
 * reduce-scatter's input are nranks * count elements. */
typedef int (*symmAliasLookup)(const void* ctx, const void* ptr, size_t bytes, void** alias);
int symmPlainBuffers(const struct symmTask* task, int nranks, symmAliasLookup lookup,
                     const void* ctx, struct symmTask* out);

/* Grid bounds from the communicator's config, the same on all ranks: maxCTAs/minCTAs bound our
 * grids; NCCL_CTA_POLICY_EFFICIENCY asks for our fewest-block variants (SYMM_EFFICIENCY_BLOCKS at
 * most). */
#define SYMM_EFFICIENCY_BLOCKS 8
void symmGridBounds(const struct symmCommConfig* config, int* maxBlocks, int* minBlocks);
/* Whether the CTA policy lets `algo` run (NCCL_CTA_POLICY_ZERO: no SM kernel, only the
 * copy-engine all-gather). */
int symmPolicyAllows(int ctaPolicy, enum symmAlgo algo);

#endif
