/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's shared state: worlds, communicators, operations and their descriptors. */
#ifndef SYMM_BOOT_H
#define SYMM_BOOT_H

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "nccl_api.h"

#define BOOT_MAX_RANKS 64

enum opKind { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE };
extern const char* const bootOpName[];

/* What every rank must agree on for one operation. */
struct opShape {
  enum opKind kind;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  int root;
};

/* One rank's part of an operation. */
struct rankArgs {
  const void* send;
  void* recv;
  cudaStream_t stream;
  int dev;
};

/* A descriptor's life: IDLE (free, or a graph's between replays), PENDING (eager, enqueued, its
 * stream has not reached it), POSTED (its stream waits for the runner), RELEASED (flag set to 1;
 * the stream goes on and writes 0 back). */
enum descState { DESC_IDLE, DESC_PENDING, DESC_POSTED, DESC_RELEASED };

/* One rank's stream-ordered operation: what its host function posts and its stream waits on. */
struct bootDesc {
  struct bootDesc* next;   /* in its owner's list, or on the zombie list */
  struct ncclComm* owner;  /* NULL once the communicator is gone */
  struct bootWorld* world; /* a reference: host functions may run after the communicator left */
  int rank, graph, refs;   /* refs: the owner and, for a graph's descriptor, the graph */
  int stage;               /* stream work enqueued: 1 host function, 2 + wait, 3 + reset */
  enum descState state;
  uint64_t seq; /* eager: the rank's call order */
  struct opShape shape;
  struct rankArgs args;
  uint32_t* flag; /* pinned, device-mapped (same address on the device) */
};

/* The k-th eager (or graph) operation of a world, from the first rank's part until it ran. */
struct bootOp {
  struct bootOp* next;
  struct bootWorld* world;
  int graph;
  uint64_t seq;
  struct opShape shape;
  int posted, finished; /* ranks that posted; count-0 callers that saw the result */
  int done;             /* count 0: every rank arrived */
  struct timespec deadline;
  struct bootDesc* parts[]; /* count > 0: each rank's posted descriptor */
};

struct bootWorld {
  ncclUniqueId id;
  int nranks, arrived, complete, refs;
  int running;        /* operations the runner is computing (buffers in use) */
  ncclResult_t error; /* the first runtime failure; ncclRemoteError after an abort */
  char errorText[256];
  struct ncclComm* ranks[BOOT_MAX_RANKS];
  uint64_t graphSeq[BOOT_MAX_RANKS]; /* graph replays' parts each rank posted */
  struct bootOp* ops;
  struct bootWorld* next;     /* registry chain while collecting ranks */
  struct bootWorld* liveNext; /* every world, for the runner */
};

struct ncclComm {
  struct bootWorld* world;
  int rank, nranks, dev;
  uint64_t nextSeq;          /* eager operations (count 0 too), in call order */
  struct bootDesc *eager, *graphs;
  struct ncclComm* retiredNext; /* aborted communicators are kept (bootstrap.c) */
};

/* One lock for everything (never held across a CUDA call: host functions take it). bootCond
 * wakes host threads waiting on worlds, operations and descriptors. */
extern pthread_mutex_t bootLock;
extern pthread_cond_t bootCond;
void bootCondInit(void); /* once, before any wait */

void bootWarn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
int bootWaitLimitSeconds(void); /* SYMM_BOOTSTRAP_TIMEOUT, default 300 */
struct timespec bootDeadline(void);

#define BOOT_CUDA(call, res, label)                                                          \
  do {                                                                                       \
    cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      bootWarn("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      (res) = ncclUnhandledCudaError;                                                        \
      goto label;                                                                            \
    }                                                                                        \
  } while (0)

/* runner.c. Functions named ...Locked expect bootLock held. */
void bootWorldLinkLocked(struct bootWorld* w);
void bootWorldUnrefLocked(struct bootWorld* w);
/* Fails the world once (err and the message, if any, are kept) and releases every waiting
 * stream of every rank. */
void bootWorldFailLocked(struct bootWorld* w, ncclResult_t err, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Pinned flag words for `ranks` more descriptors, allocated now (communicator creation) rather
 * than while streams wait on us. */
ncclResult_t bootFlagsReserve(int ranks);
/* count > 0: enqueues the operation on args->stream and returns. These and the count-0 calls
 * return ncclInvalidUsage for a communicator aborted meanwhile (its memory is kept). */
ncclResult_t bootEnqueue(struct ncclComm* comm, const struct opShape* shape,
                         const struct rankArgs* args);
/* count 0: a rendezvous on the host, no stream work: post, then wait (which drops the world
 * reference the post took: the communicator may be aborted meanwhile). */
ncclResult_t bootSyncPost(struct ncclComm* comm, const struct opShape* shape, struct bootOp** out);
ncclResult_t bootSyncWait(struct ncclComm* comm, struct bootOp* op);
/* SYMM_BOOTSTRAP_SYNC=1: after enqueueing, wait for the stream (not while it captures). */
int bootSyncMode(void);
ncclResult_t bootStreamWait(struct ncclComm* comm, cudaStream_t stream);
/* Waits until this rank's enqueued operations ran (or the world failed). */
void bootCommQuiesce(struct ncclComm* comm);
void bootCommDropLocked(struct ncclComm* comm);

#endif
