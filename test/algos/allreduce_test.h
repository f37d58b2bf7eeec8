/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of test_allreduce share: options, thread-safe checks, the ranks and the memory
 * the direct mode builds, one call, host data for a case. test_allreduce.c has main(). */
#ifndef SYMMCOLL_TEST_ALLREDUCE_H
#define SYMMCOLL_TEST_ALLREDUCE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define HARNESS_SHARED_COUNTERS
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "algos.h"
#include "harness.h"
#include "nccl_api.h"
#include "symm_peers.h"

/* ---- options (test_allreduce.c) ------------------------------------------------------------ */

enum { MODE_DIRECT, MODE_NCCL };
struct arOptions {
  int mode, ranks, procs, threads, quick, real, abortTest, compareNccl, verbose;
  long soak, replays;
  size_t stagingBytes, maxBytes;
  uint64_t seed;
  unsigned algoMask; /* bits of enum symmAlgo */
};
extern struct arOptions opt;

/* Thread-safe CHECK for threads mode, with a message (test/harness.h). `cond` is evaluated
 * before anything is counted: it is often a blocking call (syncAll, a collective) that waits for
 * another rank thread. */
#define TCHECK(cond, ...) HARNESS_TCHECKF(cond, __VA_ARGS__)

/* A CUDA or NCCL call that must succeed: else its text and error, and exit 2. */
#define CUDA_OR_DIE(cmd)                                                        \
  do {                                                                          \
    const cudaError_t e_ = (cmd);                                               \
    if (e_ != cudaSuccess) arDie(__FILE__, __LINE__, #cmd, cudaGetErrorString(e_)); \
  } while (0)
#define NCCL_OR_DIE(cmd)                                                        \
  do {                                                                          \
    const ncclResult_t r_ = (cmd);                                              \
    if (r_ != ncclSuccess) arDie(__FILE__, __LINE__, #cmd, ncclGetErrorString(r_)); \
  } while (0)
void arDie(const char* file, int line, const char* call, const char* error) __attribute__((noreturn));

/* ---- ranks (allreduce_ranks.c) ------------------------------------------------------------- */

#define SIGNAL_BYTES (64u << 10)
#define STATE_BYTES (64u << 10)
#define USER_REG_TABLE_OFFSET 4096

struct rankCtx {
  int rank, dev;
  cudaStream_t stream, side;
  ncclComm_t comm;
  struct symmPeers peers; /* direct mode */
  void *staging, *signalsMem, *stateMem;
  uint32_t *abortHost, *errorHost;
  char *sendMem, *recvMem; /* maxBytes + 256 each */
  unsigned long long* devMismatch;
};

struct driver {
  int nlocal;
  struct rankCtx* local[SYMM_MAX_RANKS];
  int isLeader; /* the one that prints and sets the environment */
};

extern int nranksWorld, ngpus;
extern pthread_barrier_t threadBarrier;
extern struct rankCtx* allRanks; /* one process holding every rank (direct mode), else NULL */

struct arCall {
  enum symmAlgo algo; /* direct mode; nccl mode uses the environment */
  ncclDataType_t dtype;
  ncclRedOp_t op;
  size_t count;
  size_t sendOff[SYMM_MAX_RANKS], recvOff[SYMM_MAX_RANKS]; /* bytes, per global rank */
  int inPlace;
  int zeroCopy; /* direct mode, all ranks in this process: two-shot reads peers' sendbuff */
  int writeOutputs; /* the same, two-shot writes peers' recvbuff (windowsAreOutputs) */
  /* Direct mode, all ranks in this process, two-shot: the ranks in descMask say their input is
   * registered (ncclCommRegister style), the others push it; exchangeDescs on every rank. */
  int exchangeDescs;
  uint32_t descMask;
};

/* What a rank process sends up its pipe (cudaIpc handles, the unique id). */
struct blob {
  cudaIpcMemHandle_t staging, signals;
  ncclUniqueId id;
};

void driverBarrier(void);
void setAlgoEnv(const struct driver* d, const char* name);
void allocRankMemory(struct rankCtx* c);
void connectDirectLocal(struct rankCtx* ctx, int n);
extern int upPipe[SYMM_MAX_RANKS][2], downPipe[SYMM_MAX_RANKS][2];
void exchange(int rank, const struct blob* mine, struct blob* all);
void relayBlobs(void);
void connectDirectIpc(struct rankCtx* c);
const void* sendPtr(const struct rankCtx* c, const struct arCall* a);
void* recvPtr(const struct rankCtx* c, const struct arCall* a);
int directPdl(int dev);
ncclResult_t issueOne(struct rankCtx* c, const struct arCall* a, cudaStream_t stream);
ncclResult_t issueAll(struct driver* d, const struct arCall* a, int useSide);

/* ---- host data, checks, sweeps (allreduce_sweeps.c) ---------------------------------------- */

struct hostCase {
  void* in[SYMM_MAX_RANKS];
  void* expect;
  void* got;
  size_t capBytes;
};

void hostCaseInit(struct hostCase* h, size_t bytes);
void hostCaseFree(struct hostCase* h);
void hostCaseFill(struct hostCase* h, const struct arCall* a, uint64_t seed);
void uploadInputs(struct driver* d, const struct arCall* a, const struct hostCase* h);
int syncAll(struct driver* d);
size_t checkResults(struct driver* d, const struct arCall* a, struct hostCase* h, const char* what,
                    double tol);
extern __thread uint64_t rngState;
uint64_t rnd(void);
void randomOffsets(struct arCall* a);
int algoWanted(enum symmAlgo algo, ncclDataType_t dt, ncclRedOp_t op, size_t count);
void selectAlgo(const struct driver* d, enum symmAlgo algo);
void sweepSmall(struct driver* d);
void sweepLarge(struct driver* d);

/* ---- long runs (allreduce_replays.c) and abort (allreduce_abort.c) -------------------------- */

void graphTest(struct driver* d);
void soakTest(struct driver* d);
void abortTest(struct driver* d);

#endif
