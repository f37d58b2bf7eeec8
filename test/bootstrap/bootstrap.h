/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap's insides, shared by its files: worlds (boot_world.c), operations and
 * groups (boot_ops.c), splits and shrinks (boot_split.c), entry points (bootstrap.c). */
#ifndef SYMM_BOOTSTRAP_H
#define SYMM_BOOTSTRAP_H

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "nccl_api.h"

#define BOOT_MAX_RANKS 64

/* ---- errors (boot_world.c) -------------------------------------------------------------------- */

extern __thread char lastError[256];
void bootWarn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define BOOT_CUDA(call, res, label)                                                         \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess) {                                                              \
      bootWarn("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      (res) = ncclUnhandledCudaError;                                                       \
      goto label;                                                                           \
    }                                                                                       \
  } while (0)

/* Seconds a rank waits for its peers before giving up (a test that forgot a rank must not hang). */
int waitLimitSeconds(void);

/* ---- worlds, communicators, operations (boot_world.c) ------------------------------------------ */

enum opKind { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE, OP_SPLIT };
extern const char* const opKindName[];

struct rankArgs {
  const void* send;
  void* recv;
  cudaStream_t stream;
  int dev;
  int posted;                /* this rank posted (shrinks: the survivors) */
  int color, key, blocking;  /* OP_SPLIT: where this rank goes, and its child's mode */
};

struct bootOp {
  uint64_t seq;
  enum opKind kind;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  int root;
  int expected;         /* ranks that take part: all, or a shrink's survivors */
  int posted, finished; /* ranks that posted / that saw the result */
  struct bootOp** list; /* the world's list it is on */
  int state;            /* 0 collecting, 1 running, 2 done */
  ncclResult_t result;
  struct bootOp* next;
  struct rankArgs args[];
};

struct bootWorld {
  ncclUniqueId id;
  int nranks, arrived, complete, aborted, refs;
  int running; /* operations being run outside the lock (their ranks' buffers and streams in use) */
  struct ncclComm* ranks[BOOT_MAX_RANKS];
  struct bootOp* ops;
  struct bootOp* shrinks; /* shrink rendezvous: only the survivors post, in their own order */
  struct bootWorld* next; /* registry chain while collecting ranks */
};

struct ncclComm {
  struct bootWorld* world;
  int rank, nranks, dev;
  uint64_t nextSeq, shrinkSeq;
  int inCalls; /* operations of this rank posted and not finished (bootLock) */
  int blocking;               /* config.blocking (splits and shrinks inherit it) */
  ncclResult_t asyncResult;   /* ncclInProgress while a non-blocking split or shrink runs */
  struct ncclComm* child;     /* this rank's communicator from its latest split or shrink */
};

/* One lock and one condition for everything: simple, and the bootstrap is not about speed. */
extern pthread_mutex_t bootLock;
extern pthread_cond_t bootCond;

struct timespec deadlineFromNow(void);
void worldLeave(struct ncclComm* comm, int abort);
ncclResult_t initPost(struct ncclComm* comm, int nranks, const ncclUniqueId* id, int rank);
ncclResult_t initWait(struct ncclComm* comm);

/* ---- groups and operations (boot_ops.c) --------------------------------------------------------- */

enum itemKind { ITEM_INIT, ITEM_OP };
struct groupItem {
  enum itemKind kind;
  struct ncclComm* comm;
  /* ITEM_INIT */
  int nranks, rank;
  ncclUniqueId id;
  /* ITEM_OP */
  enum opKind opKind;
  int survivors; /* a shrink: the ranks that take part (0: every rank, in the operation order) */
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t redOp;
  int root;
  struct rankArgs args;
  struct bootOp* posted;
};

/* This thread's group: depth, queued items, the first error. */
extern __thread int groupDepth;
extern __thread struct groupItem* groupItems;
extern __thread int groupCount, groupCap;
extern __thread ncclResult_t groupError;

ncclResult_t groupQueue(const struct groupItem* item);
ncclResult_t opPost(struct groupItem* item, struct bootOp** out, int* runIt);
ncclResult_t opFinish(struct ncclComm* comm, struct bootOp* op, int runIt);
ncclResult_t collective(struct groupItem* item);

/* ---- entry points (bootstrap.c, boot_split.c) -------------------------------------------------- */

#define BOOT_API(ret, name, params) SYMM_EXPORT ret name params; ret name params

/* config->blocking as NCCL reads it (unset: blocking). */
int configBlocking(const ncclConfig_t* config, int inherited);

#endif
