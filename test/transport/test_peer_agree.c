/* SPDX-License-Identifier: Apache-2.0 */
/* GPU test, two processes on two GPUs with the real NCCL: a setting that changes which kernel
 * runs or its grid, set on one rank only, makes every rank forward (our kernels inactive on
 * both, no launch of ours), results stay right and nothing hangs.
 *   test_peer_agree maxctas [N]   rank 1 runs with NCCL_MAX_CTAS=N (default 64: NCCL's own
 *                                 limit, so the real NCCL behaves as with nothing set and only
 *                                 our grid bounds would differ: 64 blocks against 128)
 *   test_peer_agree disable       rank 1 runs with SYMMCOLL_DISABLE=1
 *   test_peer_agree same [N]      both ranks run with NCCL_MAX_CTAS=N: ours stay active (the
 *                                 control: this test can tell active from inactive)
 * Each rank process has a watchdog (SYMMCOLL_TEST_WATCHDOG_S, default 90 s): a hang prints its
 * stacks and fails instead of blocking. Exits 77 without two GPUs. */
#include "peer_common.h"
#include "tuner.h" /* SYMM_LINK_NVLINK */

enum agreeMode { MODE_MAXCTAS, MODE_DISABLE, MODE_SAME };
static enum agreeMode mode;
static const char* ctasValue = "64";

/* In each rank process, before it creates its communicator. */
static void rankEnvironment(int rank) {
  watchdogArm(90);
  if (mode == MODE_SAME || (mode == MODE_MAXCTAS && rank == 1))
    setenv("NCCL_MAX_CTAS", ctasValue, 1);
  if (mode == MODE_DISABLE && rank == 1) setenv("SYMMCOLL_DISABLE", "1", 1);
  symmParamResetAll(); /* nothing was read in this process yet; to be sure */
}

/* Input element i of `rank` for call `call`: integers in -1000..1000, so that float sums are
 * exact in any order; every rank computes every rank's inputs. */
static int32_t valueOf(int rank, int call, size_t i) {
  uint64_t x = ((uint64_t)runSeed << 32) ^ ((uint64_t)(uint32_t)call << 8) ^ (uint64_t)rank ^
               ((uint64_t)i * 0x9e3779b97f4a7c15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (int32_t)(x % 2001) - 1000;
}

#define MAX_ELEMS ((size_t)2 * 1048579)
#define POISON 0xa5 /* 0xa5a5a5a5 is no sum of two values in -1000..1000 */

struct buffers {
  void *in, *out;
  int32_t* host;
  cudaStream_t stream;
  long wrong, checked, calls;
};

static void upload(struct buffers* b, int rank, int call, size_t n, int asFloat) {
  for (size_t i = 0; i < n; i++) {
    const int32_t v = valueOf(rank, call, i);
    if (asFloat) {
      const float f = (float)v;
      memcpy(&b->host[i], &f, sizeof(f));
    } else {
      b->host[i] = v;
    }
  }
  /* On the collective's stream: a plain cudaMemcpy from pageable memory may return before the
   * last bytes land, and a non-blocking stream does not wait for the legacy one. */
  CUDA_OK(cudaMemcpyAsync(b->in, b->host, n * sizeof(int32_t), cudaMemcpyHostToDevice, b->stream));
}

/* Element i of the output against `want`, as int32 or float. */
static int differs(const int32_t* got, size_t i, int32_t want, int asFloat) {
  if (!asFloat) return got[i] != want;
  float f;
  memcpy(&f, &got[i], sizeof(f));
  return f != (float)want;
}

static void finish(struct buffers* b, size_t n) {
  CUDA_OK(cudaStreamSynchronize(b->stream));
  CUDA_OK(cudaMemcpy(b->host, b->out, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  b->checked += (long)n;
  b->calls++;
}

static void allReduce(struct rankCtx* c, struct buffers* b, int call, size_t count, int asFloat,
                      int inPlace) {
  upload(b, c->rank, call, count, asFloat);
  void* out = inPlace ? b->in : b->out;
  if (!inPlace) CUDA_OK(cudaMemsetAsync(b->out, POISON, count * sizeof(int32_t), b->stream));
  TCHECK_EQ_INT(ncclAllReduce(b->in, out, count, asFloat ? ncclFloat32 : ncclInt32, ncclSum,
                              c->comm, b->stream), ncclSuccess);
  if (inPlace) {
    CUDA_OK(cudaStreamSynchronize(b->stream));
    CUDA_OK(cudaMemcpyAsync(b->out, b->in, count * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                            b->stream));
  }
  finish(b, count);
  long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    int32_t want = 0;
    for (int r = 0; r < c->nranks; r++) want += valueOf(r, call, i);
    wrong += differs(b->host, i, want, asFloat);
  }
  if (wrong) fprintf(stderr, "rank %d: all-reduce of %zu: %ld wrong\n", c->rank, count, wrong);
  b->wrong += wrong;
}

static void allGather(struct rankCtx* c, struct buffers* b, int call, size_t each) {
  upload(b, c->rank, call, each, 1);
  const size_t total = each * (size_t)c->nranks;
  CUDA_OK(cudaMemsetAsync(b->out, POISON, total * sizeof(int32_t), b->stream));
  TCHECK_EQ_INT(ncclAllGather(b->in, b->out, each, ncclFloat32, c->comm, b->stream), ncclSuccess);
  finish(b, total);
  long wrong = 0;
  for (int q = 0; q < c->nranks; q++)
    for (size_t i = 0; i < each; i++) wrong += differs(b->host, (size_t)q * each + i, valueOf(q, call, i), 1);
  if (wrong) fprintf(stderr, "rank %d: all-gather of %zu each: %ld wrong\n", c->rank, each, wrong);
  b->wrong += wrong;
}

static void reduceScatter(struct rankCtx* c, struct buffers* b, int call, size_t each) {
  upload(b, c->rank, call, each * (size_t)c->nranks, 0);
  CUDA_OK(cudaMemsetAsync(b->out, POISON, each * sizeof(int32_t), b->stream));
  TCHECK_EQ_INT(ncclReduceScatter(b->in, b->out, each, ncclInt32, ncclSum, c->comm, b->stream),
                ncclSuccess);
  finish(b, each);
  long wrong = 0;
  for (size_t i = 0; i < each; i++) {
    int32_t want = 0;
    for (int r = 0; r < c->nranks; r++) want += valueOf(r, call, (size_t)c->rank * each + i);
    wrong += differs(b->host, i, want, 0);
  }
  if (wrong) fprintf(stderr, "rank %d: reduce-scatter of %zu each: %ld wrong\n", c->rank, each, wrong);
  b->wrong += wrong;
}

static void agreeBody(struct rankCtx* local, int n, void* arg) {
  (void)n;
  (void)arg;
  struct rankCtx* c = &local[0];
  const int expectActive = mode == MODE_SAME;
  /* Every rank has an entry (a disabled one too: it took part in setup), and the decision is
   * the same on both. */
  struct symmComm* entry = symmCommFind(c->comm);
  TCHECK(entry != NULL);
  if (entry == NULL) return;
  TCHECK_EQ_INT(entry->setupDone, 1);
  TCHECK_EQ_INT(entry->transport != NULL, expectActive);
  struct buffers b = {0};
  CUDA_OK(cudaSetDevice(c->dev));
  CUDA_OK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&b.in, MAX_ELEMS * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&b.out, MAX_ELEMS * sizeof(int32_t)));
  b.host = malloc(MAX_ELEMS * sizeof(int32_t));
  TCHECK(b.host != NULL && b.in != NULL && b.out != NULL);
  if (b.host == NULL || b.in == NULL || b.out == NULL) return;
  /* Odd sizes from one element to past the two-shot's threshold (where 128 blocks run). */
  static const size_t arCounts[] = {1, 7, 4099, 65537, 1048579};
  static const size_t eachCounts[] = {1, 3, 1001, 65539, 1048577};
  int call = 0;
  for (int round = 0; round < 3; round++) {
    for (size_t k = 0; k < sizeof(arCounts) / sizeof(arCounts[0]); k++) {
      allReduce(c, &b, call++, arCounts[k], 0, 0);
      allReduce(c, &b, call++, arCounts[k], 1, round == 1);
    }
    for (size_t k = 0; k < sizeof(eachCounts) / sizeof(eachCounts[0]); k++) {
      allGather(c, &b, call++, eachCounts[k]);
      reduceScatter(c, &b, call++, eachCounts[k]);
    }
  }
  TCHECK_EQ_INT(b.wrong, 0);
  ncclResult_t state = ncclInProgress;
  TCHECK_EQ_INT(ncclCommGetAsyncError(c->comm, &state), ncclSuccess);
  TCHECK_EQ_INT(state, ncclSuccess);
  const uint64_t launches = __atomic_load_n(&entry->launches, __ATOMIC_RELAXED);
  if (expectActive && entry->link == SYMM_LINK_NVLINK) {
    TCHECK(launches > 0);
  } else if (expectActive) {
    printf("rank %d: not over NVLink; the built-in table gives our kernels nothing here\n", c->rank);
  } else {
    TCHECK_EQ_INT(launches, 0);
    TCHECK(entry->transport == NULL);
  }
  printf("rank %d: kernels %s, %llu launches of ours, %ld calls, %ld elements checked, %ld wrong\n",
         c->rank, entry->transport != NULL ? "active" : "inactive", (unsigned long long)launches,
         b.calls, b.checked, b.wrong);
  free(b.host);
  CUDA_OK(cudaFree(b.in));
  CUDA_OK(cudaFree(b.out));
  CUDA_OK(cudaStreamDestroy(b.stream));
}

/* The parent only forks and counts: it never touches CUDA or NCCL. */
static int runMode(enum agreeMode m, const char* arg) {
  mode = m;
  if (arg != NULL) ctasValue = arg;
  unsetenv("NCCL_MAX_CTAS");
  unsetenv("SYMMCOLL_DISABLE");
  beforeRankInit = rankEnvironment;
  runProcesses(agreeBody, NULL);
  return 0;
}

static int maxCtasMode(const char* arg) { return runMode(MODE_MAXCTAS, arg); }
static int disableMode(const char* arg) { return runMode(MODE_DISABLE, arg); }
static int sameMode(const char* arg) { return runMode(MODE_SAME, arg); }

int main(int argc, char** argv) {
  static const struct peerMode modes[] = {{"maxctas", 2, PEER_FORKED, maxCtasMode},
                                          {"disable", 2, PEER_FORKED, disableMode},
                                          {"same", 2, PEER_FORKED, sameMode}};
  static const struct peerTest test = {"peer_agree", "maxctas [N] | disable | same [N]",
                                       1 /* rankEnvironment arms each rank's watchdog */, modes,
                                       sizeof(modes) / sizeof(modes[0])};
  return peerMain(&test, argc, argv);
}
