/* SPDX-License-Identifier: Apache-2.0 */
/* GPU, one process per GPU through the real NCCL (2..8 GPUs; exit 77 with fewer than 2):
 * captured all-gathers (push), reduce-scatters (pull) and all-reduces (two-shot writing the
 * peers' outputs) on plain buffers run in place on the peers' buffers
 * (src/transport/graphpeers.c), and every rank agrees: ncclMemAlloc buffers by
 * default, cudaMalloc buffers too with SYMMCOLL_GRAPH_ZERO_COPY=2 (legacy IPC, opt-in), neither
 * kind alone making any rank go in place where another rank's buffer cannot.
 *
 * For each case every rank captures the same calls, the test reads how many launches of ours
 * went in place (symmComm.zeroCopyLaunches, counted at capture), then replays the graph three
 * times with fresh random input and poisoned output and checks every element against a host
 * reference built from every rank's input (small integers in float: sums are exact). Cases:
 * odd and large counts, in place and out of place, buffers at an unaligned offset inside a
 * larger allocation, several calls per graph, buffers freed and allocated again (imports closed
 * and made anew), cudaMalloc and ncclMemAlloc buffers and both in one call. And where one rank
 * cannot take part, nobody does, and results stay right: a rank whose buffer comes from the
 * stream-ordered allocator (no IPC handle), a rank that issues its captured call inside a
 * group, a cudaMalloc buffer in the default mode. Knobs: SYMMCOLL_ALLGATHER_ALGO=push,
 * SYMMCOLL_REDUCESCATTER_ALGO=pull, SYMMCOLL_ALLREDUCE_ALGO=twoshot,
 * SYMMCOLL_ZERO_COPY_MIN_BYTES=0, SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES=0 and
 * SYMMCOLL_ZERO_COPY_MAX_BYTES=-1 for the small cases (set by the test, mode 2 then the default
 * mode), the defaults for the large ones (all-reduce from 8 MiB, the others from 16 MiB). */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "param.h"
#include "procs.h"

#define TCHECK(cond, ...) HARNESS_TCHECKF(cond, __VA_ARGS__)

#define CUDA_OK(call) PROCS_CUDA_OK(rank, call)
#define NCCL_OK(call) PROCS_NCCL_OK(rank, call)

enum { AG = 0, RS = 1, AR = 2 };
enum placement { OUT_OF_PLACE, IN_PLACE };
enum odd { NOTHING_ODD, STREAM_ORDERED, IN_A_GROUP };
/* Where the case's buffers come from: cudaMalloc (legacy IPC handles), ncclMemAlloc (VMM memory
 * of ours, passed as fds), or ncclMemAlloc on rank 0 only (both kinds in one exchange). */
enum alloc { CUDA_MALLOC, NCCL_MEM_ALLOC, MIXED };
static enum alloc allocKind;

static int rank, nranks;
static ncclComm_t comm;
static cudaStream_t stream;
/* Between cases: every rank process (procsRunRanks). */
static void barrier(void) { procsBarrier(); }

static uint64_t zeroCopies(void) {
  struct symmComm* c = symmCommFind(comm);
  return c != NULL ? __atomic_load_n(&c->zeroCopyLaunches, __ATOMIC_RELAXED) : 0;
}

/* `graphMode`: SYMMCOLL_GRAPH_ZERO_COPY (2: cudaMalloc buffers too), or -1 for its default (1:
 * ncclMemAlloc buffers only). Every rank sets the same. */
static void setKnobs(int forcePushPull, int graphMode) {
  if (forcePushPull) {
    setenv("SYMMCOLL_ALLGATHER_ALGO", "push", 1);
    setenv("SYMMCOLL_REDUCESCATTER_ALGO", "pull", 1);
    setenv("SYMMCOLL_ALLREDUCE_ALGO", "twoshot", 1);
    setenv("SYMMCOLL_ZERO_COPY_MIN_BYTES", "0", 1);
    setenv("SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES", "0", 1);
    setenv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "-1", 1);
  } else {
    unsetenv("SYMMCOLL_ALLGATHER_ALGO");
    unsetenv("SYMMCOLL_REDUCESCATTER_ALGO");
    unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
    unsetenv("SYMMCOLL_ZERO_COPY_MIN_BYTES");
    unsetenv("SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES");
    unsetenv("SYMMCOLL_ZERO_COPY_MAX_BYTES");
  }
  if (graphMode >= 0) {
    char v[8];
    snprintf(v, sizeof(v), "%d", graphMode);
    setenv("SYMMCOLL_GRAPH_ZERO_COPY", v, 1);
  } else {
    unsetenv("SYMMCOLL_GRAPH_ZERO_COPY");
  }
  symmParamResetAll();
}

/* Rank q's input element i at replay k: a small integer, so that any order of sums is exact. */
static float inputOf(int q, size_t i, int k) {
  uint64_t x = (uint64_t)(q + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^
               (uint64_t)(k + 7) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0xd6e9e3b5ull;
  x ^= x >> 29;
  return (float)((int)(x % 33) - 16);
}

/* One case: `calls` captured calls of `coll` with `count` elements each (all-gather sendcount,
 * reduce-scatter recvcount, all-reduce count), their buffers `offset` elements into one
 * allocation (`allocKind`); `expectInPlace`: whether every launch should have gone in place. */
static void runCase(const char* name, int coll, size_t count, enum placement where, size_t offset,
                    int calls, enum odd odd, int expectInPlace) {
  /* The larger of input and output. */
  const size_t whole = coll == AR ? count : count * (size_t)nranks;
  const size_t perCall = 2 * whole + 64;          /* input and output of one call, apart */
  const size_t poolElems = offset + perCall * (size_t)calls;
  float* pool = NULL;
  const int fromNccl = allocKind == NCCL_MEM_ALLOC || (allocKind == MIXED && rank == 0);
  if (fromNccl) NCCL_OK(ncclMemAlloc((void**)&pool, poolElems * sizeof(float)));
  else CUDA_OK(cudaMalloc((void**)&pool, poolElems * sizeof(float)));
  float* asyncBuf = NULL; /* STREAM_ORDERED: rank 0's first in-place buffer (no IPC handle) */
  float *send[4], *recv[4];
  for (int c = 0; c < calls; c++) {
    float* base = pool + offset + perCall * (size_t)c;
    float* in = base;
    float* out = base + whole + 32;
    if (coll == AG) {
      recv[c] = out;
      send[c] = where == IN_PLACE ? out + count * (size_t)rank : in;
    } else if (coll == AR) {
      send[c] = in;
      recv[c] = where == IN_PLACE ? in : out;
    } else {
      send[c] = in;
      recv[c] = where == IN_PLACE ? in + count * (size_t)rank : out;
    }
  }
  /* The buffer peers would map: all-gather's and all-reduce's output, reduce-scatter's input. */
  if (odd == STREAM_ORDERED && rank == 0) {
    CUDA_OK(cudaMallocAsync((void**)&asyncBuf, (whole + 1) * sizeof(float), stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    if (coll == RS) send[0] = asyncBuf + 1;
    else recv[0] = asyncBuf + 1;
  }
  barrier();

  const uint64_t before = zeroCopies();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int c = 0; c < calls; c++) {
    const int grouped = odd == IN_A_GROUP && rank == 0;
    if (grouped) NCCL_OK(ncclGroupStart());
    if (coll == AG) NCCL_OK(ncclAllGather(send[c], recv[c], count, ncclFloat, comm, stream));
    else if (coll == AR)
      NCCL_OK(ncclAllReduce(send[c], recv[c], count, ncclFloat, ncclSum, comm, stream));
    else NCCL_OK(ncclReduceScatter(send[c], recv[c], count, ncclFloat, ncclSum, comm, stream));
    if (grouped) NCCL_OK(ncclGroupEnd());
  }
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  const int inPlace = (int)(zeroCopies() - before);
  TCHECK(inPlace == (expectInPlace ? calls : 0), "%s: rank %d: %d of %d launches in place, %s",
         name, rank, inPlace, calls, expectInPlace ? "all expected" : "none expected");
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphUpload(exec, stream)); /* see test/core/README.md, "Graph uploads" */
  CUDA_OK(cudaStreamSynchronize(stream));

  const size_t inElems = coll == AG ? count : whole, outElems = coll == RS ? count : whole;
  float* host = malloc(whole * sizeof(float));
  float* ref = malloc(whole * sizeof(float));
  if (host == NULL || ref == NULL) exit(2);
  for (int k = 0; k < 3; k++) {
    barrier(); /* no rank rewrites a buffer a peer's previous replay may still read */
    for (int c = 0; c < calls; c++) {
      if (where == OUT_OF_PLACE) CUDA_OK(cudaMemset(recv[c], 0xff, outElems * sizeof(float)));
      else if (coll == AG) CUDA_OK(cudaMemset(recv[c], 0xff, whole * sizeof(float)));
      for (size_t i = 0; i < inElems; i++) host[i] = inputOf(rank, i + (size_t)c * 7, k);
      CUDA_OK(cudaMemcpy(send[c], host, inElems * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize());
    barrier();
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    for (int c = 0; c < calls; c++) {
      for (size_t i = 0; i < outElems; i++) {
        if (coll == AG) {
          ref[i] = inputOf((int)(i / count), i % count + (size_t)c * 7, k);
        } else if (coll == AR) {
          double sum = 0;
          for (int q = 0; q < nranks; q++) sum += inputOf(q, i + (size_t)c * 7, k);
          ref[i] = (float)sum;
        } else {
          double sum = 0;
          for (int q = 0; q < nranks; q++)
            sum += inputOf(q, count * (size_t)rank + i + (size_t)c * 7, k);
          ref[i] = (float)sum;
        }
      }
      CUDA_OK(cudaMemcpy(host, recv[c], outElems * sizeof(float), cudaMemcpyDeviceToHost));
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < outElems; i++)
        if (memcmp(&host[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
      TCHECK(bad == 0,
             "%s: rank %d replay %d call %d: %zu of %zu wrong, first at %zu (%g, want %g)", name,
             rank, k, c, bad, outElems, first, bad ? host[first] : 0.0, bad ? ref[first] : 0.0);
    }
  }
  free(host);
  free(ref);
  barrier();
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  if (asyncBuf != NULL) CUDA_OK(cudaFreeAsync(asyncBuf, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  if (fromNccl) NCCL_OK(ncclMemFree(pool));
  else CUDA_OK(cudaFree(pool));
}

static int childMain(int r, int n, int idFd) {
  rank = r;
  nranks = n;
  alarm(600); /* a hang fails the test instead of stalling the suite */
  ncclUniqueId id;
  if (procsReadAll(idFd, &id, sizeof(id)) != 0) return 2;
  CUDA_OK(cudaSetDevice(r));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  setKnobs(1, 2);
  NCCL_OK(ncclCommInitRank(&comm, n, id, r));
  /* The first call given to our kernels builds staging (never a captured one). */
  float* warm = NULL;
  CUDA_OK(cudaMalloc((void**)&warm, 1024 * sizeof(float) * (size_t)n));
  NCCL_OK(ncclAllGather(warm, warm + 1024, 1024, ncclFloat, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaFree(warm));
  struct symmComm* sc = symmCommFind(comm);
  if (sc == NULL || sc->transport == NULL) {
    printf("rank %d: our kernels are not set up on this communicator; skipped\n", r);
    NCCL_OK(ncclCommDestroy(comm));
    return 77;
  }
  const int odd[] = {1, 3, 1001, 65537};
  for (int coll = AG; coll <= AR; coll++) {
    const char* c = coll == AG ? "all-gather" : coll == RS ? "reduce-scatter" : "all-reduce";
    char name[96];
    /* Mode 2: cudaMalloc buffers through legacy IPC handles too. */
    setKnobs(1, 2);
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
      snprintf(name, sizeof(name), "%s %d out of place", c, odd[i]);
      runCase(name, coll, (size_t)odd[i], OUT_OF_PLACE, 0, 1, NOTHING_ODD, 1);
      snprintf(name, sizeof(name), "%s %d in place", c, odd[i]);
      runCase(name, coll, (size_t)odd[i], IN_PLACE, 0, 1, NOTHING_ODD, 1);
    }
    snprintf(name, sizeof(name), "%s, unaligned inside an allocation, three calls", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 3, 3, NOTHING_ODD, 1);
    snprintf(name, sizeof(name), "%s, one rank's buffer from cudaMallocAsync", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 0, 1, STREAM_ORDERED, 0);
    snprintf(name, sizeof(name), "%s, one rank's call inside a group", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 0, 2, IN_A_GROUP, 0);
    snprintf(name, sizeof(name), "%s again after those (buffers new)", c);
    runCase(name, coll, 4099, IN_PLACE, 1, 2, NOTHING_ODD, 1);
    allocKind = NCCL_MEM_ALLOC;
    snprintf(name, sizeof(name), "%s, ncclMemAlloc buffers, out of place", c);
    runCase(name, coll, 65537, OUT_OF_PLACE, 0, 1, NOTHING_ODD, 1);
    snprintf(name, sizeof(name), "%s, ncclMemAlloc buffers, in place, unaligned, two calls", c);
    runCase(name, coll, 1001, IN_PLACE, 3, 2, NOTHING_ODD, 1);
    allocKind = MIXED;
    snprintf(name, sizeof(name), "%s, ncclMemAlloc on rank 0, cudaMalloc elsewhere", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 1, 1, NOTHING_ODD, 1);
    /* The default mode 1: ncclMemAlloc buffers only; a cudaMalloc buffer on any rank keeps
     * every rank on staging. */
    setKnobs(1, -1);
    allocKind = CUDA_MALLOC;
    snprintf(name, sizeof(name), "%s, cudaMalloc buffers, mode 1 (staged)", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 0, 1, NOTHING_ODD, 0);
    allocKind = MIXED;
    snprintf(name, sizeof(name), "%s, ncclMemAlloc on rank 0 only, mode 1 (staged)", c);
    runCase(name, coll, 4099, IN_PLACE, 1, 1, NOTHING_ODD, 0);
    allocKind = NCCL_MEM_ALLOC;
    snprintf(name, sizeof(name), "%s, ncclMemAlloc buffers, mode 1", c);
    runCase(name, coll, 4099, OUT_OF_PLACE, 1, 2, NOTHING_ODD, 1);
    allocKind = CUDA_MALLOC;
  }
  /* The defaults: ncclMemAlloc buffers in place from 16 MiB (SYMMCOLL_ZERO_COPY_MIN_BYTES),
   * through staging below and for cudaMalloc buffers; only where the table runs push and pull at
   * these sizes (2 and 4 ranks on sm_90). */
  setKnobs(0, -1);
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, r));
  if ((n == 2 || n == 4) && major == 9) {
  const size_t large = (16u << 20) / sizeof(float) / (size_t)n + 3;
  allocKind = NCCL_MEM_ALLOC; /* as nccl-tests allocates */
  runCase("all-gather, 16 MiB + 3 elements, ncclMemAlloc, defaults", AG, large, OUT_OF_PLACE, 1, 1,
          NOTHING_ODD, 1);
  runCase("reduce-scatter, 16 MiB + 3 elements, ncclMemAlloc, defaults", RS, large, IN_PLACE, 0, 1,
          NOTHING_ODD, 1);
  runCase("all-gather, 8 MiB, ncclMemAlloc, defaults (staged)", AG,
          (8u << 20) / sizeof(float) / (size_t)n, OUT_OF_PLACE, 0, 1, NOTHING_ODD, 0);
  allocKind = CUDA_MALLOC;
  runCase("reduce-scatter, 16 MiB + 3 elements, cudaMalloc, defaults (staged)", RS, large,
          OUT_OF_PLACE, 0, 1, NOTHING_ODD, 0);
  allocKind = NCCL_MEM_ALLOC;
  /* The largest size the plain rows give push and pull: beyond 32 MiB the 4-rank rows hand
   * float all-gathers and reduce-scatters to NCCL, captured or not. */
  const unsigned bigMiB = n == 2 ? 64 : 32;
  char name[96];
  snprintf(name, sizeof(name), "all-gather, %u MiB, ncclMemAlloc, defaults", bigMiB);
  runCase(name, AG, ((size_t)bigMiB << 20) / sizeof(float) / (size_t)n, OUT_OF_PLACE, 0, 1,
          NOTHING_ODD, 1);
  snprintf(name, sizeof(name), "reduce-scatter, %u MiB, ncclMemAlloc, defaults", bigMiB);
  runCase(name, RS, ((size_t)bigMiB << 20) / sizeof(float) / (size_t)n, OUT_OF_PLACE, 0, 1,
          NOTHING_ODD, 1);
  /* The pair's all-reduce two-shot writes the peers' outputs from 8 MiB
   * (SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES); at 4 MiB (SYMMCOLL_ZERO_COPY_MAX_BYTES) it would read
   * inputs in place, which no exchange is made for. The 4-rank rows forward these sizes. */
  if (n == 2) {
    runCase("all-reduce, 8 MiB + 3 elements, ncclMemAlloc, defaults", AR,
            (8u << 20) / sizeof(float) + 3, OUT_OF_PLACE, 1, 1, NOTHING_ODD, 1);
    runCase("all-reduce, 64 MiB, ncclMemAlloc, in place, defaults", AR,
            (64u << 20) / sizeof(float), IN_PLACE, 0, 1, NOTHING_ODD, 1);
    runCase("all-reduce, 4 MiB, ncclMemAlloc, defaults (staged)", AR, (4u << 20) / sizeof(float),
            OUT_OF_PLACE, 0, 1, NOTHING_ODD, 0);
  }
  /* Above 512 MiB the pair's windows table gives the all-gather to the copy engine: in place on
   * the imported buffers too. */
  if (n == 2)
    runCase("all-gather, 520 MiB, ncclMemAlloc, defaults (copy engine)", AG,
            (520u << 20) / sizeof(float) / (size_t)n, OUT_OF_PLACE, 0, 1, NOTHING_ODD, 1);
  allocKind = CUDA_MALLOC;
  }
  NCCL_OK(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  printf("rank %d: %d checks, %d failed\n", r, harnessChecks, harnessFailures);
  return harnessFailures ? 1 : 0;
}

int main(void) {
  const int ngpus = procsCountGpus();
  if (ngpus < 2) {
    printf("test_graph_zero_copy: needs 2+ GPUs (one process each), found %d; skipped\n", ngpus);
    return TEST_SKIP_CODE;
  }
  return procsRunRanks("test_graph_zero_copy", ngpus > 8 ? 8 : ngpus, childMain);
}
