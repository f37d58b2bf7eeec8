/* SPDX-License-Identifier: Apache-2.0 */
/* GPU test: one thread drives every local GPU (ncclCommInitAll, as nccl-tests -g N does), with
 * the current device set to another GPU before each call. Needs two or more GPUs and the real
 * NCCL (exit 77 otherwise).
 *   test_one_thread mixed CALLS   eager calls and graph replays of all three collectives, count 0,
 *                                 odd counts, in place and out of place, every result checked
 *   test_one_thread nodes         a capture's nodes: one kernel per call of ours plus two event
 *                                 nodes per graph (none with NCCL_GRAPH_MIXING_SUPPORT=0); none
 *                                 for empty collectives, forwarded or ours
 *   test_one_thread captures      six captures interleaved on one communicator, one of them forked
 *                                 onto a second stream: results and node counts
 *   test_one_thread reregister    a graph reading an ncclCommRegister'ed input, replayed after that
 *                                 region was deregistered and another registered in its place
 *   test_one_thread streams       NCCL's order across streams: a graph of a forwarded broadcast
 *                                 captured before staging existed, replayed beside eager calls of
 *                                 ours on another stream; a group of ours on two streams; a
 *                                 group of ours and a forwarded broadcast on two streams
 *   test_one_thread ce-captures   (SYMMCOLL_ALLGATHER_ALGO=ce) copy-engine all-gathers in two
 *                                 open captures and eagerly beside them: results of replays and
 *                                 of the eager calls
 *   test_one_thread capture-mix   a group mixing an uncaptured forwarded call and a captured one
 *                                 of ours on each communicator: ncclInvalidUsage, nothing runs,
 *                                 the communicators work afterwards
 *   test_one_thread nonblocking-windows   non-blocking communicators, each rank's window
 *                                 registered without a group: no call waits for the next rank,
 *                                 the windows are mapped, all-reduces in place on them right */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "nccl_api.h"
#include "param.h"
#include "transport.h"

#define CUDA_OK(x) CHECK_EQ_INT((x), cudaSuccess)
#define NCCL_OK(x) CHECK_EQ_INT((x), ncclSuccess)
#define MAX_GPUS 8

enum coll { AR, AG, RS };
static const char* const collNames[] = {"all-reduce", "all-gather", "reduce-scatter"};

static int nranks;
static ncclComm_t comms[MAX_GPUS];
static cudaStream_t streams[MAX_GPUS];

/* One call: its collective, count (NCCL's argument), placement and its own device memory. */
struct call {
  enum coll coll;
  size_t count;
  int inPlace;
  int salt;
  float* in[MAX_GPUS];  /* input as passed (inside `out` when in place) */
  float* out[MAX_GPUS]; /* output */
};

/* Integers small enough that every float sum is exact in any order. */
static float value(int rank, size_t i, int salt) {
  return (float)((rank + 1) * (int)((i + (size_t)salt) % 13 + 1));
}

static size_t inCount(const struct call* c) { return c->coll == RS ? c->count * (size_t)nranks : c->count; }
static size_t outCount(const struct call* c) { return c->coll == AG ? c->count * (size_t)nranks : c->count; }

/* Device memory for a call on every rank (the output, plus the input unless in place). */
static void allocCall(struct call* c) {
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    const size_t outN = outCount(c) > 0 ? outCount(c) : 1, inN = inCount(c) > 0 ? inCount(c) : 1;
    CUDA_OK(cudaMalloc((void**)&c->out[r], outN * sizeof(float)));
    if (!c->inPlace) {
      CUDA_OK(cudaMalloc((void**)&c->in[r], inN * sizeof(float)));
    } else {
      /* NCCL's in-place layouts: all-gather's input is our slot of the output, reduce-scatter's
       * output our slice of the input. */
      if (c->coll == RS) {
        float* whole = NULL;
        CUDA_OK(cudaMalloc((void**)&whole, inN * sizeof(float)));
        cudaFree(c->out[r]);
        c->in[r] = whole;
        c->out[r] = whole + (size_t)r * c->count;
      } else {
        c->in[r] = c->coll == AG ? c->out[r] + (size_t)r * c->count : c->out[r];
      }
    }
  }
}

static void freeCall(struct call* c) {
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    if (c->inPlace && c->coll == RS) CUDA_OK(cudaFree(c->in[r]));
    else CUDA_OK(cudaFree(c->out[r]));
    if (!c->inPlace) CUDA_OK(cudaFree(c->in[r]));
  }
}

static float* hostBuf;
static size_t hostCap;
static float* host(size_t n) {
  if (n > hostCap) {
    free(hostBuf);
    hostCap = n;
    hostBuf = malloc(n * sizeof(float));
  }
  return hostBuf;
}

/* Fresh input, poisoned output (all ones: a NaN pattern no result equals), on each stream. */
static void prepare(const struct call* c) {
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    const size_t outN = outCount(c), inN = inCount(c);
    if (outN > 0) CUDA_OK(cudaMemsetAsync(c->out[r], 0xff, outN * sizeof(float), streams[r]));
    float* h = host(inN > 0 ? inN : 1);
    for (size_t i = 0; i < inN; i++) h[i] = value(r, i, c->salt);
    if (inN > 0)
      CUDA_OK(cudaMemcpyAsync(c->in[r], h, inN * sizeof(float), cudaMemcpyHostToDevice, streams[r]));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
  }
}

/* Issues the call on every rank in one group, each with another GPU current. */
static ncclResult_t issue(const struct call* c, int r) {
  CUDA_OK(cudaSetDevice((r + 1) % nranks));
  switch (c->coll) {
    case AR: return ncclAllReduce(c->in[r], c->out[r], c->count, ncclFloat32, ncclSum, comms[r], streams[r]);
    case AG: return ncclAllGather(c->in[r], c->out[r], c->count, ncclFloat32, comms[r], streams[r]);
    default: return ncclReduceScatter(c->in[r], c->out[r], c->count, ncclFloat32, ncclSum, comms[r], streams[r]);
  }
}

static void issueAll(const struct call* c) {
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) NCCL_OK(issue(c, r));
  NCCL_OK(ncclGroupEnd());
}

/* Wrong elements of the call's outputs on every rank (streams synchronized here). */
static long wrongOf(const struct call* c) {
  long wrong = 0;
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    const size_t n = outCount(c);
    if (n == 0) continue;
    float* h = host(n);
    CUDA_OK(cudaMemcpy(h, c->out[r], n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      if (c->coll == AR) {
        for (int q = 0; q < nranks; q++) want += value(q, i, c->salt);
      } else if (c->coll == AG) {
        want = value((int)(i / c->count), i % c->count, c->salt);
      } else {
        for (int q = 0; q < nranks; q++) want += value(q, (size_t)r * c->count + i, c->salt);
      }
      if (h[i] != want) {
        if (wrong < 3)
          fprintf(stderr, "%s count %zu%s rank %d: [%zu] = %g, want %g\n", collNames[c->coll],
                  c->count, c->inPlace ? " in place" : "", r, i, (double)h[i], (double)want);
        wrong++;
      }
    }
  }
  return wrong;
}

static const size_t counts[] = {0, 1, 3, 7, 33, 255, 1001, 4097, 12289, 65537};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void makeCall(struct call* c, long i) {
  memset(c, 0, sizeof(*c));
  c->coll = (enum coll)(i % 3);
  /* Now and then a large one (two-shot, push/pull, forwarded: whatever the tuner picks). */
  c->count = i % 24 == 23 ? ((size_t)1 << 18) + 3 : counts[(i / 3) % NCOUNTS];
  c->inPlace = (int)((i / 7) % 2);
  c->salt = (int)(i % 11);
  allocCall(c);
}

static uint64_t oursOn(int r) {
  struct symmComm* c = symmCommFind(comms[r]);
  return c != NULL ? __atomic_load_n(&c->launches, __ATOMIC_RELAXED) : 0;
}

/* ---- modes --------------------------------------------------------------------------------- */

static void captureCalls(struct call* calls, int n, cudaGraph_t* graphs, uint64_t* ours);

/* Half the calls eager, half as replays of graphs of 12 calls (inputs refreshed between). */
static void runMixed(long calls) {
  long wrong = 0, done = 0;
  enum { POOL = 48 };
  struct call pool[POOL];
  for (int i = 0; i < POOL; i++) makeCall(&pool[i], i);
  uint64_t oursBefore = oursOn(0);
  for (long i = 0; done < calls / 2; i++, done++) {
    struct call* c = &pool[i % POOL];
    c->salt = (int)(i % 11);
    prepare(c);
    issueAll(c);
    wrong += wrongOf(c);
  }
  printf("eager: %ld calls, %ld wrong, %llu of ours on rank 0\n", done, wrong,
         (unsigned long long)(oursOn(0) - oursBefore));
  /* Graphs: calls [g*12, g*12+12) of the pool, captured on every rank's stream at once. */
  enum { PER_GRAPH = 12, GRAPHS = POOL / PER_GRAPH };
  cudaGraphExec_t execs[GRAPHS][MAX_GPUS];
  for (int g = 0; g < GRAPHS; g++) {
    cudaGraph_t graphs[MAX_GPUS];
    uint64_t ours[MAX_GPUS];
    /* Every capture ends before anything is instantiated (global capture mode). */
    captureCalls(&pool[g * PER_GRAPH], PER_GRAPH, graphs, ours);
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaGraphInstantiate(&execs[g][r], graphs[r], 0));
      CUDA_OK(cudaGraphUpload(execs[g][r], streams[r]));
      CUDA_OK(cudaStreamSynchronize(streams[r]));
      CUDA_OK(cudaGraphDestroy(graphs[r]));
    }
  }
  long replayed = 0, wrongGraph = 0;
  for (long rep = 0; replayed < calls - calls / 2; rep++) {
    const int g = (int)(rep % GRAPHS);
    for (int k = 0; k < PER_GRAPH; k++) {
      pool[g * PER_GRAPH + k].salt = (int)((rep + k) % 11);
      prepare(&pool[g * PER_GRAPH + k]);
    }
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaGraphLaunch(execs[g][r], streams[r]));
    }
    for (int k = 0; k < PER_GRAPH; k++) wrongGraph += wrongOf(&pool[g * PER_GRAPH + k]);
    replayed += PER_GRAPH;
  }
  printf("graphs: %ld calls replayed, %ld wrong\n", replayed, wrongGraph);
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(wrongGraph, 0);
  for (int g = 0; g < GRAPHS; g++)
    for (int r = 0; r < nranks; r++) CUDA_OK(cudaGraphExecDestroy(execs[g][r]));
  for (int i = 0; i < POOL; i++) freeCall(&pool[i]);
}

static size_t nodesOf(cudaGraph_t g) {
  size_t n = 0;
  CUDA_OK(cudaGraphGetNodes(g, NULL, &n));
  return n;
}

/* Captures `n` calls on every rank: the graphs (not destroyed) and how many were ours. */
static void captureCalls(struct call* calls, int n, cudaGraph_t* graphs, uint64_t* ours) {
  uint64_t before[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    before[r] = oursOn(r);
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeGlobal));
  }
  for (int k = 0; k < n; k++) issueAll(&calls[k]);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(streams[r], &graphs[r]));
    ours[r] = oursOn(r) - before[r];
  }
}

static void replayAndCheck(struct call* calls, int n, cudaGraph_t* graphs, int replays) {
  cudaGraphExec_t execs[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    CUDA_OK(cudaGraphUpload(execs[r], streams[r]));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
  }
  long wrong = 0;
  for (int rep = 0; rep < replays; rep++) {
    for (int k = 0; k < n; k++) {
      calls[k].salt = (rep * 5 + k) % 11;
      prepare(&calls[k]);
    }
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaGraphLaunch(execs[r], streams[r]));
    }
    for (int k = 0; k < n; k++) wrong += wrongOf(&calls[k]);
  }
  CHECK_EQ_INT(wrong, 0);
  for (int r = 0; r < nranks; r++) CUDA_OK(cudaGraphExecDestroy(execs[r]));
}

static int mixingOff(void) {
  const char* v = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  return v != NULL && v[0] == '0';
}

/* Small calls all of ours (the default table runs all three at these sizes): a graph holds one
 * kernel node per call and two event nodes (the capture's external wait and its record); a
 * graph of empty calls holds none. */
static void runNodes(void) {
  enum { N = 6 };
  struct call calls[N];
  const enum coll colls[N] = {AR, AG, RS, AR, AG, RS};
  const size_t cnt[N] = {255, 33, 33, 1001, 7, 1};
  for (int k = 0; k < N; k++) {
    memset(&calls[k], 0, sizeof(calls[k]));
    calls[k].coll = colls[k];
    calls[k].count = cnt[k];
    calls[k].inPlace = k % 2;
    allocCall(&calls[k]);
  }
  /* Staging is built by the first uncaptured call given to our kernels. */
  prepare(&calls[0]);
  issueAll(&calls[0]);
  CHECK_EQ_INT(wrongOf(&calls[0]), 0);
  cudaGraph_t graphs[MAX_GPUS];
  uint64_t ours[MAX_GPUS];
  captureCalls(calls, N, graphs, ours);
  const size_t events = mixingOff() ? 0 : 2;
  for (int r = 0; r < nranks; r++) {
    CHECK_EQ_INT(ours[r], N);
    CHECK_EQ_INT(nodesOf(graphs[r]), N + events);
    printf("rank %d: %d calls of ours captured, %zu nodes\n", r, (int)ours[r], nodesOf(graphs[r]));
  }
  replayAndCheck(calls, N, graphs, 20);
  for (int r = 0; r < nranks; r++) CUDA_OK(cudaGraphDestroy(graphs[r]));
  /* Empty collectives, forwarded or ours: NCCL drops them before it looks at the stream, so a
   * capture of nothing else holds no node (no ordering of ours either). */
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeGlobal));
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CHECK_EQ_INT(ncclBroadcast(calls[0].in[r], calls[0].out[r], 0, ncclFloat32, 0, comms[r],
                               streams[r]), ncclSuccess);
    CHECK_EQ_INT(ncclReduce(calls[0].in[r], calls[0].out[r], 0, ncclFloat32, ncclSum, 0, comms[r],
                            streams[r]), ncclSuccess);
    CHECK_EQ_INT(ncclAllReduce(calls[0].in[r], calls[0].out[r], 0, ncclFloat32, ncclSum, comms[r],
                               streams[r]), ncclSuccess);
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(streams[r], &graphs[r]));
    printf("rank %d: empty calls captured, %zu nodes\n", r, nodesOf(graphs[r]));
    CHECK_EQ_INT(nodesOf(graphs[r]), 0);
    CUDA_OK(cudaGraphDestroy(graphs[r]));
  }
  for (int k = 0; k < N; k++) freeCall(&calls[k]);
}

/* Six captures on every rank, calls issued round-robin into them; capture 0's second call is
 * issued on a forked stream (its order with the first comes from an edge we add). */
static void runCaptures(void) {
  enum { CAPS = 6, PER = 3 };
  struct call calls[CAPS][PER];
  cudaStream_t caps[CAPS][MAX_GPUS], fork[MAX_GPUS];
  cudaEvent_t forked[MAX_GPUS], joined[MAX_GPUS];
  for (int c = 0; c < CAPS; c++)
    for (int k = 0; k < PER; k++) {
      memset(&calls[c][k], 0, sizeof(calls[c][k]));
      calls[c][k].coll = (enum coll)((c + k) % 3);
      calls[c][k].count = counts[1 + (c * PER + k) % 6]; /* <= 1001: ours by default */
      calls[c][k].inPlace = (c + k) % 2;
      allocCall(&calls[c][k]);
    }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    for (int c = 0; c < CAPS; c++) CUDA_OK(cudaStreamCreateWithFlags(&caps[c][r], cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&fork[r], cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&forked[r], cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&joined[r], cudaEventDisableTiming));
  }
  prepare(&calls[0][0]);
  issueAll(&calls[0][0]); /* builds staging */
  CHECK_EQ_INT(wrongOf(&calls[0][0]), 0);
  cudaStream_t saved[MAX_GPUS];
  memcpy(saved, streams, sizeof(saved));
  for (int c = 0; c < CAPS; c++)
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaStreamBeginCapture(caps[c][r], cudaStreamCaptureModeRelaxed));
    }
  /* The fork leaves capture 0 before its first call: the second call, issued there, depends on
   * the first only through the edge the library adds. */
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaEventRecord(forked[r], caps[0][r]));
    CUDA_OK(cudaStreamWaitEvent(fork[r], forked[r], 0));
  }
  for (int k = 0; k < PER; k++)
    for (int c = 0; c < CAPS; c++) {
      for (int r = 0; r < nranks; r++) streams[r] = c == 0 && k == 1 ? fork[r] : caps[c][r];
      issueAll(&calls[c][k]);
      if (c == 0 && k == 1) {
        for (int r = 0; r < nranks; r++) {
          CUDA_OK(cudaSetDevice(r));
          CUDA_OK(cudaEventRecord(joined[r], fork[r]));
          CUDA_OK(cudaStreamWaitEvent(caps[0][r], joined[r], 0));
        }
      }
    }
  cudaGraph_t graphs[CAPS][MAX_GPUS];
  for (int c = 0; c < CAPS; c++)
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaStreamEndCapture(caps[c][r], &graphs[c][r]));
      /* Calls of ours are kernels; forwarded ones are NCCL's nodes: only the small ones here,
       * all of ours, so exactly one node per call plus the capture's two event nodes. */
      CHECK_EQ_INT(nodesOf(graphs[c][r]), PER + (mixingOff() ? 0 : 2));
    }
  for (int c = 0; c < CAPS; c++) {
    for (int r = 0; r < nranks; r++) streams[r] = caps[c][r];
    replayAndCheck(calls[c], PER, graphs[c], 5);
  }
  memcpy(streams, saved, sizeof(saved));
  for (int c = 0; c < CAPS; c++)
    for (int r = 0; r < nranks; r++) CUDA_OK(cudaGraphDestroy(graphs[c][r]));
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    for (int c = 0; c < CAPS; c++) CUDA_OK(cudaStreamDestroy(caps[c][r]));
    CUDA_OK(cudaStreamDestroy(fork[r]));
    CUDA_OK(cudaEventDestroy(forked[r]));
    CUDA_OK(cudaEventDestroy(joined[r]));
  }
  for (int c = 0; c < CAPS; c++)
    for (int k = 0; k < PER; k++) freeCall(&calls[c][k]);
}

/* An all-reduce captured while its input was ncclCommRegister'ed memory, replayed after that
 * region was deregistered and another registered (likely in the same slot): the replay must
 * still read the captured input. Run with SYMMCOLL_ALLREDUCE_ALGO=twoshot (the kernel that
 * reads registered inputs in place). */
static void runReregister(void) {
  const size_t count = 65536 + 5;
  struct call c;
  memset(&c, 0, sizeof(c));
  c.coll = AR;
  c.count = count;
  float* other[MAX_GPUS];
  void* handles[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclMemAlloc((void**)&c.in[r], count * sizeof(float)));
    NCCL_OK(ncclMemAlloc((void**)&other[r], count * sizeof(float)));
    CUDA_OK(cudaMalloc((void**)&c.out[r], count * sizeof(float)));
  }
  for (int r = 0; r < nranks; r++) NCCL_OK(ncclCommRegister(comms[r], c.in[r], count * sizeof(float), &handles[r]));
  /* Eager calls first: staging, and the peers' mappings of the registered input. */
  for (int i = 0; i < 5; i++) {
    c.salt = i;
    prepare(&c);
    issueAll(&c);
    CHECK_EQ_INT(wrongOf(&c), 0);
  }
  cudaGraph_t graphs[MAX_GPUS];
  uint64_t ours[MAX_GPUS];
  captureCalls(&c, 1, graphs, ours);
  replayAndCheck(&c, 1, graphs, 3);
  for (int r = 0; r < nranks; r++) NCCL_OK(ncclCommDeregister(comms[r], handles[r]));
  for (int r = 0; r < nranks; r++)
    NCCL_OK(ncclCommRegister(comms[r], other[r], count * sizeof(float), &handles[r]));
  /* The other region holds other numbers, and eager calls on it map it everywhere. */
  struct call o = c;
  for (int r = 0; r < nranks; r++) o.in[r] = other[r];
  for (int i = 0; i < 5; i++) {
    o.salt = 7 + i;
    prepare(&o);
    issueAll(&o);
    CHECK_EQ_INT(wrongOf(&o), 0);
  }
  replayAndCheck(&c, 1, graphs, 3);
  for (int r = 0; r < nranks; r++) NCCL_OK(ncclCommDeregister(comms[r], handles[r]));
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphDestroy(graphs[r]));
    NCCL_OK(ncclMemFree(c.in[r]));
    NCCL_OK(ncclMemFree(other[r]));
    CUDA_OK(cudaFree(c.out[r]));
  }
}

/* ---- non-blocking windows -------------------------------------------------------------------- */

/* Polls every communicator until none says ncclInProgress (at most 60 s): ncclSuccess or the
 * first other state. */
static ncclResult_t settleAll(const ncclComm_t* cs) {
  for (int polls = 0; polls < 600000; polls++) {
    ncclResult_t worst = ncclSuccess;
    for (int r = 0; r < nranks; r++) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t res = ncclCommGetAsyncError(cs[r], &state);
      if (res != ncclSuccess) return res;
      if (state != ncclSuccess && worst != ncclInProgress) worst = state;
      if (state == ncclInProgress) worst = ncclInProgress;
    }
    if (worst != ncclInProgress) return worst;
    usleep(100);
  }
  fprintf(stderr, "non-blocking communicators still ncclInProgress after 60 s\n");
  return ncclInProgress;
}

/* issueAll on non-blocking communicators: the group's end may say ncclInProgress. */
static void issueAllNonBlocking(const struct call* c) {
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) NCCL_OK(issue(c, r));
  const ncclResult_t end = ncclGroupEnd();
  CHECK(end == ncclSuccess || end == ncclInProgress);
}

/* Non-blocking communicators of every GPU, driven by this one thread: each rank's window is
 * registered without a group, one call after the other. NCCL returns at once (its registration
 * completes in its own thread with a barrier over every rank); ours must too, else the first
 * call waits for ranks this thread has not reached yet. Then the windows are mapped on every
 * rank and all-reduces in place on them come back right. */
static void runNonBlockingWindows(void) {
  ncclComm_t nb[MAX_GPUS] = {0};
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    const ncclResult_t res = ncclCommInitRankConfig(&nb[r], nranks, id, r, &config);
    CHECK(res == ncclSuccess || res == ncclInProgress);
  }
  const ncclResult_t end = ncclGroupEnd();
  CHECK(end == ncclSuccess || end == ncclInProgress);
  NCCL_OK(settleAll(nb));
  const size_t count = (1u << 20) + 7;
  struct call c;
  memset(&c, 0, sizeof(c));
  c.coll = AR;
  c.count = count;
  c.inPlace = 1;
  ncclWindow_t win[MAX_GPUS] = {0};
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclMemAlloc((void**)&c.out[r], count * sizeof(float)));
    c.in[r] = c.out[r];
  }
  /* A first call staged our kernels (the first call given to them builds staging). */
  ncclComm_t saved[MAX_GPUS];
  memcpy(saved, comms, sizeof(saved));
  memcpy(comms, nb, sizeof(comms));
  c.salt = 1;
  prepare(&c);
  issueAllNonBlocking(&c);
  NCCL_OK(settleAll(nb));
  CHECK_EQ_INT(wrongOf(&c), 0);
  NCCL_OK(settleAll(nb));
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    const ncclResult_t res = ncclCommWindowRegister(nb[r], c.out[r], count * sizeof(float), &win[r],
                                                    NCCL_WIN_COLL_SYMMETRIC);
    CHECK(res == ncclSuccess || res == ncclInProgress);
  }
  NCCL_OK(settleAll(nb));
  for (int r = 0; r < nranks; r++) {
    void* ptrs[SYMM_MAX_RANKS] = {0};
    CHECK(win[r] != NULL);
    CHECK_EQ_INT(symmTransportFindWindow(symmCommFind(nb[r]), c.out[r], count * sizeof(float), ptrs), 1);
    CHECK_EQ_INT(symmTransportUserRegMappedCount(symmCommFind(nb[r])), 0);
  }
  for (int i = 0; i < 3; i++) {
    c.salt = 2 + i;
    prepare(&c);
    issueAllNonBlocking(&c);
    NCCL_OK(settleAll(nb));
    CHECK_EQ_INT(wrongOf(&c), 0);
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    const ncclResult_t res = ncclCommWindowDeregister(nb[r], win[r]);
    CHECK(res == ncclSuccess || res == ncclInProgress);
  }
  NCCL_OK(settleAll(nb));
  memcpy(comms, saved, sizeof(comms));
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    NCCL_OK(ncclMemFree(c.out[r]));
    const ncclResult_t res = ncclCommDestroy(nb[r]);
    CHECK(res == ncclSuccess || res == ncclInProgress);
  }
}

/* ---- streams -------------------------------------------------------------------------------- */

static int32_t pattern(int byte) { return (int32_t)(0x01010101u * (uint32_t)byte); }

/* Elements of `dev` (count int32, read after a full device sync) that differ from `want`. */
static long wrongInts(int r, const int32_t* dev, size_t count, int32_t want) {
  int32_t* h = malloc(count * sizeof(*h));
  CHECK(h != NULL);
  if (h == NULL) return (long)count;
  CUDA_OK(cudaSetDevice(r));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, dev, count * sizeof(*h), cudaMemcpyDeviceToHost));
  long bad = 0;
  for (size_t i = 0; i < count; i++) bad += h[i] != want;
  free(h);
  return bad;
}

/* Holds a stream for 20 ms (a host function: the same delay on every GPU, whatever its speed). */
static void CUDART_CB holdStream(void* unused) {
  (void)unused;
  usleep(20000);
}

/* A broadcast (always forwarded) captured while no staging exists yet, then staging built by an
 * eager all-reduce of ours on a second stream. Each replay of the broadcast's graph is followed
 * at once by our all-reduce, on the second stream, of the broadcast's last elements (written
 * last): NCCL orders every operation of a communicator after the previous one whatever the
 * stream, so ours must see the broadcast's value on every rank (the non-roots start from 0). */
static void capturedBeforeStaging(cudaStream_t* side) {
  const size_t big = (size_t)64 << 20, tail = 1000; /* 256 MiB of int32, 4000 bytes of ours */
  int32_t* buf[MAX_GPUS];
  int32_t* sum[MAX_GPUS];
  cudaGraph_t graphs[MAX_GPUS];
  cudaGraphExec_t execs[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMalloc((void**)&buf[r], big * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void**)&sum[r], tail * sizeof(int32_t)));
    struct symmComm* c = symmCommFind(comms[r]);
    /* Ours will run here, and staging does not exist yet. */
    CHECK(c != NULL && c->transport != NULL && symmTransportPeers(c) == NULL);
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeGlobal));
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++)
    NCCL_OK(ncclBroadcast(buf[r], buf[r], big, ncclInt32, 0, comms[r], streams[r]));
  NCCL_OK(ncclGroupEnd());
  /* Every capture ends before anything is instantiated (global capture mode). */
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(streams[r], &graphs[r]));
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    CUDA_OK(cudaGraphUpload(execs[r], streams[r]));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
  }
  /* Staging, from an eager all-reduce of ours on the second stream. */
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMemsetAsync(sum[r], 1, tail * sizeof(int32_t), side[r]));
    CUDA_OK(cudaStreamSynchronize(side[r]));
  }
  const uint64_t ours0 = oursOn(0);
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++)
    NCCL_OK(ncclAllReduce(sum[r], sum[r], tail, ncclInt32, ncclSum, comms[r], side[r]));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < nranks; r++) CHECK_EQ_INT(wrongInts(r, sum[r], tail, pattern(nranks)), 0);
  CHECK(oursOn(0) > ours0); /* ours ran: staging exists now */
  long wrongRounds = 0;
  for (int round = 0; round < 10; round++) {
    const int byte = 2 + round;
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemsetAsync(buf[r], r == 0 ? byte : 0, big * sizeof(int32_t), streams[r]));
      CUDA_OK(cudaMemsetAsync(sum[r], 0xff, tail * sizeof(int32_t), side[r]));
      CUDA_OK(cudaDeviceSynchronize());
    }
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaGraphLaunch(execs[r], streams[r]));
    }
    const uint64_t before = oursOn(0);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < nranks; r++)
      NCCL_OK(ncclAllReduce(buf[r] + big - tail, sum[r], tail, ncclInt32, ncclSum, comms[r], side[r]));
    NCCL_OK(ncclGroupEnd());
    CHECK(oursOn(0) > before);
    long bad = 0;
    for (int r = 0; r < nranks; r++) bad += wrongInts(r, sum[r], tail, pattern(byte * nranks));
    wrongRounds += bad != 0;
  }
  printf("captured before staging: %ld of 10 rounds wrong\n", wrongRounds);
  CHECK_EQ_INT(wrongRounds, 0);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphExecDestroy(execs[r]));
    CUDA_OK(cudaGraphDestroy(graphs[r]));
    CUDA_OK(cudaFree(buf[r]));
    CUDA_OK(cudaFree(sum[r]));
  }
}

/* One group, two all-reduces of ours per rank: `a` on the rank's stream, `b` on a second one.
 * NCCL runs a group as if every operation were posted on every stream of the group: `a` waits
 * for the second stream's earlier work (a 20 ms hold, then the copy that writes a's input),
 * and the first stream's later work (a copy of b's output) waits for `b`. */
static void groupOnTwoStreams(cudaStream_t* side) {
  const size_t n = 1000;
  int32_t *inA[MAX_GPUS], *fresh[MAX_GPUS], *outA[MAX_GPUS], *inB[MAX_GPUS], *outB[MAX_GPUS];
  int32_t* copyB[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    int32_t** bufs[] = {&inA[r], &fresh[r], &outA[r], &inB[r], &outB[r], &copyB[r]};
    for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++)
      CUDA_OK(cudaMalloc((void**)bufs[k], n * sizeof(int32_t)));
  }
  long wrongA = 0, wrongB = 0;
  for (int round = 0; round < 10; round++) {
    /* Sums of at most 8 ranks stay below 2^31. */
    const int byteA = 1 + round, byteB = 5 + round;
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemset(inA[r], 0, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(fresh[r], byteA, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(inB[r], byteB, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(outA[r], 0xff, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(outB[r], 0xff, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(copyB[r], 0xff, n * sizeof(int32_t)));
      CUDA_OK(cudaDeviceSynchronize());
    }
    /* Late on every rank at once: each second stream holds for 20 ms, then writes a's input. */
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaLaunchHostFunc(side[r], holdStream, NULL));
      CUDA_OK(cudaMemcpyAsync(inA[r], fresh[r], n * sizeof(int32_t), cudaMemcpyDeviceToDevice, side[r]));
    }
    const uint64_t before = oursOn(0);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      NCCL_OK(ncclAllReduce(inA[r], outA[r], n, ncclInt32, ncclSum, comms[r], streams[r]));
      NCCL_OK(ncclAllReduce(inB[r], outB[r], n, ncclInt32, ncclSum, comms[r], side[r]));
    }
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemcpyAsync(copyB[r], outB[r], n * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                              streams[r]));
    }
    CHECK_EQ_INT((int)(oursOn(0) - before), 2);
    for (int r = 0; r < nranks; r++) {
      wrongA += wrongInts(r, outA[r], n, pattern(byteA * nranks)) != 0;
      wrongB += wrongInts(r, copyB[r], n, pattern(byteB * nranks)) != 0;
    }
  }
  printf("group on two streams: a wrong on %ld, b's copy wrong on %ld of %d rank-rounds\n",
         wrongA, wrongB, 10 * nranks);
  CHECK_EQ_INT(wrongA, 0);
  CHECK_EQ_INT(wrongB, 0);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    int32_t* bufs[] = {inA[r], fresh[r], outA[r], inB[r], outB[r], copyB[r]};
    for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++) CUDA_OK(cudaFree(bufs[k]));
  }
}

/* A group with an all-reduce of ours on the rank's stream and a forwarded broadcast (NCCL's) on
 * a second stream. NCCL joins every stream of the group, before and after; the real NCCL is only
 * given the broadcast's stream, so the library joins the other:
 *  - the broadcast's buffer is written on the first stream behind a 20 ms hold (the root's
 *    value on rank 0, junk elsewhere): every rank must end with the root's value;
 *  - the all-reduce is large (256 MiB, two-shot forced so that it is ours at any world size; far
 *    longer than the broadcast): a copy of its output's last elements on the second stream after
 *    the group must see them. */
static void groupWithForwarded(cudaStream_t* side) {
  const size_t n = 1000, big = (size_t)64 << 20;
  int32_t *bc[MAX_GPUS], *fresh[MAX_GPUS], *inA[MAX_GPUS], *outA[MAX_GPUS], *copyA[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    int32_t** bufs[] = {&bc[r], &fresh[r], &copyA[r]};
    for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++)
      CUDA_OK(cudaMalloc((void**)bufs[k], n * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void**)&inA[r], big * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void**)&outA[r], big * sizeof(int32_t)));
  }
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "twoshot", 1);
  symmParamResetAll();
  long wrongBc = 0, wrongA = 0;
  for (int round = 0; round < 10; round++) {
    const int byteBc = 40 + round, byteA = 1 + round;
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemset(bc[r], 0, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(fresh[r], r == 0 ? byteBc : 7, n * sizeof(int32_t)));
      CUDA_OK(cudaMemset(inA[r], byteA, big * sizeof(int32_t)));
      CUDA_OK(cudaMemset(outA[r], 0xff, big * sizeof(int32_t)));
      CUDA_OK(cudaMemset(copyA[r], 0xff, n * sizeof(int32_t)));
      CUDA_OK(cudaDeviceSynchronize());
    }
    /* The broadcast's buffer, on the first streams, late on every rank at once. */
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaLaunchHostFunc(streams[r], holdStream, NULL));
      CUDA_OK(cudaMemcpyAsync(bc[r], fresh[r], n * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                              streams[r]));
    }
    const uint64_t before = oursOn(0);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      NCCL_OK(ncclAllReduce(inA[r], outA[r], big, ncclInt32, ncclSum, comms[r], streams[r]));
      NCCL_OK(ncclBroadcast(bc[r], bc[r], n, ncclInt32, 0, comms[r], side[r]));
    }
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < nranks; r++) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemcpyAsync(copyA[r], outA[r] + big - n, n * sizeof(int32_t),
                              cudaMemcpyDeviceToDevice, side[r]));
    }
    CHECK_EQ_INT((int)(oursOn(0) - before), 1);
    for (int r = 0; r < nranks; r++) {
      wrongBc += wrongInts(r, bc[r], n, pattern(byteBc)) != 0;
      wrongA += wrongInts(r, copyA[r], n, pattern(byteA * nranks)) != 0;
    }
  }
  unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
  symmParamResetAll();
  printf("group with a forwarded call: broadcast wrong on %ld, all-reduce's copy wrong on %ld of "
         "%d rank-rounds\n", wrongBc, wrongA, 10 * nranks);
  CHECK_EQ_INT(wrongBc, 0);
  CHECK_EQ_INT(wrongA, 0);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    int32_t* bufs[] = {bc[r], fresh[r], inA[r], outA[r], copyA[r]};
    for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++) CUDA_OK(cudaFree(bufs[k]));
  }
}

/* Run first, while no staging exists. */
static void runStreams(void) {
  cudaStream_t side[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreateWithFlags(&side[r], cudaStreamNonBlocking));
  }
  capturedBeforeStaging(side);
  groupOnTwoStreams(side);
  groupWithForwarded(side);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamDestroy(side[r]));
  }
}

/* ---- copy-engine captures ------------------------------------------------------------------- */

/* Kernel, memcpy and stream memory-operation nodes of a graph. The driver's node type, not the
 * runtime's: cudaGraphNodeGetType has no type for the memory-operation nodes our barriers capture
 * as (cuStreamBatchMemOp) and fails on them with cudaErrorUnknown. */
typedef CUresult (*nodeTypeFn)(CUgraphNode, CUgraphNodeType*);
static void nodeKinds(cudaGraph_t g, size_t* kernels, size_t* memcpys, size_t* memops) {
  static nodeTypeFn nodeType;
  if (nodeType == NULL) {
    enum cudaDriverEntryPointQueryResult found;
    void* fn = NULL;
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuGraphNodeGetType", &fn, 12000, cudaEnableDefault,
                                             &found));
    CHECK(found == cudaDriverEntryPointSuccess && fn != NULL);
    memcpy(&nodeType, &fn, sizeof(nodeType)); /* ISO C has no object-to-function pointer cast */
  }
  *kernels = *memcpys = *memops = 0;
  size_t n = nodesOf(g);
  cudaGraphNode_t* nodes = malloc((n > 0 ? n : 1) * sizeof(*nodes));
  CHECK(nodes != NULL);
  if (nodes == NULL || nodeType == NULL) {
    free(nodes);
    return;
  }
  CUDA_OK(cudaGraphGetNodes(g, nodes, &n));
  for (size_t i = 0; i < n; i++) {
    CUgraphNodeType type;
    CHECK_EQ_INT(nodeType((CUgraphNode)nodes[i], &type), CUDA_SUCCESS);
    *kernels += type == CU_GRAPH_NODE_TYPE_KERNEL;
    *memcpys += type == CU_GRAPH_NODE_TYPE_MEMCPY;
    *memops += type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  }
  free(nodes);
}

/* A salt for fresh inputs: random, and another pattern than the call's last one (value() repeats
 * every 13 elements), so that a copy left out shows a stale value as well as the poison. */
static void freshSalt(struct call* c, unsigned* seed) {
  const int last = c->salt % 13;
  do {
    c->salt = (int)(rand_r(seed) % 100000);
  } while (c->salt % 13 == last);
}

/* prepare, issueAll and wrongOf work on `streams`: useStreams points them at `on` (each rank's
 * stream) until restoreStreams. */
static void useStreams(const cudaStream_t* on, cudaStream_t* saved) {
  memcpy(saved, streams, sizeof(streams));
  memcpy(streams, on, sizeof(streams));
}
static void restoreStreams(const cudaStream_t* saved) { memcpy(streams, saved, sizeof(streams)); }

/* The calls' fresh inputs and poisoned outputs, on `on`. */
static void prepareOn(struct call* calls, int n, cudaStream_t* on, unsigned* seed) {
  cudaStream_t saved[MAX_GPUS];
  useStreams(on, saved);
  for (int k = 0; k < n; k++) {
    freshSalt(&calls[k], seed);
    prepare(&calls[k]);
  }
  restoreStreams(saved);
}

/* Wrong elements of the calls' outputs, once `on` has drained. */
static long wrongOn(struct call* calls, int n, cudaStream_t* on) {
  cudaStream_t saved[MAX_GPUS];
  useStreams(on, saved);
  long wrong = 0;
  for (int k = 0; k < n; k++) wrong += wrongOf(&calls[k]);
  restoreStreams(saved);
  return wrong;
}

/* Issues the calls on `on` (every rank, one group per call). */
static void issueOn(struct call* calls, int n, cudaStream_t* on) {
  cudaStream_t saved[MAX_GPUS];
  useStreams(on, saved);
  for (int k = 0; k < n; k++) {
    const uint64_t before = oursOn(0);
    issueAll(&calls[k]);
    CHECK(oursOn(0) > before); /* ours, not forwarded */
  }
  restoreStreams(saved);
}

/* Eager calls on `on`, checked: wrong elements. */
static long eagerOn(struct call* calls, int n, cudaStream_t* on, unsigned* seed) {
  prepareOn(calls, n, on, seed);
  issueOn(calls, n, on);
  return wrongOn(calls, n, on);
}

static void launchOn(cudaGraphExec_t* execs, cudaStream_t* on) {
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphLaunch(execs[r], on[r]));
  }
}

/* Run with SYMMCOLL_ALLGATHER_ALGO=ce. The copy-engine all-gather copies our own part beside its
 * stream; eager calls do it on the transport's side stream, which a capture must not take: a
 * stream forked into a capture stays in it until the capture ends. On every rank: capture A on
 * s1 gets an all-gather; while it is open, an eager all-gather on s2 (checked at once) and
 * capture B on s3 with another one, then A's second call and B's second; B ends, then A. Both
 * graphs are replayed (each alone, or both launched before either is checked) with fresh inputs
 * and poisoned outputs, every output checked; then eager calls again. Odd counts, in place and
 * out of place (only out of place copies our part: in place it is there already). */
static void runCeCaptures(void) {
  enum { PER = 2, REPLAYS = 6 };
  const size_t countA[PER] = {4097, 33}, countB[PER] = {1001, 65537}, countE[PER] = {255, 7};
  struct call a[PER], b[PER], e[PER];
  for (int k = 0; k < PER; k++) {
    struct call* all[] = {&a[k], &b[k], &e[k]};
    const size_t cnt[] = {countA[k], countB[k], countE[k]};
    for (int i = 0; i < 3; i++) {
      memset(all[i], 0, sizeof(*all[i]));
      all[i]->coll = AG;
      all[i]->count = cnt[i];
      all[i]->inPlace = (k + i) % 2;
      allocCall(all[i]);
    }
  }
  cudaStream_t s1[MAX_GPUS], s2[MAX_GPUS], s3[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreateWithFlags(&s1[r], cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s2[r], cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s3[r], cudaStreamNonBlocking));
  }
  unsigned seed = (unsigned)getpid();
  printf("ce-captures: seed %u\n", seed);
  cudaStream_t s0[MAX_GPUS];
  memcpy(s0, streams, sizeof(s0));
  CHECK_EQ_INT(eagerOn(e, PER, s0, &seed), 0); /* builds staging */
  /* Relaxed, as runCaptures: the eager call's check synchronizes while the captures are open. */
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(s1[r], cudaStreamCaptureModeRelaxed));
  }
  issueOn(&a[0], 1, s1);
  /* Had capture A taken the side stream, this call's fork of it would fail or join capture A. */
  const long wrongEagerInside = eagerOn(&e[0], 1, s2, &seed);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(s3[r], cudaStreamCaptureModeRelaxed));
  }
  issueOn(&b[0], 1, s3);
  issueOn(&a[1], 1, s1);
  issueOn(&b[1], 1, s3);
  cudaGraph_t ga[MAX_GPUS], gb[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(s3[r], &gb[r]));
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(s1[r], &ga[r]));
  }
  printf("ce-captures: eager all-gather while capture A was open: %ld wrong\n", wrongEagerInside);
  CHECK_EQ_INT(wrongEagerInside, 0);
  /* The copy engine's calls launch no kernel: copies are memcpy nodes, barriers memory operations. */
  for (int r = 0; r < nranks; r++) {
    size_t kernels = 0, memcpys = 0, memops = 0;
    nodeKinds(ga[r], &kernels, &memcpys, &memops);
    CHECK_EQ_INT(kernels, 0);
    CHECK(memcpys > 0 && memops > 0);
    nodeKinds(gb[r], &kernels, &memcpys, &memops);
    CHECK_EQ_INT(kernels, 0);
    CHECK(memcpys > 0 && memops > 0);
  }
  cudaGraphExec_t xa[MAX_GPUS], xb[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphInstantiate(&xa[r], ga[r], 0));
    CUDA_OK(cudaGraphInstantiate(&xb[r], gb[r], 0));
    /* Uploaded before ranks replay at once (test/core/README.md, "Graph uploads"). */
    CUDA_OK(cudaGraphUpload(xa[r], s1[r]));
    CUDA_OK(cudaGraphUpload(xb[r], s3[r]));
    CUDA_OK(cudaDeviceSynchronize());
  }
  long wrongA = 0, wrongB = 0;
  for (int rep = 0; rep < REPLAYS; rep++) {
    if (rep % 2 == 0) {
      prepareOn(a, PER, s1, &seed);
      prepareOn(b, PER, s3, &seed);
      launchOn(xa, s1);
      launchOn(xb, s3);
      wrongA += wrongOn(a, PER, s1);
      wrongB += wrongOn(b, PER, s3);
    } else {
      prepareOn(a, PER, s1, &seed);
      launchOn(xa, s1);
      wrongA += wrongOn(a, PER, s1);
      prepareOn(b, PER, s3, &seed);
      launchOn(xb, s3);
      wrongB += wrongOn(b, PER, s3);
    }
  }
  const long wrongEagerAfter = eagerOn(e, PER, s2, &seed);
  printf("ce-captures: %d replays: A %ld wrong, B %ld wrong; eager after them %ld wrong\n",
         REPLAYS, wrongA, wrongB, wrongEagerAfter);
  CHECK_EQ_INT(wrongA, 0);
  CHECK_EQ_INT(wrongB, 0);
  CHECK_EQ_INT(wrongEagerAfter, 0);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaGraphExecDestroy(xa[r]));
    CUDA_OK(cudaGraphExecDestroy(xb[r]));
    CUDA_OK(cudaGraphDestroy(ga[r]));
    CUDA_OK(cudaGraphDestroy(gb[r]));
    CUDA_OK(cudaStreamDestroy(s1[r]));
    CUDA_OK(cudaStreamDestroy(s2[r]));
    CUDA_OK(cudaStreamDestroy(s3[r]));
  }
  for (int k = 0; k < PER; k++) {
    freeCall(&a[k]);
    freeCall(&b[k]);
    freeCall(&e[k]);
  }
}

/* NCCL's rule for a group: one communicator's calls use streams all uncaptured or all captured
 * by one graph. Per rank, a forwarded broadcast on the rank's (uncaptured) stream, then an
 * all-reduce of ours on a stream in capture: the all-reduce gets ncclInvalidUsage, and so does
 * ncclGroupEnd (the real NCCL, given only the broadcast, would not have noticed). Nothing ran: the
 * capture holds no node, and the broadcast's buffer keeps its value. No launch of ours was
 * dropped, so the communicators stay usable, as NCCL's do: a group of all-reduces afterwards
 * gives the right sums. */
static void runCaptureMix(void) {
  /* An all-reduce of ours first (Lamport at any world size): staging, so the broadcast is
   * ordered with ours. */
  struct call warm = {.coll = AR, .count = 1001, .salt = 3};
  allocCall(&warm);
  prepare(&warm);
  issueAll(&warm);
  CHECK_EQ_INT(wrongOf(&warm), 0);
  const size_t n = 4097;
  cudaStream_t captured[MAX_GPUS];
  float *bcast[MAX_GPUS], *arIn[MAX_GPUS], *arOut[MAX_GPUS];
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreateWithFlags(&captured[r], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void**)&bcast[r], n * sizeof(float)));
    CUDA_OK(cudaMalloc((void**)&arIn[r], n * sizeof(float)));
    CUDA_OK(cudaMalloc((void**)&arOut[r], n * sizeof(float)));
    CUDA_OK(cudaMemset(bcast[r], r + 1, n * sizeof(float))); /* a byte pattern per rank */
    CUDA_OK(cudaMemset(arIn[r], 0, n * sizeof(float)));
    CUDA_OK(cudaDeviceSynchronize());
  }
  const uint64_t before = oursOn(0);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamBeginCapture(captured[r], cudaStreamCaptureModeRelaxed));
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    NCCL_OK(ncclBroadcast(bcast[r], bcast[r], n, ncclFloat32, 0, comms[r], streams[r]));
    CHECK_EQ_INT(ncclAllReduce(arIn[r], arOut[r], n, ncclFloat32, ncclSum, comms[r], captured[r]),
                 ncclInvalidUsage);
  }
  CHECK_EQ_INT(ncclGroupEnd(), ncclInvalidUsage);
  CHECK_EQ_INT((int)(oursOn(0) - before), 0);
  for (int r = 0; r < nranks; r++) {
    cudaGraph_t g = NULL;
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamEndCapture(captured[r], &g));
    if (g != NULL) {
      CHECK_EQ_INT((int)nodesOf(g), 0);
      CUDA_OK(cudaGraphDestroy(g));
    }
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    unsigned char first = 0;
    CUDA_OK(cudaMemcpy(&first, bcast[r], 1, cudaMemcpyDeviceToHost));
    CHECK_EQ_INT(first, r + 1); /* the broadcast did not run */
  }
  /* The communicators still work. */
  prepare(&warm);
  issueAll(&warm);
  CHECK_EQ_INT(wrongOf(&warm), 0);
  printf("capture mix: refused as NCCL refuses it; the communicators work afterwards\n");
  freeCall(&warm);
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaFree(bcast[r]));
    CUDA_OK(cudaFree(arIn[r]));
    CUDA_OK(cudaFree(arOut[r]));
    CUDA_OK(cudaStreamDestroy(captured[r]));
  }
}

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  const char* mode = argc > 1 ? argv[1] : "mixed";
  const long calls = argc > 2 ? atol(argv[2]) : 2000;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    printf("test_one_thread: needs 2 or more GPUs (found %d): skipped\n", ndev);
    return TEST_SKIP_CODE;
  }
  nranks = ndev < MAX_GPUS ? ndev : MAX_GPUS;
  ncclResult_t res = ncclCommInitAll(comms, nranks, NULL);
  NCCL_OK(res);
  if (res != ncclSuccess) return harnessReport("test_one_thread");
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    struct symmComm* c = symmCommFind(comms[r]);
    printf("rank %d on GPU %d: our kernels %s\n", r, r,
           c != NULL && c->transport != NULL ? "active" : "inactive");
  }
  if (strcmp(mode, "mixed") == 0) runMixed(calls);
  else if (strcmp(mode, "nodes") == 0) runNodes();
  else if (strcmp(mode, "captures") == 0) runCaptures();
  else if (strcmp(mode, "reregister") == 0) runReregister();
  else if (strcmp(mode, "streams") == 0) runStreams();
  else if (strcmp(mode, "ce-captures") == 0) runCeCaptures();
  else if (strcmp(mode, "capture-mix") == 0) runCaptureMix();
  else if (strcmp(mode, "nonblocking-windows") == 0) runNonBlockingWindows();
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    CHECK(0);
  }
  for (int r = 0; r < nranks; r++) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamDestroy(streams[r]));
    NCCL_OK(ncclCommDestroy(comms[r]));
  }
  free(hostBuf);
  return harnessReport("test_one_thread");
}
