/* SPDX-License-Identifier: Apache-2.0 */
/* GPU tests of our all-gather and reduce-scatter kernels through ncclAllGather/ncclReduceScatter,
 * ranks as threads on one GPU through the test bootstrap (SYMMCOLL_NCCL_LIB names it): every
 * algorithm x datatype x op x size (0, 1, primes, odd, powers of two; full runs also whole 64 MiB
 * buffers and a million-element odd count) x in place or not, CUDA
 * graph replays with the input rewritten after capture, the table's own picks on both sides of
 * its steps, and a soak mixing all three collectives.
 * References are computed on the host: all-gather bit for bit, reduce-scatter with the
 * rank-order arithmetic of the all-reduce reference (ar_helpers.cu), also bit for bit. Then the
 * same sweeps and replays on buffers in registered windows (push, the copy engine and pull run
 * zero copy). All-gather algorithms: lamport, push, ce (copy engines and stream memory
 * operations, also in many rounds per call), multimem (emulated); push and pull also in many
 * rounds per launch (a small round size; aligned and unaligned buffers) and in several launches
 * per call. --small-staging: the least staging (1 MiB, no Lamport region), so push and pull run
 * real messages in several rounds too.
 *   test_collectives RANKS [--quick] [--small-staging] [--soak CALLS] [--seed S] */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algos.h"
#include "ar_helpers.h"
#include "coll.h"
#include "comm.h"
#include "forward.h"
#include "harness.h"
#include "nccl_api.h"
#include "param.h"
#include "transport.h"
#include "watchdog.h"

#define TCHECK(cond) HARNESS_TCHECK(cond)
#define TCHECK_EQ_INT(a, b) HARNESS_TCHECK_EQ_INT(a, b)
#define CUDA_OK(x) TCHECK_EQ_INT((x), cudaSuccess)

static int nranks, quick, ndev;
static int smallStaging; /* --small-staging: SYMMCOLL_BUFFER_BYTES at its least, 1 MiB */
static long soakCalls = 2000;
static uint64_t seed0 = 12345;
static ncclUniqueId uid;
static pthread_barrier_t barrier;

/* Largest count per rank (elements) any case uses, and the buffers' size. */
#define MAX_COUNT ((size_t)1 << 18)
#define MAX_BYTES (MAX_COUNT * 8 * 8) /* 8-byte elements, up to 8 ranks' worth */
/* Full runs also move whole buffers of 64 MiB (several staging chunks or rounds per call). */
#define LARGE_BYTES ((size_t)64 << 20)
static size_t bufBytes = MAX_BYTES; /* every buffer's size: LARGE_BYTES in full runs */

struct rank {
  int rank;
  ncclComm_t comm;
  cudaStream_t stream;
  char *send, *recv;           /* device, bufBytes each */
  char *hostIn, *hostOut, *ref; /* host, bufBytes each */
  char* peerIn[8];             /* host: every rank's input (regenerated here) */
};

/* What each rank is doing, for the watchdog's report when a run hangs (read from its thread). */
struct progress {
  const char* stage; /* a string literal */
  const char* algo;  /* a string literal */
  int coll;          /* 0 all-gather, 1 reduce-scatter, 2 all-reduce, 3 broadcast */
  size_t count;
  long step; /* the graph replay or soak call (0 elsewhere) */
};
static struct progress progressOf[8];
static struct rank* rankOf[8]; /* for the report: each rank while its communicator exists */

/* step < 0: the step stays as it is (a case of the soak). */
static void noteProgress(int rank, const char* stage, const char* algo, int coll, size_t count,
                         long step) {
  struct progress* p = &progressOf[rank];
  __atomic_store_n(&p->stage, stage, __ATOMIC_RELAXED);
  __atomic_store_n(&p->algo, algo, __ATOMIC_RELAXED);
  __atomic_store_n(&p->coll, coll, __ATOMIC_RELAXED);
  __atomic_store_n(&p->count, count, __ATOMIC_RELAXED);
  if (step >= 0) __atomic_store_n(&p->step, step, __ATOMIC_RELAXED);
}

/* Rank q's copy-engine barrier words (src/algos/copyengine.c: arrive, ready, exit from each
 * writer) and its pad's constant, read on a stream of its own: which flags have landed where.
 * A read that cannot complete (the device's queues blocked) leaves the stacks to the watchdog. */
static void reportCopyEngineWords(int q) {
  const struct rank* r = __atomic_load_n(&rankOf[q], __ATOMIC_ACQUIRE);
  const struct symmComm* c = r != NULL ? symmCommFind(r->comm) : NULL;
  const struct symmPeers* p = c != NULL ? symmTransportPeers(c) : NULL;
  if (p == NULL || p->signals[p->rank] == NULL) return;
  uint64_t one = 0, words[SYMM_CE_KINDS][SYMM_MAX_RANKS];
  memset(words, 0, sizeof(words));
  const uint64_t* pad = p->signals[p->rank];
  cudaStream_t s = NULL;
  int ok = cudaSetDevice(q % ndev) == cudaSuccess &&
           cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMemcpyAsync(&one, pad + SYMM_PAD_ONE_WORD, sizeof(one), cudaMemcpyDeviceToHost,
                           s) == cudaSuccess;
  for (int k = 0; k < SYMM_CE_KINDS && ok; k++)
    ok = cudaMemcpyAsync(words[k], pad + symmPadCeWord((enum symmCeWord)k, 0),
                         (size_t)p->nranks * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                         s) == cudaSuccess;
  ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
  if (!ok) {
    fprintf(stderr, "watchdog: rank %d: pad unreadable\n", q);
  } else {
    static const char* const kinds[SYMM_CE_KINDS] = {"arrive", "ready", "exit"};
    fprintf(stderr, "watchdog: rank %d: pad constant %llu; copy-engine words from writers 0..%d:",
            q, (unsigned long long)one, p->nranks - 1);
    for (int k = 0; k < SYMM_CE_KINDS; k++) {
      fprintf(stderr, " %s", kinds[k]);
      for (int w = 0; w < p->nranks; w++) fprintf(stderr, " %llu", (unsigned long long)words[k][w]);
    }
    fprintf(stderr, "\n");
  }
  if (s != NULL) (void)cudaStreamDestroy(s);
}

static void reportProgress(void) {
  static const char* const colls[4] = {"all-gather", "reduce-scatter", "all-reduce", "broadcast"};
  for (int q = 0; q < nranks; q++) {
    struct progress* p = &progressOf[q];
    const char* stage = __atomic_load_n(&p->stage, __ATOMIC_RELAXED);
    const char* algo = __atomic_load_n(&p->algo, __ATOMIC_RELAXED);
    const int coll = __atomic_load_n(&p->coll, __ATOMIC_RELAXED);
    const size_t count = __atomic_load_n(&p->count, __ATOMIC_RELAXED);
    const long step = __atomic_load_n(&p->step, __ATOMIC_RELAXED);
    fprintf(stderr, "watchdog: rank %d: %s, %s %s count %zu step %ld\n", q,
            stage != NULL ? stage : "setup", colls[coll & 3], algo != NULL ? algo : "-", count,
            step);
  }
  for (int q = 0; q < nranks; q++) reportCopyEngineWords(q);
}

static uint64_t ours(ncclComm_t comm) {
  struct symmComm* c = symmCommFind(comm);
  return c != NULL ? __atomic_load_n(&c->launches, __ATOMIC_RELAXED) : 0;
}

static uint64_t oursZeroCopy(ncclComm_t comm) {
  struct symmComm* c = symmCommFind(comm);
  return c != NULL ? __atomic_load_n(&c->zeroCopyLaunches, __ATOMIC_RELAXED) : 0;
}

/* The override of one collective (or another knob; NULL: unset), set by rank 0 while every rank
 * waits (knobs are per process). */
static void setAlgo(const struct rank* r, const char* knob, const char* value) {
  pthread_barrier_wait(&barrier);
  if (r->rank == 0) {
    if (value != NULL)
      setenv(knob, value, 1);
    else
      unsetenv(knob);
    symmParamResetAll();
  }
  pthread_barrier_wait(&barrier);
}

/* What rank r's all-gather (coll 0) or reduce-scatter (coll 1) of `count` elements per rank
 * must output, from every rank's input in r->peerIn, into r->ref. */
static void expectedOutput(struct rank* r, int coll, ncclDataType_t dt, ncclRedOp_t op, size_t count) {
  const size_t es = symmTypeSize(dt);
  if (coll == 0) {
    for (int q = 0; q < nranks; q++) memcpy(r->ref + (size_t)q * count * es, r->peerIn[q], count * es);
  } else {
    const void* slices[8];
    for (int q = 0; q < nranks; q++) slices[q] = r->peerIn[q] + (size_t)r->rank * count * es;
    arHostReference(dt, op, nranks, slices, r->ref, count);
  }
}

/* One all-gather (coll 0) or reduce-scatter (coll 1) of `count` elements per rank, checked
 * against the host reference; `expectOurs`: one launch of ours must be counted. Buffers start
 * `shift` elements into the allocations (shift 1: not 16-byte aligned). */
static void runCaseAt(struct rank* r, int coll, ncclDataType_t dt, ncclRedOp_t op, size_t count,
                      int inPlace, size_t shift, uint64_t seed, int expectOurs, const char* algo) {
  const size_t es = symmTypeSize(dt), n = (size_t)nranks;
  const size_t inCount = coll == 0 ? count : n * count, outCount = coll == 0 ? n * count : count;
  for (int q = 0; q < nranks; q++)
    arFillInput(dt, op, nranks, q, seed, 0, r->peerIn[q], inCount);
  /* Inputs where the call reads them; outputs poisoned. */
  CUDA_OK(cudaMemsetAsync(r->recv, 0xff, bufBytes, r->stream));
  CUDA_OK(cudaMemsetAsync(r->send, 0xee, bufBytes, r->stream));
  char* in = (coll == 0 && inPlace ? r->recv + (size_t)r->rank * count * es : r->send) + shift * es;
  char* out = (coll == 1 && inPlace ? r->send + (size_t)r->rank * count * es : r->recv) + shift * es;
  noteProgress(r->rank, "inputs", algo, coll, count, -1);
  CUDA_OK(cudaMemcpyAsync(in, r->peerIn[r->rank], inCount * es, cudaMemcpyHostToDevice, r->stream));
  CUDA_OK(cudaStreamSynchronize(r->stream));
  pthread_barrier_wait(&barrier); /* nobody's kernel reads a peer's input before it is written */
  noteProgress(r->rank, "call", algo, coll, count, -1);
  const uint64_t before = ours(r->comm);
  ncclResult_t res = coll == 0 ? ncclAllGather(in, out, count, dt, r->comm, r->stream)
                               : ncclReduceScatter(in, out, count, dt, op, r->comm, r->stream);
  TCHECK_EQ_INT(res, ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(r->stream));
  if (expectOurs && count > 0) TCHECK_EQ_INT(ours(r->comm) - before, 1);
  noteProgress(r->rank, "check", algo, coll, count, -1);
  CUDA_OK(cudaMemcpy(r->hostOut, out, outCount * es, cudaMemcpyDeviceToHost));
  expectedOutput(r, coll, dt, op, count);
  char label[160];
  snprintf(label, sizeof(label), "rank %d %s %s %s %s count %zu %s%s", r->rank,
           coll == 0 ? "all-gather" : "reduce-scatter", algo, arTypeName(dt),
           coll == 0 ? "-" : arOpName(op), count, inPlace ? "in place" : "out of place",
           shift != 0 ? " unaligned" : "");
  TCHECK_EQ_INT(arCompare(dt, r->ref, r->hostOut, outCount, -1.0, label), 0);
  pthread_barrier_wait(&barrier); /* outputs read before anybody's next call poisons them */
}

static void runCase(struct rank* r, int coll, ncclDataType_t dt, ncclRedOp_t op, size_t count,
                    int inPlace, uint64_t seed, int expectOurs, const char* algo) {
  runCaseAt(r, coll, dt, op, count, inPlace, 0, seed, expectOurs, algo);
}

static const size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 64, 127, 1000, 4099, 16384, 65537, 262144};

/* Forces `algo` for all-gather (coll 0) or reduce-scatter (coll 1); multimem runs emulated
 * (peer loads and stores: these machines never create multicast objects). */
static void useAlgo(struct rank* r, int coll, const char* algo) {
  noteProgress(r->rank, "algorithm set", algo, coll, 0, 0);
  setAlgo(r, "SYMMCOLL_MULTIMEM_EMULATE", strcmp(algo, "multimem") == 0 ? "1" : "0");
  setAlgo(r, coll == 0 ? "SYMMCOLL_ALLGATHER_ALGO" : "SYMMCOLL_REDUCESCATTER_ALGO", algo);
}

static void sweep(struct rank* r, int coll, const char* algo) {
  useAlgo(r, coll, algo);
  const int lamport = strcmp(algo, "lamport") == 0;
  const enum symmColl which = coll == 0 ? SYMM_COLL_ALLGATHER : SYMM_COLL_REDUCESCATTER;
  uint64_t seed = seed0 + (uint64_t)coll * 1000003u;
  for (int dt = 0; dt < (int)ncclNumTypes; dt++) {
    const size_t es = symmTypeSize((ncclDataType_t)dt);
    for (int op = 0; op < (coll == 0 ? 1 : (int)ncclNumOps); op++) {
      if (quick && coll == 1 && dt % 3 != op % 3 && op != ncclSum) continue;
      for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const size_t count = sizes[k];
        if (quick && count > 65537) continue;
        /* Lamport carries one rank's share of at most symmLamportMaxBytes. */
        if (lamport && count * es > symmLamportMaxBytes(nranks)) continue;
        /* Multimem reduce-scatter exists for the types and ops the switch reduces; the others
         * go where the table sends them, checked all the same. */
        const int exists = symmAlgoExists(which, (enum symmAlgo)symmAlgoParse(algo),
                                          (ncclDataType_t)dt, (ncclRedOp_t)op);
        for (int inPlace = 0; inPlace < 2; inPlace++)
          runCase(r, coll, (ncclDataType_t)dt, (ncclRedOp_t)op, count, inPlace, seed++, exists,
                  algo);
      }
    }
  }
}

/* Whole buffers of 64 MiB (a power of two of bytes, several staging chunks, rounds or one
 * zero-copy launch) and an odd million elements per rank, fp32 sum and bf16 (avg for
 * reduce-scatter), in place and not. Full runs only. */
static void largeSweep(struct rank* r, int coll, const char* algo) {
  if (quick) return;
  useAlgo(r, coll, algo);
  const size_t counts[2] = {LARGE_BYTES / 4 / (size_t)nranks, 1000003};
  uint64_t seed = seed0 + 424242u + (uint64_t)coll;
  for (int k = 0; k < 2; k++)
    for (int t = 0; t < 2; t++) {
      const ncclDataType_t dt = t == 0 ? ncclFloat32 : ncclBfloat16;
      const ncclRedOp_t op = t == 0 || coll == 0 ? ncclSum : ncclAvg;
      for (int inPlace = 0; inPlace < 2; inPlace++)
        runCase(r, coll, dt, op, counts[k], inPlace, seed++, 1, algo);
    }
}

/* Push and pull in rounds inside one launch (src/algos/rounds.cuh), with the round size set by
 * SYMMCOLL_AR_ROUND_BYTES = `roundBytes`: every type, counts that give 1, 2, 3, 7 and 40 rounds
 * (and exactly 3 full ones), in place and not, aligned and not; reduce-scatter with sum, avg and
 * one more op per type. The counts follow the launcher's slice bound (launch.cu,
 * gatherScatterSliceMax; the knob is the smaller bound here) rounded to whole vectors as the
 * kernel's plan does for small messages; the check holds whatever the real round count. */
static void roundsSweep(struct rank* r, int coll, const char* algo, size_t roundBytes) {
  useAlgo(r, coll, algo);
  uint64_t seed = seed0 + 5550000u + (uint64_t)coll * 100003u;
  for (int dt = 0; dt < (int)ncclNumTypes; dt++) {
    const size_t es = symmTypeSize((ncclDataType_t)dt), vec = 16 / es;
    size_t sliceMax = roundBytes / ((size_t)nranks * es);
    if (sliceMax < vec) sliceMax = vec;
    const size_t s = sliceMax / vec * vec;
    const size_t counts[] = {1, s - 1, 2 * s - 1, 3 * s - 1, 3 * s, 7 * s - 3,
                             40 * s - 1};
    const ncclRedOp_t ops[3] = {ncclSum, ncclAvg, (ncclRedOp_t)(ncclProd + dt % 3)};
    for (int o = 0; o < (coll == 0 ? 1 : 3); o++)
      for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        if (counts[k] * es * (size_t)nranks + 16 > bufBytes) continue;
        for (int inPlace = 0; inPlace < 2; inPlace++)
          for (size_t shift = 0; shift < 2; shift++)
            runCaseAt(r, coll, (ncclDataType_t)dt, ops[o], counts[k], inPlace, shift, seed++, 1,
                      algo);
      }
  }
}

/* More rounds than one launch takes (launch.h, kMaxRounds): 16-byte rounds (one vector per
 * round), so a call of 5000 vectors and a bit runs as several launches. */
static void splitSweep(struct rank* r, int coll, const char* algo) {
  useAlgo(r, coll, algo);
  setAlgo(r, "SYMMCOLL_AR_ROUND_BYTES", "16");
  uint64_t seed = seed0 + 6660000u + (uint64_t)coll;
  const ncclDataType_t types[2] = {ncclInt8, ncclFloat32};
  for (int t = 0; t < 2; t++) {
    const size_t count = 5000 * (16 / symmTypeSize(types[t])) + 3;
    for (int inPlace = 0; inPlace < 2; inPlace++)
      runCaseAt(r, coll, types[t], ncclSum, count, inPlace, (size_t)inPlace, seed++, 1, algo);
  }
  setAlgo(r, "SYMMCOLL_AR_ROUND_BYTES", "0");
}

/* A graph of our calls, replayed with new input written between replays: each replay reads the
 * data the input holds then (nothing is baked into the graph but addresses). */
static void graphTest(struct rank* r, int coll, const char* algo) {
  useAlgo(r, coll, algo);
  const ncclDataType_t dt = ncclFloat32;
  const size_t count = 5003, es = 4, n = (size_t)nranks;
  const size_t inCount = coll == 0 ? count : n * count, outCount = coll == 0 ? n * count : count;
  runCase(r, coll, dt, ncclSum, count, 0, seed0 + 77, 1, algo); /* eager first */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  noteProgress(r->rank, "graph capture and upload", algo, coll, count, 0);
  CUDA_OK(cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < 3; k++) {
    ncclResult_t res = coll == 0 ? ncclAllGather(r->send, r->recv, count, dt, r->comm, r->stream)
                                 : ncclReduceScatter(r->send, r->recv, count, dt, ncclSum, r->comm, r->stream);
    TCHECK_EQ_INT(res, ncclSuccess);
  }
  CUDA_OK(cudaStreamEndCapture(r->stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  /* Uploaded first: see test/core/README.md, "Graph uploads". */
  CUDA_OK(cudaGraphUpload(exec, r->stream));
  CUDA_OK(cudaStreamSynchronize(r->stream));
  /* No replay (its kernels spin until every rank's arrives) before every rank has instantiated:
   * with ranks sharing one GPU, an instantiation can wait in the driver for that GPU's kernels
   * (test_allreduce's graph test hung so with 5 ranks on one H200). */
  pthread_barrier_wait(&barrier);
  const int replays = quick ? 50 : 500;
  for (int it = 0; it < replays; it++) {
    const uint64_t seed = seed0 + 1000 + (uint64_t)it;
    for (int q = 0; q < nranks; q++) arFillInput(dt, ncclSum, nranks, q, seed, 0, r->peerIn[q], inCount);
    CUDA_OK(cudaMemcpyAsync(r->send, r->peerIn[r->rank], inCount * es, cudaMemcpyHostToDevice, r->stream));
    CUDA_OK(cudaMemsetAsync(r->recv, 0xff, outCount * es, r->stream));
    noteProgress(r->rank, "graph replay", algo, coll, count, it);
    CUDA_OK(cudaGraphLaunch(exec, r->stream));
    CUDA_OK(cudaStreamSynchronize(r->stream));
    noteProgress(r->rank, "graph replay check", algo, coll, count, it);
    CUDA_OK(cudaMemcpy(r->hostOut, r->recv, outCount * es, cudaMemcpyDeviceToHost));
    expectedOutput(r, coll, dt, ncclSum, count);
    TCHECK_EQ_INT(arCompare(dt, r->ref, r->hostOut, outCount, -1.0, "graph replay"), 0);
    pthread_barrier_wait(&barrier); /* every rank checked before the next input is written */
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
}

/* The table's own picks on both sides of its steps: all-gathers and reduce-scatters whose whole
 * message (symmCollBytes) is 256 KiB-4 MiB, where the built-in rows step (Lamport to push or
 * pull, on a pair at 1 MiB), or one element per rank past it (those unaligned), bf16 and float,
 * in place and not. Ours or forwarded, as the table says for this world; the result is what
 * counts. */
static void tableSteps(struct rank* r) {
  static const size_t stepBytes[] = {256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20};
  uint64_t seed = seed0 + 8880000u;
  for (int coll = 0; coll < 2; coll++) {
    useAlgo(r, coll, "auto");
    for (int t = 0; t < 2; t++) {
      const ncclDataType_t dt = t == 0 ? ncclBfloat16 : ncclFloat32;
      const size_t es = symmTypeSize(dt);
      for (size_t k = 0; k < sizeof(stepBytes) / sizeof(stepBytes[0]); k++) {
        const size_t atStep = stepBytes[k] / ((size_t)nranks * es);
        for (size_t past = 0; past < 2; past++) {
          const size_t count = atStep + past;
          if ((size_t)nranks * (count + 1) * es > bufBytes) continue;
          for (int inPlace = 0; inPlace < 2; inPlace++)
            runCaseAt(r, coll, dt, ncclSum, count, inPlace, past, seed++, 0, "auto");
        }
      }
    }
  }
}

/* All three collectives mixed with a forwarded one (broadcast, which only NCCL runs), the
 * tuning file choosing algorithms by size, every result checked. The same pseudo-random
 * sequence on every rank. */
static void soak(struct rank* r) {
  setAlgo(r, "SYMMCOLL_ALLGATHER_ALGO", "auto");
  setAlgo(r, "SYMMCOLL_REDUCESCATTER_ALGO", "auto");
  setAlgo(r, "SYMMCOLL_ALLREDUCE_ALGO", "auto");
  uint64_t x = seed0 | 1;
  for (long k = 0; k < soakCalls; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int coll = (int)(x % 4); /* 0 all-gather, 1 reduce-scatter, 2 all-reduce, 3 broadcast */
    const ncclDataType_t dt = (ncclDataType_t)((x >> 8) % ncclNumTypes);
    const ncclRedOp_t op = (ncclRedOp_t)((x >> 16) % ncclNumOps);
    const size_t count = 1 + (x >> 24) % 3000;
    const int inPlace = (int)((x >> 40) & 1);
    noteProgress(r->rank, "soak", "auto", coll, count, k);
    if (coll < 2) {
      runCase(r, coll, dt, op, count, inPlace, x, 0, "auto");
      continue;
    }
    const size_t es = symmTypeSize(dt);
    if (coll == 3) {
      const int root = (int)((x >> 44) % (uint64_t)nranks);
      arFillInput(dt, ncclSum, nranks, root, x, 0, r->peerIn[root], count);
      CUDA_OK(cudaMemsetAsync(r->recv, 0xff, count * es, r->stream));
      CUDA_OK(cudaMemsetAsync(r->send, 0xee, count * es, r->stream));
      if (r->rank == root)
        CUDA_OK(cudaMemcpyAsync(r->send, r->peerIn[root], count * es, cudaMemcpyHostToDevice,
                                r->stream));
      char* out = inPlace ? r->send : r->recv;
      const uint64_t before = ours(r->comm);
      CUDA_OK(cudaStreamSynchronize(r->stream));
      pthread_barrier_wait(&barrier); /* the root's input is written before anyone reads it */
      TCHECK_EQ_INT(ncclBroadcast(r->send, out, count, dt, root, r->comm, r->stream), ncclSuccess);
      CUDA_OK(cudaStreamSynchronize(r->stream));
      TCHECK_EQ_INT(ours(r->comm) - before, 0);
      CUDA_OK(cudaMemcpy(r->hostOut, out, count * es, cudaMemcpyDeviceToHost));
      TCHECK_EQ_INT(arCompare(dt, r->peerIn[root], r->hostOut, count, -1.0, "soak broadcast"), 0);
      pthread_barrier_wait(&barrier);
      continue;
    }
    for (int q = 0; q < nranks; q++) arFillInput(dt, op, nranks, q, x, 0, r->peerIn[q], count);
    CUDA_OK(cudaMemcpyAsync(r->send, r->peerIn[r->rank], count * es, cudaMemcpyHostToDevice, r->stream));
    CUDA_OK(cudaMemsetAsync(r->recv, 0xff, count * es, r->stream));
    char* out = inPlace ? r->send : r->recv;
    TCHECK_EQ_INT(ncclAllReduce(r->send, out, count, dt, op, r->comm, r->stream), ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(r->stream));
    CUDA_OK(cudaMemcpy(r->hostOut, out, count * es, cudaMemcpyDeviceToHost));
    const void* ins[8];
    for (int q = 0; q < nranks; q++) ins[q] = r->peerIn[q];
    arHostReference(dt, op, nranks, ins, r->ref, count);
    TCHECK_EQ_INT(arCompare(dt, r->ref, r->hostOut, count, -1.0, "soak all-reduce"), 0);
    pthread_barrier_wait(&barrier);
  }
  TCHECK(ours(r->comm) > 0);
}

/* ncclAvg pre-multiplies as NCCL does: fp16 inputs of 60000 average to 60000-ish on every
 * algorithm instead of overflowing to infinity (a sum first would exceed 65504). */
static void avgOverflow(struct rank* r) {
  static const char* const arAlgos[] = {"lamport", "oneshot", "twoshot"};
  const size_t count = 1024;
  uint16_t* host = (uint16_t*)r->hostIn;
  for (size_t i = 0; i < count; i++) host[i] = 0x7b53; /* 60000.0 in fp16 */
  for (int a = 0; a < 3; a++) {
    setAlgo(r, "SYMMCOLL_ALLREDUCE_ALGO", arAlgos[a]);
    CUDA_OK(cudaMemcpyAsync(r->send, host, count * 2, cudaMemcpyHostToDevice, r->stream));
    const uint64_t before = ours(r->comm);
    TCHECK_EQ_INT(ncclAllReduce(r->send, r->recv, count, ncclFloat16, ncclAvg, r->comm, r->stream),
                  ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(r->stream));
    TCHECK_EQ_INT(ours(r->comm) - before, 1);
    CUDA_OK(cudaMemcpy(r->hostOut, r->recv, count * 2, cudaMemcpyDeviceToHost));
    const void* ins[8];
    for (int q = 0; q < nranks; q++) ins[q] = host;
    arHostReference(ncclFloat16, ncclAvg, nranks, ins, r->ref, count);
    TCHECK_EQ_INT(arCompare(ncclFloat16, r->ref, r->hostOut, count, -1.0, "fp16 avg of 60000"), 0);
    const double got = arToDouble(ncclFloat16, r->hostOut, 0);
    TCHECK(got > 50000.0 && got < 65504.0);
    pthread_barrier_wait(&barrier);
  }
  setAlgo(r, "SYMMCOLL_ALLREDUCE_ALGO", "auto");
}

/* Launches of ours so far on a communicator, all and those that ran zero copy. */
struct launchCounts {
  uint64_t all, zeroCopy;
};

static struct launchCounts launchCounts(ncclComm_t comm) {
  return (struct launchCounts){ours(comm), oursZeroCopy(comm)};
}

/* The launches since `before`. */
static struct launchCounts launchesSince(ncclComm_t comm, struct launchCounts before) {
  const struct launchCounts now = launchCounts(comm);
  return (struct launchCounts){now.all - before.all, now.zeroCopy - before.zeroCopy};
}

/* Push and pull: the sweeps (in place included), the large sweeps and graph replays. */
static void pushPullSweeps(struct rank* r) {
  sweep(r, 0, "push");
  sweep(r, 1, "pull");
  largeSweep(r, 0, "push");
  largeSweep(r, 1, "pull");
  graphTest(r, 0, "push");
  graphTest(r, 1, "pull");
}

/* Inputs and outputs in registered symmetric windows (ncclMemAlloc + ncclCommWindowRegister).
 * SYMMCOLL_ZERO_COPY_MIN_BYTES=0: all-gather push and the copy engine store into peers' outputs
 * and reduce-scatter pull reads peers' inputs in place at every size, so every launch of ours
 * must have run zero copy. =-1: push and pull go through staging on the same buffers, so only
 * the copy engine's launches run zero copy. Then the default (16 MiB) over the large sweeps,
 * whose sizes lie on both sides of it. */
static void registeredTest(struct rank* r) {
  char *plainSend = r->send, *plainRecv = r->recv;
  void *send = NULL, *recv = NULL;
  ncclWindow_t sendWin = NULL, recvWin = NULL;
  TCHECK_EQ_INT(ncclMemAlloc(&send, bufBytes), ncclSuccess);
  TCHECK_EQ_INT(ncclMemAlloc(&recv, bufBytes), ncclSuccess);
  if (send == NULL || recv == NULL) return;
  TCHECK_EQ_INT(ncclCommWindowRegister(r->comm, send, bufBytes, &sendWin, NCCL_WIN_COLL_SYMMETRIC),
                ncclSuccess);
  TCHECK_EQ_INT(ncclCommWindowRegister(r->comm, recv, bufBytes, &recvWin, NCCL_WIN_COLL_SYMMETRIC),
                ncclSuccess);
  r->send = send;
  r->recv = recv;
  setAlgo(r, "SYMMCOLL_ZERO_COPY_MIN_BYTES", "0");
  struct launchCounts before = launchCounts(r->comm);
  sweep(r, 0, "ce");
  largeSweep(r, 0, "ce");
  graphTest(r, 0, "ce");
  pushPullSweeps(r);
  struct launchCounts ran = launchesSince(r->comm, before);
  TCHECK(ran.all > 0);
  TCHECK_EQ_INT((int)ran.zeroCopy, (int)ran.all);
  setAlgo(r, "SYMMCOLL_ZERO_COPY_MIN_BYTES", "-1");
  before = launchCounts(r->comm);
  sweep(r, 0, "ce");
  ran = launchesSince(r->comm, before);
  TCHECK_EQ_INT((int)ran.zeroCopy, (int)ran.all);
  before = launchCounts(r->comm);
  pushPullSweeps(r);
  ran = launchesSince(r->comm, before);
  TCHECK(ran.all > 0);
  TCHECK_EQ_INT((int)ran.zeroCopy, 0);
  setAlgo(r, "SYMMCOLL_ZERO_COPY_MIN_BYTES", NULL);
  if (!quick) {
    before = launchCounts(r->comm);
    largeSweep(r, 0, "push");
    largeSweep(r, 1, "pull");
    ran = launchesSince(r->comm, before);
    TCHECK(ran.zeroCopy > 0 && ran.zeroCopy < ran.all);
  }
  pthread_barrier_wait(&barrier);
  TCHECK_EQ_INT(ncclCommWindowDeregister(r->comm, sendWin), ncclSuccess);
  TCHECK_EQ_INT(ncclCommWindowDeregister(r->comm, recvWin), ncclSuccess);
  TCHECK_EQ_INT(ncclMemFree(send), ncclSuccess);
  TCHECK_EQ_INT(ncclMemFree(recv), ncclSuccess);
  r->send = plainSend;
  r->recv = plainRecv;
}

static void* rankMain(void* arg) {
  struct rank* r = arg;
  CUDA_OK(cudaSetDevice(r->rank % ndev));
  CUDA_OK(arLoadKernels());
  TCHECK_EQ_INT(ncclCommInitRank(&r->comm, nranks, uid, r->rank), ncclSuccess);
  __atomic_store_n(&rankOf[r->rank], r, __ATOMIC_RELEASE);
  CUDA_OK(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&r->send, bufBytes));
  CUDA_OK(cudaMalloc((void**)&r->recv, bufBytes));
  r->hostIn = malloc(bufBytes);
  r->hostOut = malloc(bufBytes);
  r->ref = malloc(bufBytes);
  for (int q = 0; q < nranks; q++) r->peerIn[q] = malloc(bufBytes);
  static const char* const agAlgos[] = {"lamport", "push", "ce", "multimem"};
  static const char* const rsAlgos[] = {"lamport", "pull", "multimem"};
  /* Small staging has no Lamport region: that algorithm does not exist there. */
  const int first = smallStaging ? 1 : 0;
  for (int a = first; a < 4; a++) sweep(r, 0, agAlgos[a]);
  for (int a = first; a < 3; a++) sweep(r, 1, rsAlgos[a]);
  for (int a = 1; a < 4; a++) largeSweep(r, 0, agAlgos[a]);
  for (int a = 1; a < 3; a++) largeSweep(r, 1, rsAlgos[a]);
  for (int a = first; a < 4; a++) graphTest(r, 0, agAlgos[a]);
  for (int a = first; a < 3; a++) graphTest(r, 1, rsAlgos[a]);
  /* Push and pull in many rounds per launch (an odd round size), graph replays of such calls,
   * and calls of more rounds than one launch takes. */
  setAlgo(r, "SYMMCOLL_AR_ROUND_BYTES", "4100");
  roundsSweep(r, 0, "push", 4100);
  roundsSweep(r, 1, "pull", 4100);
  graphTest(r, 0, "push");
  graphTest(r, 1, "pull");
  setAlgo(r, "SYMMCOLL_AR_ROUND_BYTES", "0");
  splitSweep(r, 0, "push");
  splitSweep(r, 1, "pull");
  /* The copy engine in many rounds per call (an odd round size, rounded to whole elements). */
  setAlgo(r, "SYMMCOLL_CE_ROUND_BYTES", "4100");
  sweep(r, 0, "ce");
  graphTest(r, 0, "ce");
  setAlgo(r, "SYMMCOLL_CE_ROUND_BYTES", "0");
  registeredTest(r);
  setAlgo(r, "SYMMCOLL_MULTIMEM_EMULATE", "0");
  avgOverflow(r);
  tableSteps(r);
  soak(r);
  pthread_barrier_wait(&barrier);
  __atomic_store_n(&rankOf[r->rank], NULL, __ATOMIC_RELEASE);
  TCHECK_EQ_INT(ncclCommDestroy(r->comm), ncclSuccess);
  CUDA_OK(cudaStreamDestroy(r->stream));
  CUDA_OK(cudaFree(r->send));
  CUDA_OK(cudaFree(r->recv));
  free(r->hostIn);
  free(r->hostOut);
  free(r->ref);
  for (int q = 0; q < nranks; q++) free(r->peerIn[q]);
  return NULL;
}

int main(int argc, char** argv) {
  watchdogReport = reportProgress;
  watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
  harnessManyStreamsPerGpu();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  if (argc < 2 || (nranks = atoi(argv[1])) < 2 || nranks > 8) {
    fprintf(stderr, "usage: test_collectives RANKS(2..8) [--quick] [--small-staging] [--soak CALLS] "
                    "[--seed S]\n");
    return 2;
  }
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--soak") && i + 1 < argc) soakCalls = atol(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed0 = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--small-staging")) smallStaging = 1;
  }
  /* Read at communicator setup: staging halves of 512 KiB, no Lamport region, so push and pull
   * take several rounds from a few hundred KiB on, and every large case many. */
  if (smallStaging) setenv("SYMMCOLL_BUFFER_BYTES", "1048576", 1);
  if (!quick) bufBytes = LARGE_BYTES;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("test_collectives: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  if (symmRealLoad() != ncclSuccess || dlsym(symmReal.handle, "symmTestBootstrapIsFake") == NULL) {
    printf("test_collectives: SYMMCOLL_NCCL_LIB must name the test bootstrap (ranks are threads), "
           "skipped\n");
    return TEST_SKIP_CODE;
  }
  /* Sizes to every algorithm in the soak: the tuner reads this file at communicator setup. */
  char path[64];
  snprintf(path, sizeof(path), "/tmp/symmcoll_test_collectives_%d.txt", (int)getpid());
  FILE* f = fopen(path, "w");
  if (f == NULL) return 2;
  fprintf(f, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
             "allreduce lamport<=1K oneshot<=4K twoshot<=inf\n"
             "allgather lamport<=8K ce<=32K push<=inf\nreducescatter lamport<=8K pull<=inf\n");
  fclose(f);
  setenv("SYMMCOLL_TUNING_FILE", path, 1);
  TCHECK_EQ_INT(ncclGetUniqueId(&uid), ncclSuccess);
  pthread_barrier_init(&barrier, NULL, (unsigned)nranks);
  struct rank ranks[8];
  pthread_t threads[8];
  memset(ranks, 0, sizeof(ranks));
  for (int q = 0; q < nranks; q++) {
    ranks[q].rank = q;
    pthread_create(&threads[q], NULL, rankMain, &ranks[q]);
  }
  for (int q = 0; q < nranks; q++) pthread_join(threads[q], NULL);
  unlink(path);
  return harnessReport("test_collectives");
}
