/* SPDX-License-Identifier: Apache-2.0 */
/* GPU, one process per GPU through the real NCCL (2..8 GPUs; exit 77 with fewer than 2): the
 * `ncclplain` choice. Buffers in symmetric windows (ncclMemAlloc + ncclCommWindowRegister with
 * NCCL_WIN_COLL_SYMMETRIC) reach the real NCCL through each window's alias, an address outside
 * the window (src/transport/window.c), so that NCCL runs its plain path on them.
 *
 * The test stands between the library and the real NCCL: symmReal's all-reduce, all-gather and
 * reduce-scatter entries are replaced by wrappers that record the buffers NCCL was given, then
 * call NCCL. Forcing ncclplain for each collective (SYMMCOLL_*_ALGO), every call must reach NCCL
 * with addresses outside the window, namely the window's alias at the same offsets (in-place
 * calls still in place), once per call, and give results equal to a host reference: float sum
 * and int32 max, random small integers (exact in any order), poisoned outputs, in place and out
 * of place, an unaligned offset into the window, odd counts, eager and captured in a CUDA graph
 * (replayed with fresh inputs). A buffer outside every window (cudaMalloc) reaches NCCL as it
 * is. Then: a window whose alias failed on one rank (SYMMCOLL_TEST_ALIAS_FAIL_RANK) has no alias
 * on any rank, and every rank gives NCCL the window's own addresses; deregistering a window
 * unmaps its alias (the address is no longer mapped, no alias is left in the process), and
 * registering the buffer again maps a new one. At 4 ranks on sm_90, the built-in table itself
 * picks ncclplain for a windowed bf16 all-reduce of 8 MiB and an all-gather of 260 MiB, and on
 * 2 ranks never. */
#include <cuda.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "cudriver.h"
#include "forward.h"
#include "harness.h"
#include "param.h"
#include "procs.h"
#include "transport.h"

#define TCHECK(cond, ...) HARNESS_TCHECKF(cond, __VA_ARGS__)

#define CUDA_OK(call) PROCS_CUDA_OK(rank, call)
#define NCCL_OK(call) PROCS_NCCL_OK(rank, call)

enum { AR = 0, AG = 1, RS = 2, NCOLLS = 3 };
static const char* const collNames[NCOLLS] = {"all-reduce", "all-gather", "reduce-scatter"};
enum placement { OUT_OF_PLACE, IN_PLACE };

static int rank, nranks;
static ncclComm_t comm;
static struct symmComm* ours;
static cudaStream_t stream;
/* Between cases: every rank process (procsRunRanks). */
static void barrier(void) { procsBarrier(); }

/* ---- what the real NCCL was given ------------------------------------------------------- */

struct seen {
  int calls;
  const void* send;
  void* recv;
};
static struct seen seen[NCOLLS];

static ncclResult_t (*realAllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                     ncclComm_t, cudaStream_t);
static ncclResult_t (*realAllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                     cudaStream_t);
static ncclResult_t (*realReduceScatter)(const void*, void*, size_t, ncclDataType_t,
                                         ncclRedOp_t, ncclComm_t, cudaStream_t);

static void note(int coll, const void* send, void* recv) {
  seen[coll].calls++;
  seen[coll].send = send;
  seen[coll].recv = recv;
}

static ncclResult_t seeAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                 ncclComm_t c, cudaStream_t st) {
  note(AR, s, r);
  return realAllReduce(s, r, n, t, op, c, st);
}
static ncclResult_t seeAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c,
                                 cudaStream_t st) {
  note(AG, s, r);
  return realAllGather(s, r, n, t, c, st);
}
static ncclResult_t seeReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  note(RS, s, r);
  return realReduceScatter(s, r, n, t, op, c, st);
}

/* The library reaches the real NCCL only through symmReal (src/include/forward.h). */
static void standBetween(void) {
  realAllReduce = symmReal.ncclAllReduce;
  realAllGather = symmReal.ncclAllGather;
  realReduceScatter = symmReal.ncclReduceScatter;
  symmReal.ncclAllReduce = seeAllReduce;
  symmReal.ncclAllGather = seeAllGather;
  symmReal.ncclReduceScatter = seeReduceScatter;
}

/* ---- knobs, data -------------------------------------------------------------------------- */

/* `forced`: every collective's override says ncclplain (else the table decides). `failRank`:
 * SYMMCOLL_TEST_ALIAS_FAIL_RANK, or -1. Every rank sets the same. */
static void setKnobs(int forced, int failRank) {
  static const char* const knobs[NCOLLS] = {
      "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO"};
  for (int c = 0; c < NCOLLS; c++) {
    if (forced) setenv(knobs[c], "ncclplain", 1);
    else unsetenv(knobs[c]);
  }
  if (failRank >= 0) {
    char v[16];
    snprintf(v, sizeof(v), "%d", failRank);
    setenv("SYMMCOLL_TEST_ALIAS_FAIL_RANK", v, 1);
  } else {
    unsetenv("SYMMCOLL_TEST_ALIAS_FAIL_RANK");
  }
  symmParamResetAll();
}

/* Rank q's input element i at replay k: a small integer, so that any order of sums is exact. */
static int inputOf(int q, size_t i, int k) {
  uint64_t x = (uint64_t)(q + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^
               (uint64_t)(k + 11) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0xd6e9e3b5ull;
  x ^= x >> 29;
  return (int)(x % 33) - 16;
}

static size_t sizeOf(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : 4; }

/* Element i of a host buffer of type t, set from / read as an integer (bf16: the top half of
 * the float, exact for these integers). */
static void putElem(void* buf, size_t i, ncclDataType_t t, int v) {
  if (t == ncclInt32) {
    ((int32_t*)buf)[i] = v;
  } else if (t == ncclFloat32) {
    ((float*)buf)[i] = (float)v;
  } else {
    const float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    ((uint16_t*)buf)[i] = (uint16_t)(bits >> 16);
  }
}

static int sameElem(const void* a, const void* b, size_t i, ncclDataType_t t) {
  return memcmp((const char*)a + i * sizeOf(t), (const char*)b + i * sizeOf(t), sizeOf(t)) == 0;
}

/* ---- one case ----------------------------------------------------------------------------- */

/* A registered window: its range on this rank. */
struct window {
  char* base;
  size_t bytes;
  ncclWindow_t win;
};

static int inRange(const void* p, const struct window* w) {
  return (uintptr_t)p >= (uintptr_t)w->base && (uintptr_t)p < (uintptr_t)w->base + w->bytes;
}

/* The library's answer: 1 and *alias when [p, p+bytes) lies in a window with an alias. */
static int aliasOf(const void* p, size_t bytes, void** alias) {
  pthread_mutex_lock(&ours->launchLock); /* as the enqueue path asks */
  const int found = symmTransportWindowAlias(ours, p, bytes, alias);
  pthread_mutex_unlock(&ours->launchLock);
  return found;
}

/* What NCCL should be given for `p` (`bytes` long): its alias when it lies in a window with
 * one, else `p`. */
static const void* expectedFor(const void* p, size_t bytes) {
  void* alias = NULL;
  return aliasOf(p, bytes, &alias) ? alias : p;
}

static ncclResult_t issue(int coll, const void* send, void* recv, size_t count, ncclDataType_t t) {
  const ncclRedOp_t op = t == ncclInt32 ? ncclMax : ncclSum;
  if (coll == AR) return ncclAllReduce(send, recv, count, t, op, comm, stream);
  if (coll == AG) return ncclAllGather(send, recv, count, t, comm, stream);
  return ncclReduceScatter(send, recv, count, t, op, comm, stream);
}

struct caseSpec {
  const char* name;
  int coll;
  ncclDataType_t type;
  size_t count;         /* NCCL's count: all-reduce count, all-gather sendcount, RS recvcount */
  enum placement where;
  size_t offset;        /* elements into the window where the case's buffers start */
  int graph;            /* captured once, replayed twice */
  int recvOutside;      /* out of place, the output in a cudaMalloc buffer outside every window */
  int expectAliases;    /* 1: NCCL must get aliases; 0: the original addresses */
  int expectForwarded;  /* 0: the call must not reach the real NCCL at all (ours runs it) */
};

/* Runs one case on window `w` (every rank alike) and checks what NCCL was given and the result. */
static void runCase(const struct caseSpec* c, const struct window* w) {
  const size_t es = sizeOf(c->type);
  const size_t whole = c->coll == AR ? c->count : c->count * (size_t)nranks;
  const size_t inElems = c->coll == AG ? c->count : whole;
  const size_t outElems = c->coll == RS ? c->count : whole;
  char* start = w->base + c->offset * es;
  char* send;
  char* recv;
  char* outside = NULL;
  if (c->where == IN_PLACE) {
    /* NCCL's in-place forms: the all-gather's input is this rank's slice of the output, the
     * reduce-scatter's output this rank's slice of the input. */
    send = c->coll == AG ? start + c->count * (size_t)rank * es : start;
    recv = c->coll == RS ? start + c->count * (size_t)rank * es : start;
  } else {
    send = start;
    recv = start + ((inElems * es + 255) / 256) * 256 + 4 * es; /* apart, unaligned like send */
    if (c->recvOutside) {
      CUDA_OK(cudaMalloc((void**)&outside, outElems * es));
      recv = outside;
    }
  }
  const char* end = c->where == IN_PLACE ? start + whole * es : recv + outElems * es;
  if (!c->recvOutside && (uintptr_t)end > (uintptr_t)w->base + w->bytes) {
    fprintf(stderr, "rank %d: case %s does not fit its window\n", rank, c->name);
    exit(2);
  }
  void* host = malloc(whole * es);
  void* ref = malloc(whole * es);
  if (host == NULL || ref == NULL) exit(2);

  const uint64_t plainBefore = ours->plainForwards;
  const int callsBefore = seen[c->coll].calls;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  const int runs = c->graph ? 2 : 1;
  for (int k = 0; k < runs; k++) {
    /* Poison the output, then the input (in place the input overwrites its part). */
    if (c->where == OUT_OF_PLACE || c->coll == AG)
      CUDA_OK(cudaMemsetAsync(recv, 0x7f, outElems * es, stream));
    for (size_t i = 0; i < inElems; i++) putElem(host, i, c->type, inputOf(rank, i, k));
    CUDA_OK(cudaMemcpyAsync(send, host, inElems * es, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    barrier(); /* every rank's input is in place before any call reads it */
    if (!c->graph) {
      NCCL_OK(issue(c->coll, send, recv, c->count, c->type));
    } else if (k == 0) {
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      NCCL_OK(issue(c->coll, send, recv, c->count, c->type));
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphUpload(exec, stream)); /* see test/core/README.md, "Graph uploads" */
    }
    if (k == 0) {
      /* What the real NCCL was given (at the call, or at capture). */
      const struct seen* s = &seen[c->coll];
      const int reached = s->calls - callsBefore;
      TCHECK(reached == (c->expectForwarded ? 1 : 0), "%s: rank %d: NCCL called %d times",
             c->name, rank, reached);
      if (c->expectForwarded && reached == 1) {
        const void* wantSend = c->expectAliases ? expectedFor(send, inElems * es) : send;
        const void* wantRecv = c->expectAliases ? expectedFor(recv, outElems * es) : recv;
        TCHECK(s->send == wantSend && s->recv == wantRecv,
               "%s: rank %d: NCCL got %p/%p, expected %p/%p (buffers %p/%p)", c->name, rank,
               s->send, s->recv, wantSend, wantRecv, (void*)send, (void*)recv);
        if (c->expectAliases) {
          TCHECK(!inRange(s->send, w) && (c->recvOutside || !inRange(s->recv, w)),
                 "%s: rank %d: NCCL got an address inside the window", c->name, rank);
          TCHECK(wantSend != send, "%s: rank %d: no alias for the input", c->name, rank);
          if (c->where == IN_PLACE) /* NCCL sees the call in place */
            TCHECK((const char*)s->send - (const char*)s->recv == send - recv,
                   "%s: rank %d: not in place any more", c->name, rank);
        }
      }
      TCHECK(ours->plainForwards - plainBefore == (uint64_t)(c->expectAliases ? 1 : 0),
             "%s: rank %d: %llu forwards with aliases", c->name, rank,
             (unsigned long long)(ours->plainForwards - plainBefore));
    }
    if (c->graph) CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    /* The reference from every rank's input. */
    for (size_t i = 0; i < outElems; i++) {
      int v;
      if (c->coll == AG) {
        v = inputOf((int)(i / c->count), i % c->count, k);
      } else {
        const size_t at = c->coll == RS ? c->count * (size_t)rank + i : i;
        v = inputOf(0, at, k);
        for (int q = 1; q < nranks; q++) {
          const int x = inputOf(q, at, k);
          v = c->type == ncclInt32 ? (x > v ? x : v) : v + x;
        }
      }
      putElem(ref, i, c->type, v);
    }
    CUDA_OK(cudaMemcpyAsync(host, recv, outElems * es, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < outElems; i++)
      if (!sameElem(host, ref, i, c->type) && bad++ == 0) first = i;
    TCHECK(bad == 0, "%s: rank %d run %d: %zu of %zu elements wrong, first at %zu", c->name, rank,
           k, bad, outElems, first);
    barrier(); /* no rank rewrites a buffer a peer's call may still read */
  }
  if (exec != NULL) CUDA_OK(cudaGraphExecDestroy(exec));
  if (graph != NULL) CUDA_OK(cudaGraphDestroy(graph));
  if (outside != NULL) CUDA_OK(cudaFree(outside));
  free(host);
  free(ref);
}

static void registerWindow(struct window* w) {
  NCCL_OK(ncclCommWindowRegister(comm, w->base, w->bytes, &w->win, NCCL_WIN_COLL_SYMMETRIC));
}

/* Is `p` still mapped in this process? */
static int mapped(const void* p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  return symmCu.p_cuMemGetAddressRange(&base, &size, (CUdeviceptr)p) == CUDA_SUCCESS;
}

/* Every collective forced to ncclplain on window `w`: sizes, placements, offsets, types, eager and
 * captured. `aliases`: whether the window has an alias (NCCL must get it) or not (the window). */
static void forcedCases(const struct window* w, int aliases, const char* what) {
  static const size_t counts[] = {1, 1001, 65537, 262147};
  static const ncclDataType_t types[] = {ncclFloat32, ncclInt32};
  char name[160];
  for (int coll = 0; coll < NCOLLS; coll++)
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
      for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (int where = OUT_OF_PLACE; where <= IN_PLACE; where++) {
          const int graph = ci % 2 == 1; /* 1001 and 262147 elements */
          const size_t offset = (ci + (size_t)where) % 2 ? 3 : 0;
          snprintf(name, sizeof(name), "%s, %s %s, %zu elements, %s, offset %zu, %s", what,
                   collNames[coll], types[ti] == ncclInt32 ? "int32 max" : "float sum",
                   counts[ci], where == IN_PLACE ? "in place" : "out of place", offset,
                   graph ? "graph" : "eager");
          const struct caseSpec c = {.name = name, .coll = coll, .type = types[ti],
                                     .count = counts[ci], .where = (enum placement)where,
                                     .offset = offset, .graph = graph,
                                     .expectAliases = aliases, .expectForwarded = 1};
          runCase(&c, w);
        }
  /* The output outside every window: only the input reaches NCCL through its alias. */
  for (int coll = 0; coll < NCOLLS; coll++) {
    snprintf(name, sizeof(name), "%s, %s, output in cudaMalloc memory", what, collNames[coll]);
    const struct caseSpec c = {.name = name, .coll = coll, .type = ncclFloat32, .count = 4099,
                               .where = OUT_OF_PLACE, .offset = 1, .recvOutside = 1,
                               .expectAliases = aliases, .expectForwarded = 1};
    runCase(&c, w);
  }
}

static int childMain(int r, int n, int idFd) {
  rank = r;
  nranks = n;
  alarm(570); /* a hang fails the test before meson's 600 s timeout */
  ncclUniqueId id;
  if (procsReadAll(idFd, &id, sizeof(id)) != 0) return 2;
  CUDA_OK(cudaSetDevice(r));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  setKnobs(1, -1);
  NCCL_OK(ncclCommInitRank(&comm, n, id, r));
  ours = symmCommFind(comm);
  if (ours == NULL || ours->transport == NULL || symmCuLoad() != ncclSuccess) {
    printf("rank %d: our kernels are not set up on this communicator; skipped\n", r);
    NCCL_OK(ncclCommDestroy(comm));
    return 77;
  }
  standBetween();

  /* 1. A window with an alias on every rank. */
  struct window w = {.bytes = (size_t)64 << 20};
  NCCL_OK(ncclMemAlloc((void**)&w.base, w.bytes));
  registerWindow(&w);
  void* alias = NULL;
  TCHECK(aliasOf(w.base, w.bytes, &alias) == 1 && !inRange(alias, &w),
         "rank %d: the window has no alias outside it (%p)", r, alias);
  TCHECK(symmTransportAliasCount() == 1, "rank %d: %d aliases mapped", r, symmTransportAliasCount());
  barrier();
  forcedCases(&w, 1, "forced");

  /* The table at 4 ranks on sm_90 picks ncclplain for large windowed calls; on 2 ranks never. */
  setKnobs(0, -1);
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, r));
  if (major == 9 && (n == 2 || n == 4)) {
    const struct caseSpec ar8 = {.name = "table: bf16 all-reduce of 8 MiB in a window",
                                 .coll = AR, .type = ncclBfloat16, .count = (4u << 20),
                                 .where = OUT_OF_PLACE, .offset = 0,
                                 .expectAliases = n == 4, .expectForwarded = n == 4};
    runCase(&ar8, &w);
  }
  if (major == 9 && n == 4) {
    /* 260 MiB of all-gather output, in place: a window of its own. */
    struct window big = {.bytes = (size_t)260 << 20};
    NCCL_OK(ncclMemAlloc((void**)&big.base, big.bytes));
    registerWindow(&big);
    const struct caseSpec ag = {.name = "table: bf16 all-gather of 260 MiB in a window",
                                .coll = AG, .type = ncclBfloat16,
                                .count = big.bytes / 2 / (size_t)n, .where = IN_PLACE,
                                .expectAliases = 1, .expectForwarded = 1};
    runCase(&ag, &big);
    barrier();
    NCCL_OK(ncclCommWindowDeregister(comm, big.win));
    NCCL_OK(ncclMemFree(big.base));
  }
  setKnobs(1, -1);

  /* 2. Deregistering unmaps the alias; registering again maps a new one. */
  barrier();
  NCCL_OK(ncclCommWindowDeregister(comm, w.win));
  TCHECK(symmTransportAliasCount() == 0, "rank %d: %d aliases left after deregistration", r,
         symmTransportAliasCount());
  TCHECK(!mapped(alias), "rank %d: the old alias %p is still mapped", r, alias);
  void* none = NULL;
  TCHECK(aliasOf(w.base, 4, &none) == 0, "rank %d: an alias after "
         "deregistration", r);
  /* Without a window, ncclplain is nccl: the buffers as they are. */
  const struct caseSpec unregistered = {.name = "deregistered window, forced ncclplain",
                                        .coll = AR, .type = ncclFloat32, .count = 65537,
                                        .where = OUT_OF_PLACE, .offset = 3,
                                        .expectAliases = 0, .expectForwarded = 1};
  runCase(&unregistered, &w);
  registerWindow(&w);
  TCHECK(symmTransportAliasCount() == 1 && aliasOf(w.base, 4, &none) == 1,
         "rank %d: registered again, no alias", r);
  const struct caseSpec again = {.name = "registered again", .coll = RS, .type = ncclFloat32,
                                 .count = 1001, .where = IN_PLACE, .offset = 3, .graph = 1,
                                 .expectAliases = 1, .expectForwarded = 1};
  runCase(&again, &w);
  barrier();
  NCCL_OK(ncclCommWindowDeregister(comm, w.win));

  /* 3. The last rank cannot map an alias: no rank uses one for that window. */
  setKnobs(1, n - 1);
  registerWindow(&w);
  TCHECK(aliasOf(w.base, 4, &none) == 0,
         "rank %d: an alias although rank %d mapped none", r, n - 1);
  TCHECK(symmTransportAliasCount() == 0, "rank %d: %d aliases left mapped", r,
         symmTransportAliasCount());
  barrier();
  forcedCases(&w, 0, "no alias on one rank");
  barrier();
  NCCL_OK(ncclCommWindowDeregister(comm, w.win));
  setKnobs(1, -1);

  barrier();
  NCCL_OK(ncclMemFree(w.base));
  NCCL_OK(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  printf("rank %d: %d checks, %d failed\n", r, harnessChecks, harnessFailures);
  return harnessFailures ? 1 : 0;
}

int main(void) {
  const int ngpus = procsCountGpus();
  if (ngpus < 2) {
    printf("test_nccl_plain: needs 2+ GPUs (one process each), found %d; skipped\n", ngpus);
    return TEST_SKIP_CODE;
  }
  return procsRunRanks("test_nccl_plain", ngpus > 8 ? 8 : ngpus, childMain);
}
