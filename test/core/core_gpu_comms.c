/* SPDX-License-Identifier: Apache-2.0 */
/* test_core_gpu's communicators: groups (simulated, failing), non-blocking ones, their splits,
 * a shrink with NCCL_SHRINK_ABORT, ncclConfig_t's CTA policy and bounds, settings that differ
 * between ranks. */
#include "core_gpu.h"

#include <dlfcn.h>
#include <stdlib.h>

/* ---- groups: simulate, then a normal call; a failing GroupEnd (bootstrap knob) ------------- */
typedef int (*failGroupEndsFn)(int count);
void groupRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1); /* staging */
  const uint64_t before = ours(r->comm);
  CUDA_OK(cudaMemsetAsync(r->out, 0, 1024 * sizeof(float), r->s1));
  fill(r, r->in, 1024, 2, r->s1);
  TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  TCHECK_EQ_INT(ncclGroupSimulateEnd(&sim), ncclSuccess);
  TCHECK_EQ_INT(ours(r->comm), before);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, r->out, sizeof(float), cudaMemcpyDeviceToHost));
  TCHECK(r->host[0] == 0.0f); /* nothing ran */
  checkedAllReduce(r, 1024, 3); /* not deferred any more */
  TCHECK_EQ_INT(ours(r->comm), before + 1);
  /* A failing GroupEnd drops our operations; every rank then reports the failure. */
  failGroupEndsFn failGroupEnds = NULL;
  *(void**)&failGroupEnds = dlsym(symmReal.handle, "symmTestBootstrapFailGroupEnds");
  if (failGroupEnds == NULL) {
    if (r->rank == 0) printf("group: the bootstrap cannot fail ncclGroupEnd; that case is skipped\n");
    return;
  }
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) failGroupEnds(nranks);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
  TCHECK(ncclGroupEnd() != ncclSuccess);
  TCHECK_EQ_INT(ours(r->comm), before + 1);
  ncclResult_t state = ncclSuccess;
  for (double t0 = nowMs(); state == ncclSuccess && nowMs() - t0 < 10000;) {
    TCHECK_EQ_INT(ncclCommGetAsyncError(r->comm, &state), ncclSuccess);
    if (state == ncclSuccess) sleepMs(1);
  }
  TCHECK(state != ncclSuccess);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  r->comm = NULL;
}

/* ---- non-blocking: NCCL's group launches first, ours after it; never a blocking first call -- */
void nonBlockingRank(struct rank* r) {
  /* The first call given to us forwards, staging follows in the background. */
  checkedAllReduce(r, 1024, 1);
  checkedAllReduce(r, 1024, 2);
  TCHECK(ours(r->comm) >= 1);
  for (int k = 0; k < 50; k++) {
    fill(r, r->in, 4096, k, r->s1);
    TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
    TCHECK_EQ_INT(ncclBroadcast(r->in, r->out + 4096, 4096, ncclFloat32, k % nranks, r->comm, r->s1),
                  ncclSuccess);
    ncclResult_t res = allReduce(r, r->in, r->out, 4096, r->s1);
    TCHECK(res == ncclSuccess || res == ncclInProgress);
    TCHECK_EQ_INT(settle(r->comm, ncclGroupEnd()), ncclSuccess);
    TCHECK_EQ_INT(wrongSum(r, r->out, 4096, k, r->s1), 0);
    TCHECK_EQ_INT(wrongAt(r, r->out + 4096, 4096, k, k % nranks), 0);
  }
}

/* ---- a child communicator of n ranks: checked all-reduces, ours ---------------------------- */
static void childCalls(struct rank* r, ncclComm_t child, int n) {
  struct rank c = *r;
  c.comm = child;
  TCHECK_EQ_INT(ncclCommUserRank(child, &c.rank), ncclSuccess);
  for (int k = 0; k < 8; k++) {
    const size_t count = (size_t)256 << (k % 5);
    fill(&c, c.in, count, k, c.s1);
    TCHECK_EQ_INT(settle(child, allReduce(&c, c.in, c.out, count, c.s1)), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(c.s1));
    CUDA_OK(cudaMemcpy(c.host, c.out, count * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += c.host[i] != expectedOf(i, k, n);
    TCHECK_EQ_INT(wrong, 0);
  }
  /* The first call given to our kernels may forward (non-blocking: staging follows it). */
  TCHECK(ours(child) >= 7);
}

/* ---- a non-blocking split: the child is ours on every rank -------------------------------------
 * The bootstrap's non-blocking split stores the child before it returns on the rank that
 * completes the rendezvous and later, from a thread, on the others (NCCL's init thread may be
 * either). Every rank must register the child once the parent is done, whatever it saw at the
 * return (before: only the quick rank did, and its setup waited for peers that never came). The
 * child's ranks are the parent's in reverse. */
void splitRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1);
  ncclComm_t child = NULL;
  const ncclResult_t res = ncclCommSplit(r->comm, 0, nranks - 1 - r->rank, &child, NULL);
  TCHECK(res == ncclInProgress || res == ncclSuccess);
  /* The parent's state says when the split is done; the child is handed over by then. */
  TCHECK_EQ_INT(settle(r->comm, ncclInProgress), ncclSuccess);
  child = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
  TCHECK(child != NULL);
  if (child == NULL) return;
  TCHECK(symmCommFind(child) != NULL);
  TCHECK_EQ_INT(settle(child, ncclInProgress), ncclSuccess); /* its own setup, in the background */
  int childRank = -1;
  TCHECK_EQ_INT(ncclCommUserRank(child, &childRank), ncclSuccess);
  TCHECK_EQ_INT(childRank, nranks - 1 - r->rank);
  childCalls(r, child, nranks);
  checkedAllReduce(r, 2048, 2); /* the parent still works */
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(settle(child, ncclCommDestroy(child)), ncclSuccess);
}

/* ---- shrink with NCCL_SHRINK_ABORT while kernels of ours wait for a rank that stopped ---------
 * Rank N-1 stops taking part; the others' all-reduce of ours waits for it on the GPU. They
 * shrink it away with NCCL_SHRINK_ABORT: the call returns and their streams drain within 5 s
 * (before: our abort flag was never raised, the kernels spun forever); the parent's memory of
 * ours is gone (every later call forwards, on every survivor); the child works with our kernels.
 * Then every rank aborts the parent. */
void shrinkRank(struct rank* r) {
  checkedAllReduce(r, 1024, 1); /* staging, on every rank */
  const int gone = nranks - 1;
  pthread_barrier_wait(&barrier);
  if (r->rank != gone) {
    fill(r, r->in, 1024, 2, r->s1);
    TCHECK_EQ_INT(allReduce(r, r->in, r->out, 1024, r->s1), ncclSuccess);
    sleepMs(300);
    TCHECK_EQ_INT(cudaStreamQuery(r->s1), cudaErrorNotReady); /* waiting for rank N-1 */
    (void)cudaGetLastError();
    const double t0 = nowMs();
    int exclude[1] = {gone};
    ncclComm_t child = NULL;
    TCHECK_EQ_INT(ncclCommShrink(r->comm, exclude, 1, &child, NULL, NCCL_SHRINK_ABORT), ncclSuccess);
    const double shrinkMs = nowMs() - t0;
    cudaError_t e = cudaErrorNotReady;
    while (e == cudaErrorNotReady && nowMs() - t0 < 10000) {
      e = cudaStreamQuery(r->s1);
      if (e == cudaErrorNotReady) sleepMs(1);
    }
    const double drainedMs = nowMs() - t0;
    TCHECK_EQ_INT(e, cudaSuccess);
    TCHECK(shrinkMs < 5000 && drainedMs < 5000);
    TCHECK(symmTransportPeers(symmCommFind(r->comm)) == NULL);
    if (r->rank == 0)
      printf("shrink: returned %.1f ms, stream drained %.1f ms after NCCL_SHRINK_ABORT began\n",
             shrinkMs, drainedMs);
    TCHECK(child != NULL);
    if (e == cudaSuccess && child != NULL) {
      childCalls(r, child, nranks - 1);
      TCHECK_EQ_INT(ncclCommDestroy(child), ncclSuccess);
    }
  }
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommAbort(r->comm), ncclSuccess);
  r->comm = NULL;
}

/* ---- ncclConfig_t: CTA policy and grid bounds ------------------------------------------- */
void ctaRank(struct rank* r) {
  for (int k = 0; k < 10; k++) checkedAllReduce(r, 256u << (k % 4), k);
  /* NCCL_CTA_POLICY_ZERO: no SM kernel of ours (there is no copy-engine all-reduce): every
   * all-reduce forwards, and every all-gather, whatever its size, runs on the copy engines;
   * otherwise ours, within the grid bounds. */
  if (ctaPolicy & NCCL_CTA_POLICY_ZERO) {
    TCHECK_EQ_INT(ours(r->comm), 0);
    static const size_t each[10] = {1, 3, 17, 255, 1000, 4099, 16384, 32771, 65537, 100000};
    for (int k = 0; k < 10; k++) checkedAllGather(r, each[k], k, r->s1);
    TCHECK_EQ_INT(ours(r->comm), 10);
  } else {
    TCHECK_EQ_INT(ours(r->comm), 10);
  }
}

/* ---- a setting differs between ranks: every rank forwards, right ---------------------------
 * SYMMCOLL_TEST_KNOB_SKEW_RANK's record reports another value of what SYMMCOLL_TEST_SKEW_WHAT
 * names (an agreed knob by default; maxCTAs, minCTAs, CTAPolicy, disable, maxRanks): ranks that
 * are threads of one process share their environment. */

/* One reduce-scatter of `each` floats per rank into a poisoned output, checked. */
static void checkedReduceScatter(struct rank* r, size_t each, int salt) {
  fill(r, r->in, each * (size_t)nranks, salt, r->s1);
  CUDA_OK(cudaMemsetAsync(r->out, 0xff, each * sizeof(float), r->s1));
  TCHECK_EQ_INT(ncclReduceScatter(r->in, r->out, each, ncclFloat32, ncclSum, r->comm, r->s1),
                ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, r->out, each * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (size_t i = 0; i < each; i++) wrong += r->host[i] != expected((size_t)r->rank * each + i, salt);
  TCHECK_EQ_INT(wrong, 0);
}

void mismatchRank(struct rank* r) {
  struct symmComm* entry = symmCommFind(r->comm);
  TCHECK(entry != NULL && entry->setupDone && entry->transport == NULL);
  static const size_t counts[] = {1, 7, 1023, 4099, 65537, 1000003};
  for (int k = 0; k < 6; k++) {
    CUDA_OK(cudaMemsetAsync(r->out, 0xff, MAX_COUNT * sizeof(float), r->s1));
    checkedAllReduce(r, counts[k], k);
    const size_t each = counts[k] / (size_t)nranks > 0 ? counts[k] / (size_t)nranks : 1;
    CUDA_OK(cudaMemsetAsync(r->out, 0xff, MAX_COUNT * sizeof(float), r->s1));
    checkedAllGather(r, each, k, r->s1);
    checkedReduceScatter(r, each, k);
  }
  TCHECK_EQ_INT(ours(r->comm), 0);
}

/* ---- NCCL_CHECK_POINTERS=1: buffers NCCL's pointer check refuses never reach our kernels ----
 * A pageable host buffer has no device address: the real NCCL refuses it (ncclInvalidArgument),
 * so the call must go to it untouched; a kernel of ours would read or write memory it cannot
 * reach. The test bootstrap has no pointer check and computes the call from host memory, so
 * here the forwarded call succeeds and its result can be checked. Pinned host memory has a
 * device address: NCCL accepts it, and so may ours. Sizes of every kernel of the tuner's table
 * (meson also forces each all-reduce kernel). */
static void pointerCase(struct rank* r, float* in, float* out, size_t count, int salt,
                        int oursMayRun) {
  const uint64_t before = ours(r->comm);
  for (size_t i = 0; i < count; i++) r->host[i] = pattern(r->rank, i, salt);
  CUDA_OK(cudaMemcpy(in, r->host, count * sizeof(float), cudaMemcpyDefault));
  if (out != in) { /* poison */
    for (size_t i = 0; i < count; i++) r->host[i] = -1.0f;
    CUDA_OK(cudaMemcpy(out, r->host, count * sizeof(float), cudaMemcpyDefault));
  }
  TCHECK_EQ_INT(allReduce(r, in, out, count, r->s1), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, out, count * sizeof(float), cudaMemcpyDefault));
  int wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += r->host[i] != expected(i, salt);
  TCHECK_EQ_INT(wrong, 0);
  if (!oursMayRun) TCHECK_EQ_INT(ours(r->comm), before);
}

void checkPointersRank(struct rank* r) {
  static const size_t counts[] = {7, 4099, 65537, 1000003};
  float* pageable = malloc(MAX_COUNT * sizeof(float));
  float* pinned = NULL;
  CUDA_OK(cudaMallocHost((void**)&pinned, MAX_COUNT * sizeof(float)));
  TCHECK(pageable != NULL && pinned != NULL);
  if (pageable == NULL || pinned == NULL) goto done;
  for (int k = 0; k < 4; k++) {
    const uint64_t before = ours(r->comm);
    checkedAllReduce(r, counts[k], k); /* device buffers: NCCL's check passes */
    if (k == 0) TCHECK_EQ_INT(ours(r->comm), before + 1); /* ours at the smallest size */
    pointerCase(r, pageable, r->out, counts[k], k, 0);
    pointerCase(r, r->in, pageable, counts[k], k, 0);
    pointerCase(r, pageable, pageable, counts[k], k, 0); /* in place */
    pointerCase(r, pinned, r->out, counts[k], k, 1);
  }
  /* All-gather and reduce-scatter take the same check: a pageable input is forwarded. */
  const size_t each = 4099;
  for (size_t i = 0; i < each; i++) pageable[i] = pattern(r->rank, i, 9);
  const uint64_t before = ours(r->comm);
  TCHECK_EQ_INT(ncclAllGather(pageable, r->out, each, ncclFloat32, r->comm, r->s1), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  int wrong = 0;
  for (int q = 0; q < nranks; q++) wrong += wrongAt(r, r->out + (size_t)q * each, each, 9, q);
  TCHECK_EQ_INT(wrong, 0);
  for (size_t i = 0; i < each * (size_t)nranks; i++) pageable[i] = pattern(r->rank, i, 10);
  TCHECK_EQ_INT(ncclReduceScatter(pageable, r->out, each, ncclFloat32, ncclSum, r->comm, r->s1),
                ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaMemcpy(r->host, r->out, each * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (size_t i = 0; i < each; i++) wrong += r->host[i] != expected((size_t)r->rank * each + i, 10);
  TCHECK_EQ_INT(wrong, 0);
  TCHECK_EQ_INT(ours(r->comm), before);
done:
  free(pageable);
  if (pinned != NULL) CUDA_OK(cudaFreeHost(pinned));
}
