/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of test_core_gpu share: the world (ranks as threads through the test bootstrap),
 * a rank's communicator, streams and buffers, checked calls, and each mode's rank body. */
#ifndef SYMMCOLL_TEST_CORE_GPU_H
#define SYMMCOLL_TEST_CORE_GPU_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define HARNESS_SHARED_COUNTERS
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "algos.h"
#include "comm.h"
#include "debug.h"
#include "forward.h"
#include "harness.h"
#include "nccl_api.h"
#include "param.h"
#include "transport.h"
#include "vmm.h"

#define TCHECK(cond) HARNESS_TCHECK(cond)
#define TCHECK_EQ_INT(a, b) HARNESS_TCHECK_EQ_INT(a, b)
#define CUDA_OK(x) TCHECK_EQ_INT((x), cudaSuccess)

/* The world (test_core_gpu.c): GPUs, ranks, the mode's number (delay, iterations, cycles, calls),
 * its unique id and the barrier of its rank threads (and helper thread, if any); the config of
 * its communicators. */
extern int ndev, nranks;
extern long param;
extern ncclUniqueId uid;
extern pthread_barrier_t barrier;
extern int ctaPolicy, maxCTAs;

struct rank {
  int rank;
  ncclComm_t comm;
  cudaStream_t s1, s2;
  float *in, *out, *host;
};

typedef void (*rankBody)(struct rank*);
/* Runs `b` on every rank thread of a fresh world, with `extra` (if any) as one more party of
 * the barrier. */
void runWorld(rankBody b, int extraParties, void* (*extra)(void*), void* extraArg);

/* ---- a rank's kit (core_gpu_rank.c) --------------------------------------------------------- */

#define MAX_COUNT (1u << 20)
double nowMs(void);
void sleepMs(double ms);
uint64_t entryCounter(ncclComm_t comm, size_t field);
/* Launches of ours on `comm` so far; of those, replays of a recorded launch and zero copy. */
#define ours(comm) entryCounter(comm, offsetof(struct symmComm, launches))
#define replays(comm) entryCounter(comm, offsetof(struct symmComm, replays))
#define zeroCopies(comm) entryCounter(comm, offsetof(struct symmComm, zeroCopyLaunches))
ncclResult_t settle(ncclComm_t comm, ncclResult_t res);
float pattern(int rank, size_t i, int salt);
float expectedOf(size_t i, int salt, int n);
float expected(size_t i, int salt);
void fill(struct rank* r, float* dev, size_t count, int salt, cudaStream_t s);
int wrongAt(struct rank* r, const float* dev, size_t count, int salt, int root);
int wrongSum(struct rank* r, const float* dev, size_t count, int salt, cudaStream_t s);
ncclResult_t allReduce(struct rank* r, const float* in, float* out, size_t count, cudaStream_t s);
void checkedAllGather(struct rank* r, size_t each, int salt, cudaStream_t s);
void checkedAllReduce(struct rank* r, size_t count, int salt);
int openRank(struct rank* r, int blocking);
void closeRank(struct rank* r, int destroy);

/* ---- the modes' rank bodies -------------------------------------------------------------------- */

/* Failures (core_gpu_faults.c): late, fault, abort, abort-setup, ce-abort, gave-up. */
void lateRank(struct rank* r);
void faultRank(struct rank* r);
void runAbortCycles(void);
void abortSetupRank(struct rank* r);
void* abortSetupHelper(void* arg);
void ceAbortRank(struct rank* r);
void gaveUpRank(struct rank* r);

/* Order and replays (core_gpu_order.c): streams, repeat, soak, window flags. */
extern int streamsReplay;
void streamsRank(struct rank* r);
void repeatRank(struct rank* r);
void soakRank(struct rank* r);
void windowFlagsRank(struct rank* r);

/* Communicators (core_gpu_comms.c): groups, non-blocking, split, shrink, config, mismatch,
 * NCCL_CHECK_POINTERS. */
void groupRank(struct rank* r);
void nonBlockingRank(struct rank* r);
void splitRank(struct rank* r);
void shrinkRank(struct rank* r);
void ctaRank(struct rank* r);
void mismatchRank(struct rank* r);
void checkPointersRank(struct rank* r);

#endif
