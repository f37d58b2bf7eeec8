/* SPDX-License-Identifier: Apache-2.0 */
/* test_core_gpu's order and replays: two streams of eager calls and graph replays, repeated
 * identical calls replayed and decided again after a change, and the mixed soak. */
#include "core_gpu.h"

#include <stdlib.h>
#include <string.h>

/* ---- two streams, eager calls and graph replays interleaved -------------------------------- */
#define EAGER_SLOTS 7
#define GRAPH_OPS 4
#define SLOT_COUNT 1024
/* 0 (streams-eager): nothing captured; the graph's calls are issued eagerly on s2 instead. */
int streamsReplay = 1;

/* The GRAPH_OPS calls of the second stream: one replay, or the same calls issued eagerly. */
static void secondStreamCalls(struct rank* r, cudaGraphExec_t exec, float* gIn, float* gOut) {
  if (streamsReplay) {
    CUDA_OK(cudaGraphLaunch(exec, r->s2));
    return;
  }
  for (int j = 0; j < GRAPH_OPS; j++)
    TCHECK_EQ_INT(allReduce(r, gIn + j * SLOT_COUNT, gOut + j * SLOT_COUNT, SLOT_COUNT, r->s2),
                  ncclSuccess);
}

void streamsRank(struct rank* r) {
  float* eIn = r->in;                            /* EAGER_SLOTS + GRAPH_OPS input slots */
  float* eOut = r->out;
  float* gIn = r->in + EAGER_SLOTS * SLOT_COUNT;
  float* gOut = r->out + EAGER_SLOTS * SLOT_COUNT;
  for (int k = 0; k < EAGER_SLOTS + GRAPH_OPS; k++) fill(r, r->in + k * SLOT_COUNT, SLOT_COUNT, k, r->s1);
  /* Staging first: a capture cannot build it. */
  TCHECK_EQ_INT(allReduce(r, eIn, eOut, SLOT_COUNT, r->s1), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (streamsReplay) {
    CUDA_OK(cudaStreamBeginCapture(r->s2, cudaStreamCaptureModeThreadLocal));
    for (int j = 0; j < GRAPH_OPS; j++)
      TCHECK_EQ_INT(allReduce(r, gIn + j * SLOT_COUNT, gOut + j * SLOT_COUNT, SLOT_COUNT, r->s2),
                    ncclSuccess);
    CUDA_OK(cudaStreamEndCapture(r->s2, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    /* Uploaded before the ranks replay at once: without it, cudaGraphLaunch sometimes blocked
     * every rank thread of the process in the driver (test/core/README.md, "Graph uploads"). */
    CUDA_OK(cudaGraphUpload(exec, r->s2));
    CUDA_OK(cudaStreamSynchronize(r->s2));
  }
  long done = 0, wrong = 0;
  for (long it = 0; done < param; it++) {
    const int slot = (int)(it % EAGER_SLOTS);
    TCHECK_EQ_INT(allReduce(r, eIn + slot * SLOT_COUNT, eOut + slot * SLOT_COUNT, SLOT_COUNT, r->s1),
                  ncclSuccess);
    done++;
    if (it % 3 == 1) {
      secondStreamCalls(r, exec, gIn, gOut);
      done += GRAPH_OPS;
    }
    if (it % 100 == 99 || done >= param) {
      CUDA_OK(cudaStreamSynchronize(r->s1));
      CUDA_OK(cudaStreamSynchronize(r->s2));
      for (int k = 0; k < EAGER_SLOTS; k++) wrong += wrongSum(r, eOut + k * SLOT_COUNT, SLOT_COUNT, k, r->s1);
      for (int j = 0; j < GRAPH_OPS; j++)
        wrong += wrongSum(r, gOut + j * SLOT_COUNT, SLOT_COUNT, EAGER_SLOTS + j, r->s2);
      /* Outputs back to garbage, so a call that did not run shows. */
      CUDA_OK(cudaMemsetAsync(eOut, 0xff, EAGER_SLOTS * SLOT_COUNT * sizeof(float), r->s1));
      CUDA_OK(cudaMemsetAsync(gOut, 0xff, GRAPH_OPS * SLOT_COUNT * sizeof(float), r->s2));
      CUDA_OK(cudaStreamSynchronize(r->s1));
      CUDA_OK(cudaStreamSynchronize(r->s2));
      /* Nobody launches again while a peer still copies its outputs back: a rank thread ahead
       * by two replays blocks in cudaGraphLaunch behind its first one, which waits on the GPU
       * for that peer, while holding the driver lock the peer's copy needs (ranks sharing one
       * process only; test/core/README.md, "Graph uploads"). */
      pthread_barrier_wait(&barrier);
      /* Every slot is written again before the next check only if it ran; eager slots cycle. */
      for (int k = 0; k < EAGER_SLOTS; k++)
        TCHECK_EQ_INT(allReduce(r, eIn + k * SLOT_COUNT, eOut + k * SLOT_COUNT, SLOT_COUNT, r->s1),
                      ncclSuccess);
      secondStreamCalls(r, exec, gIn, gOut);
      done += EAGER_SLOTS + GRAPH_OPS;
    }
  }
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  TCHECK_EQ_INT(wrong, 0);
  if (r->rank == 0) printf("streams: %ld calls per rank (eager and graph), %ld wrong\n", done, wrong);
  if (exec != NULL) CUDA_OK(cudaGraphExecDestroy(exec));
  if (graph != NULL) CUDA_OK(cudaGraphDestroy(graph));
}

/* ---- repeated identical calls: launched again as recorded, decided again after a change ---- */

/* SYMMCOLL_ALLREDUCE_ALGO for every rank (knobs are per process), set while all ranks wait. */
static void forceAlgo(const struct rank* r, const char* algo) {
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) {
    setenv("SYMMCOLL_ALLREDUCE_ALGO", algo, 1);
    symmParamResetAll();
  }
  pthread_barrier_wait(&barrier);
}

/* The same all-reduce call every time, on fresh inputs and a poisoned output, checked; all
 * ranks are done with it before anybody's next one. */
static void sameCall(struct rank* r, float* in, float* out, size_t count, int salt) {
  fill(r, in, count, salt, r->s1);
  if (out != in) CUDA_OK(cudaMemsetAsync(out, 0xff, count * sizeof(float), r->s1));
  TCHECK_EQ_INT(allReduce(r, in, out, count, r->s1), ncclSuccess);
  TCHECK_EQ_INT(wrongSum(r, out, count, salt, r->s1), 0);
  pthread_barrier_wait(&barrier);
}

/* Run with SYMMCOLL_ALLREDUCE_ALGO=lamport. Calls identical to an earlier one replay its launch;
 * a knob or a window that changes in between must make them decide again. */
void repeatRank(struct rank* r) {
  const size_t count = 256; /* 1 KiB */
  for (int inPlace = 0; inPlace <= 1; inPlace++) {
    const uint64_t launched = ours(r->comm), replayed = replays(r->comm);
    for (long i = 0; i < param; i++) sameCall(r, r->in, inPlace ? r->in : r->out, count, (int)i);
    TCHECK_EQ_INT((long)(ours(r->comm) - launched), param);
    /* The first call builds staging, the next one is recorded, the rest replay. */
    TCHECK((long)(replays(r->comm) - replayed) >= param - 2);
  }
  /* A knob: forwarded, then ours again. */
  uint64_t launched = ours(r->comm);
  forceAlgo(r, "nccl");
  sameCall(r, r->in, r->out, count, 1);
  TCHECK_EQ_INT((int)(ours(r->comm) - launched), 0);
  forceAlgo(r, "lamport");
  sameCall(r, r->in, r->out, count, 2);
  TCHECK_EQ_INT((int)(ours(r->comm) - launched), 1);
  /* A window under the input: the two-shot reads it in place (up to 4 MiB), and stops when the
   * window goes. */
  forceAlgo(r, "twoshot");
  const size_t big = 65536;
  void* buf = NULL;
  ncclWindow_t win = NULL;
  TCHECK_EQ_INT(ncclMemAlloc(&buf, 2 * big * sizeof(float)), ncclSuccess);
  if (buf == NULL) return;
  float *in = buf, *out = in + big;
  const uint64_t zeroCopied = zeroCopies(r->comm);
  for (int i = 0; i < 2; i++) sameCall(r, in, out, big, 3 + i);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 0);
  TCHECK_EQ_INT(ncclCommWindowRegister(r->comm, buf, 2 * big * sizeof(float), &win,
                                       NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  for (int i = 0; i < 2; i++) sameCall(r, in, out, big, 5 + i);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 2);
  TCHECK_EQ_INT(ncclCommWindowDeregister(r->comm, win), ncclSuccess);
  sameCall(r, in, out, big, 7);
  TCHECK_EQ_INT((int)(zeroCopies(r->comm) - zeroCopied), 2);
  TCHECK_EQ_INT(ncclMemFree(buf), ncclSuccess);
  forceAlgo(r, "lamport");
}

/* ---- soak: ours and forwarded calls, same and other streams -------------------------------- */

/* Elements per rank of the soak's all-gathers of about `count` in all (at least 1). */
static size_t perRank(size_t count) {
  return count / (size_t)nranks > 0 ? count / (size_t)nranks : 1;
}

/* Four calls issued on two streams with nothing synchronized in between: all-reduce (ours) on
 * s1, broadcast (forwarded; the test bootstrap runs it synchronously) on s2, all-gather on s1,
 * all-reduce on s2; then every output checked. Our ordering across streams must hold. */
static void soakBurst(struct rank* r, size_t count, int salt, int root) {
  fill(r, r->in, count, salt, r->s1);
  const size_t each = perRank(count);
  float *ar1 = r->out, *bc = ar1 + count, *ag = bc + count, *ar2 = ag + each * (size_t)nranks;
  TCHECK_EQ_INT(allReduce(r, r->in, ar1, count, r->s1), ncclSuccess);
  TCHECK_EQ_INT(ncclBroadcast(r->in, bc, count, ncclFloat32, root, r->comm, r->s2), ncclSuccess);
  TCHECK_EQ_INT(ncclAllGather(r->in, ag, each, ncclFloat32, r->comm, r->s1), ncclSuccess);
  TCHECK_EQ_INT(allReduce(r, r->in, ar2, count, r->s2), ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->s1));
  CUDA_OK(cudaStreamSynchronize(r->s2));
  TCHECK_EQ_INT(wrongAt(r, ar1, count, salt, -1), 0);
  TCHECK_EQ_INT(wrongAt(r, bc, count, salt, root), 0);
  TCHECK_EQ_INT(wrongAt(r, ar2, count, salt, -1), 0);
  for (int q = 0; q < nranks; q++) TCHECK_EQ_INT(wrongAt(r, ag + (size_t)q * each, each, salt, q), 0);
}

void soakRank(struct rank* r) {
  unsigned seed = 777; /* the same sequence on every rank */
  for (long k = 0; k < param; k++) {
    const unsigned pick = rand_r(&seed);
    const size_t count = (size_t)16 << (pick % 10);
    cudaStream_t s = (pick >> 8) & 1 ? r->s2 : r->s1;
    const int salt = (int)(k % 11);
    if (k % 16 == 15) {
      soakBurst(r, count, salt, (int)(k % nranks));
      continue;
    }
    fill(r, r->in, count, salt, s);
    switch ((pick >> 4) % 4) {
      case 0:
      case 1: /* usually ours */
        TCHECK_EQ_INT(allReduce(r, r->in, r->out, count, s), ncclSuccess);
        TCHECK_EQ_INT(wrongSum(r, r->out, count, salt, s), 0);
        break;
      case 2: { /* forwarded: broadcast */
        const int root = (int)(k % nranks);
        TCHECK_EQ_INT(ncclBroadcast(r->in, r->out, count, ncclFloat32, root, r->comm, s), ncclSuccess);
        CUDA_OK(cudaStreamSynchronize(s));
        TCHECK_EQ_INT(wrongAt(r, r->out, count, salt, root), 0);
        break;
      }
      default: /* all-gather: ours (the table's Lamport) or forwarded, by size */
        checkedAllGather(r, perRank(count), salt, s);
        break;
    }
  }
  TCHECK(ours(r->comm) > 0);
}

/* ---- a window registered with different flags on different ranks ---------------------------
 * Run with SYMMCOLL_ALLREDUCE_ALGO=twoshot. Rank 0 registers the window as symmetric, the others
 * without the flag: every rank must still take part in the mapping's exchange (else rank 0's
 * all-gather meets the others' next collective) and none may map it, so nothing reads it in
 * place and every result is right. Then symmetric on every rank: the two-shot reads it in place,
 * so the ranks' window sequence stayed in step. */
static int windowRound(struct rank* r, float* in, float* out, size_t count, int flags, int salt) {
  ncclWindow_t win = NULL;
  TCHECK_EQ_INT(ncclCommWindowRegister(r->comm, in, 2 * count * sizeof(float), &win, flags),
                ncclSuccess);
  const uint64_t zeroCopied = zeroCopies(r->comm);
  for (int i = 0; i < 2; i++) sameCall(r, in, out, count, salt + i);
  checkedAllGather(r, count / (size_t)nranks, salt, r->s1);
  const int inPlace = (int)(zeroCopies(r->comm) - zeroCopied);
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommWindowDeregister(r->comm, win), ncclSuccess);
  return inPlace;
}

void windowFlagsRank(struct rank* r) {
  const size_t count = 65536;
  void* buf = NULL;
  TCHECK_EQ_INT(ncclMemAlloc(&buf, 2 * count * sizeof(float)), ncclSuccess);
  if (buf == NULL) return;
  float *in = buf, *out = in + count;
  sameCall(r, in, out, count, 1); /* staging first */
  const int mixed = r->rank == 0 ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT;
  TCHECK_EQ_INT(windowRound(r, in, out, count, mixed, 2), 0);
  TCHECK_EQ_INT(windowRound(r, in, out, count, NCCL_WIN_DEFAULT, 5), 0);
  TCHECK_EQ_INT(windowRound(r, in, out, count, NCCL_WIN_COLL_SYMMETRIC, 8), 2);
  TCHECK_EQ_INT(ncclMemFree(buf), ncclSuccess);
}
