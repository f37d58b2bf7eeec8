/* SPDX-License-Identifier: Apache-2.0 */
/* Host time of one eager 1 KiB all-reduce through ncclAllReduce on libsymmcoll's path, against
 * one bare kernel launch. Ranks are threads on one GPU (run it with SYMMCOLL_NCCL_LIB naming the
 * test bootstrap's libnccl.so.2); each rank times its own calls, one by one, and reports the
 * median of --calls calls. The stream is synchronized every --sync calls so the GPU never backs
 * up. With --turns K the ranks take turns, K calls each (a host-side token passed after every
 * K calls), so no two threads are inside the CUDA driver at once; with K = --sync each rank
 * issues runs of calls back to back, as a process that drives its own GPU does, which is what
 * the bare launch (one thread, back to back) is compared with. Two baselines: a bare
 * cuLaunchKernel on an idle GPU, and a bare launch of a kernel that, like ours, waits on the GPU
 * for its peers' launches, issued by the same threads in the same turns (a rank's launches then
 * queue behind a waiting kernel, as ours do). Uses only NCCL's public API, so
 * it runs against any libsymmcoll (or NCCL itself). */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "host_path: %s: %s\n", #x, cudaGetErrorString(e_));                \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
#define NK(x)                                                                            \
  do {                                                                                   \
    ncclResult_t r_ = (x);                                                               \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "host_path: %s: %s\n", #x, ncclGetErrorString(r_));                \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static int nranks = 2, calls = 10000, syncEvery = 100, warmup = 500, turns = 0;
static int turn; /* --turns: the rank whose calls are next (atomic) */
static size_t bytes = 1024;
static ncclUniqueId uid;
static pthread_barrier_t barrier;

static double nowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmpDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Median and 10th/90th percentiles of `n` samples (sorted in place). */
static void summarize(double* t, int n, double* p10, double* p50, double* p90) {
  qsort(t, (size_t)n, sizeof(double), cmpDouble);
  *p10 = t[n / 10];
  *p50 = t[n / 2];
  *p90 = t[n * 9 / 10];
}

/* A kernel with a 328-byte argument block (about our launch's), one with 4 bytes, and "meet":
 * 328 bytes whose first 8 hold a counter's address and next 4 a target; it adds 1 to the counter
 * and waits until it reaches the target, so a rank's launch waits for its peers' on the GPU as
 * ours do. PTX the driver compiles for whatever GPU this is. */
static const char kPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry big(.param .align 8 .b8 p[328]) { ret; }\n"
    ".visible .entry small(.param .u32 x) { ret; }\n"
    ".visible .entry meet(.param .align 8 .b8 p[328]) {\n"
    "  .reg .b64 %rd<2>; .reg .b32 %r<3>; .reg .pred %q;\n"
    "  ld.param.u64 %rd0, [p]; ld.param.u32 %r0, [p+8]; cvta.to.global.u64 %rd1, %rd0;\n"
    "  atom.global.add.u32 %r1, [%rd1], 1;\n"
    "WAIT:\n  ld.volatile.global.u32 %r2, [%rd1]; setp.lt.u32 %q, %r2, %r0; @%q bra WAIT;\n"
    "  ret;\n}\n";

typedef CUresult (*ModuleLoadDataFn)(CUmodule*, const void*);
typedef CUresult (*ModuleGetFunctionFn)(CUfunction*, CUmodule, const char*);
typedef CUresult (*LaunchKernelFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void**, void**);

/* Driver entry points through the runtime (nothing links libcuda); returned through a union so
 * that the object-to-function pointer conversion is explicit. */
union entryPoint {
  void* object;
  ModuleLoadDataFn load;
  ModuleGetFunctionFn get;
  LaunchKernelFn launch;
};

static union entryPoint driverEntry(const char* name) {
  union entryPoint fn = {NULL};
  enum cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &fn.object, 12000, cudaEnableDefault, &q));
  if (fn.object == NULL || q != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "host_path: no driver entry point %s\n", name);
    exit(1);
  }
  return fn;
}

static LaunchKernelFn launchFn;
static CUfunction bigFn, smallFn, meetFn;
static unsigned* meetCounter; /* device memory the "meet" launches count in */

static void loadBareKernels(void) {
  CK(cudaSetDevice(0));
  CK(cudaFree(NULL));
  ModuleLoadDataFn load = driverEntry("cuModuleLoadData").load;
  ModuleGetFunctionFn get = driverEntry("cuModuleGetFunction").get;
  launchFn = driverEntry("cuLaunchKernel").launch;
  CUmodule mod;
  if (load(&mod, kPtx) != CUDA_SUCCESS || get(&bigFn, mod, "big") != CUDA_SUCCESS ||
      get(&smallFn, mod, "small") != CUDA_SUCCESS || get(&meetFn, mod, "meet") != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: cannot load the bare kernels\n");
    exit(1);
  }
  CK(cudaMalloc((void**)&meetCounter, sizeof(unsigned)));
  CK(cudaMemset(meetCounter, 0, sizeof(unsigned)));
}

struct samples {
  double p10, p50, p90;
};
/* Per rank: ncclAllReduce, and the bare "meet" launch issued the same way. */
static struct samples ncclCalls[8], meetCalls[8];

/* One rank's timed loop: warmup untimed, then `calls` timed issues of `issue(i)`, in turns and
 * with synchronization as the options say. */
static void timedLoop(int rank, cudaStream_t stream, void (*issue)(void*, int), void* ctx,
                      struct samples* out) {
  for (int i = 0; i < warmup; i++) {
    issue(ctx, i);
    if ((i + 1) % syncEvery == 0) CK(cudaStreamSynchronize(stream));
  }
  CK(cudaStreamSynchronize(stream));
  pthread_barrier_wait(&barrier);
  double* t = malloc(sizeof(double) * (size_t)calls);
  if (t == NULL) exit(1);
  for (int i = 0; i < calls; i++) {
    if (turns && i % turns == 0)
      while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != rank) continue;
    const double t0 = nowUs();
    issue(ctx, warmup + i);
    t[i] = nowUs() - t0;
    if (turns && (i + 1) % turns == 0) __atomic_store_n(&turn, (rank + 1) % nranks, __ATOMIC_RELEASE);
    if ((i + 1) % syncEvery == 0) CK(cudaStreamSynchronize(stream));
  }
  CK(cudaStreamSynchronize(stream));
  summarize(t, calls, &out->p10, &out->p50, &out->p90);
  free(t);
  pthread_barrier_wait(&barrier);
}

struct rankCtx {
  ncclComm_t comm;
  cudaStream_t stream;
  float* buf;
  size_t count;
  char meetArgs[328];
};

static void issueAllReduce(void* arg, int i) {
  (void)i;
  struct rankCtx* c = arg;
  NK(ncclAllReduce(c->buf, c->buf, c->count, ncclFloat32, ncclSum, c->comm, c->stream));
}

static void issueMeet(void* arg, int i) {
  struct rankCtx* c = arg;
  const unsigned target = (unsigned)nranks * (unsigned)(i + 1);
  memcpy(c->meetArgs + 8, &target, sizeof(target)); /* the counter's address is already there */
  void* params[] = {c->meetArgs};
  if (launchFn(meetFn, 1, 1, 1, 1, 1, 1, 0, (CUstream)c->stream, params, NULL) != CUDA_SUCCESS) {
    fprintf(stderr, "host_path: cuLaunchKernel(meet) failed\n");
    exit(1);
  }
}

static void* rankMain(void* arg) {
  const int rank = (int)(long)arg;
  CK(cudaSetDevice(0));
  struct rankCtx c;
  memset(&c, 0, sizeof(c));
  NK(ncclCommInitRank(&c.comm, nranks, uid, rank));
  CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  CK(cudaMalloc((void**)&c.buf, bytes));
  CK(cudaMemset(c.buf, 0, bytes));
  c.count = bytes / sizeof(float);
  memcpy(c.meetArgs, &meetCounter, sizeof(meetCounter));
  /* The warmup's first call given to our kernels builds their memory. */
  timedLoop(rank, c.stream, issueAllReduce, &c, &ncclCalls[rank]);
  if (rank == 0) __atomic_store_n(&turn, 0, __ATOMIC_RELEASE);
  pthread_barrier_wait(&barrier);
  timedLoop(rank, c.stream, issueMeet, &c, &meetCalls[rank]);
  CK(cudaFree(c.buf));
  CK(cudaStreamDestroy(c.stream));
  NK(ncclCommDestroy(c.comm));
  return NULL;
}

static double bareLaunch(CUfunction fn, void** params) {
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double* t = malloc(sizeof(double) * (size_t)calls);
  if (t == NULL) exit(1);
  for (int i = 0; i < warmup + calls; i++) {
    const double t0 = nowUs();
    if (launchFn(fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)stream, params, NULL) != CUDA_SUCCESS) exit(1);
    if (i >= warmup) t[i - warmup] = nowUs() - t0;
    if ((i + 1) % syncEvery == 0) CK(cudaStreamSynchronize(stream));
  }
  CK(cudaStreamSynchronize(stream));
  double p10, p50, p90;
  summarize(t, calls, &p10, &p50, &p90);
  free(t);
  CK(cudaStreamDestroy(stream));
  return p50;
}

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) nranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--sync")) syncEvery = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--bytes")) bytes = (size_t)atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--turns")) turns = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: host_path [--ranks 2] [--calls 10000] [--sync 100] [--bytes 1024] "
              "[--turns K]\n");
      return 2;
    }
  }
  /* Turns: every rank's stream is synchronized only after its peers had their turn. */
  if (nranks < 1 || nranks > 8 || calls < 10 || syncEvery < 1 || bytes < sizeof(float) ||
      turns < 0 || (turns > 0 && syncEvery % turns != 0))
    return 2;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    fprintf(stderr, "host_path: no GPU\n");
    return 77;
  }
  /* Bare launches first, with the GPU otherwise idle. */
  loadBareKernels();
  char big[328] = {0};
  unsigned small = 1;
  void* bigArgs[] = {big};
  void* smallArgs[] = {&small};
  const double bareBig = bareLaunch(bigFn, bigArgs);
  const double bareSmall = bareLaunch(smallFn, smallArgs);

  NK(ncclGetUniqueId(&uid));
  pthread_barrier_init(&barrier, NULL, (unsigned)nranks);
  pthread_t threads[8];
  for (long r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rankMain, (void*)r);
  for (int r = 0; r < nranks; r++) pthread_join(threads[r], NULL);
  pthread_barrier_destroy(&barrier);

  int version = 0;
  (void)ncclGetVersion(&version);
  printf("host_path: %d ranks on one GPU, %zu-byte float sum, %d calls per rank, sync every %d, "
         "ranks %s %d (NCCL version %d)\n", nranks, bytes, calls, syncEvery,
         turns ? "taking turns of" : "calling at once", turns, version);
  printf("  bare cuLaunchKernel, idle GPU: %.3f us (328-byte argument), %.3f us (4-byte)\n",
         bareBig, bareSmall);
  double worst = 0, worstMeet = 0;
  for (int r = 0; r < nranks; r++) {
    printf("  rank %d ncclAllReduce: median %.3f us (p10 %.3f, p90 %.3f); bare launch that waits "
           "for its peers, issued the same way: %.3f us (p10 %.3f, p90 %.3f)\n", r,
           ncclCalls[r].p50, ncclCalls[r].p10, ncclCalls[r].p90, meetCalls[r].p50,
           meetCalls[r].p10, meetCalls[r].p90);
    if (ncclCalls[r].p50 > worst) worst = ncclCalls[r].p50;
    if (meetCalls[r].p50 > worstMeet) worstMeet = meetCalls[r].p50;
  }
  printf("  slowest rank's median minus bare launch: %.3f us (idle GPU, 328 B), %.3f us (launch "
         "that waits for its peers, same turns)\n", worst - bareBig, worst - worstMeet);
  return 0;
}
