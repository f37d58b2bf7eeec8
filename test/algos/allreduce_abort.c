/* SPDX-License-Identifier: Apache-2.0 */
/* test_allreduce's abort and deadline: rank 0 spins for a peer that never arrives. */
#include "allreduce_test.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "param.h"

/* ------------------------------------------------------------------------------------------ */
/* Abort and timeout: rank 0 spins for a peer that never arrives */

struct abortArg {
  struct rankCtx* c;
  struct timespec at;
};

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void* abortLater(void* p) {
  struct abortArg* arg = p;
  usleep(200 * 1000);
  clock_gettime(CLOCK_MONOTONIC, &arg->at);
  if (opt.mode == MODE_DIRECT) {
    __atomic_store_n(&arg->c->abortHost[0], 1u, __ATOMIC_SEQ_CST);
  } else {
    ncclResult_t r = ncclCommAbort(arg->c->comm);
    TCHECK(r == ncclSuccess, "ncclCommAbort: %s", ncclGetErrorString(r));
  }
  return NULL;
}

/* Zeroes every rank's signals and epoch so the ranks start in step again (direct mode). */
static void resetDirectState(struct driver* d) {
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    CUDA_OR_DIE(cudaDeviceSynchronize());
    CUDA_OR_DIE(cudaMemset(c->signalsMem, 0, SIGNAL_BYTES));
    CUDA_OR_DIE(cudaMemset(c->stateMem, 0, STATE_BYTES));
    CUDA_OR_DIE(cudaDeviceSynchronize());
    c->abortHost[0] = c->errorHost[0] = 0;
  }
}

static void lonelyLaunch(struct rankCtx* c, struct arCall* a) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaMemsetAsync(c->recvMem, 0xA5, 4096, c->stream));
  CUDA_OR_DIE(cudaStreamSynchronize(c->stream));
  ncclResult_t r = issueOne(c, a, c->stream);
  TCHECK(r == ncclSuccess, "lonely launch: %s", ncclGetErrorString(r));
}

static int outputUntouched(struct rankCtx* c) {
  unsigned char buf[4096];
  CUDA_OR_DIE(cudaMemcpy(buf, c->recvMem, sizeof(buf), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof(buf); i++)
    if (buf[i] != 0xA5) return 0;
  return 1;
}

void abortTest(struct driver* d) {
  if (d->nlocal != nranksWorld) return; /* needs to hold back every other rank itself */
  struct rankCtx* c = d->local[0];
  struct arCall a = {.algo = SYMM_ALGO_ONESHOT, .dtype = ncclFloat32, .op = ncclSum, .count = 1000};
  if (opt.mode == MODE_NCCL) {
    struct symmComm* sc = symmCommFind(c->comm);
    if (sc == NULL || sc->transport == NULL) {
      printf("abort: communicator forwards (no symmetric memory here); ncclCommAbort test skipped\n");
      return;
    }
    setAlgoEnv(d, "oneshot");
  }
  /* 1. Abort while spinning: the stream drains within 2 s of the abort. */
  struct abortArg arg = {.c = c};
  lonelyLaunch(c, &a);
  pthread_t th;
  pthread_create(&th, NULL, abortLater, &arg);
  cudaError_t e = cudaStreamSynchronize(c->stream);
  pthread_join(th, NULL);
  const double drain = secondsSince(&arg.at);
  printf("abort: stream drained %.3f s after the abort\n", drain);
  TCHECK(e == cudaSuccess, "stream after abort: %s", cudaGetErrorString(e));
  TCHECK(drain < 2.0, "stream took %.3f s to drain after abort", drain);
  if (opt.mode == MODE_NCCL) {
    /* The communicator is gone; the others are aborted too so teardown does not wait. */
    for (int i = 1; i < d->nlocal; i++) (void)ncclCommAbort(d->local[i]->comm);
    for (int i = 0; i < d->nlocal; i++) d->local[i]->comm = NULL;
    return;
  }
  TCHECK(c->errorHost[0] == SYMM_ERR_ABORT, "error flag after abort = %u", c->errorHost[0]);
  TCHECK(outputUntouched(c), "abort: the output buffer was written");
  resetDirectState(d);

  /* 2. Deadline: SYMMCOLL_SPIN_DEADLINE_MS=300 gives up by itself. */
  setenv("SYMMCOLL_SPIN_DEADLINE_MS", "300", 1);
  symmParamResetAll();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  lonelyLaunch(c, &a);
  e = cudaStreamSynchronize(c->stream);
  const double took = secondsSince(&t0);
  printf("timeout: kernel gave up after %.3f s (deadline 0.3 s)\n", took);
  TCHECK(e == cudaSuccess, "stream after timeout: %s", cudaGetErrorString(e));
  TCHECK(took >= 0.25 && took < 2.0, "timeout took %.3f s", took);
  TCHECK((c->errorHost[0] & SYMM_ERR_DEADLINE) != 0, "error flag after the deadline = %u",
         c->errorHost[0]);
  TCHECK(outputUntouched(c), "timeout: the output buffer was written");
  /* 3. A communicator that gave up refuses further work at once, touching nothing. */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  lonelyLaunch(c, &a);
  e = cudaStreamSynchronize(c->stream);
  TCHECK(e == cudaSuccess && secondsSince(&t0) < 0.25 && outputUntouched(c),
         "launch after an error should return at once without writing");
  unsetenv("SYMMCOLL_SPIN_DEADLINE_MS");
  symmParamResetAll();
  resetDirectState(d);
  /* 4. And after a reset the ranks work together again. */
  struct hostCase h;
  hostCaseInit(&h, 4096 * 4);
  a.count = 4096;
  hostCaseFill(&h, &a, 77);
  uploadInputs(d, &a, &h);
  TCHECK(issueAll(d, &a, 0) == ncclSuccess, "after reset: issue");
  TCHECK(syncAll(d), "after reset: sync");
  checkResults(d, &a, &h, "after abort reset", -1.0);
  hostCaseFree(&h);
}
