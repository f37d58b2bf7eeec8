/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap on GPUs: collectives at world sizes 1..8 (several ranks per GPU) against a
 * reference computed here, with threads and with one thread driving every rank in a group; calls
 * that return before a peer has called; captured graphs replayed with new inputs; abort, a
 * mismatch and a timeout while streams wait for peers. One line per check group. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <nccl.h>

#include "harness.h"

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#define MAX_WORLD 8
/* Checks made on rank threads running at the same time (CUDA_OK is used there too). */
#define TCHECK(cond) HARNESS_TCHECK(cond)
#define TCHECK_EQ_INT(a, b) HARNESS_TCHECK_EQ_INT(a, b)
#define TCUDA_OK(call) TCHECK_EQ_INT((call), cudaSuccess)
#define CUDA_OK(call) TCUDA_OK(call)

static int ndev;

/* Values chosen so that every result below is exact in every datatype (fp8 e5m2 included):
 * small integers, sums within +-8, products powers of two. */
static int inputValue(int rank, size_t i, int op) {
  uint32_t h = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(i * 40503u + 17);
  h ^= h >> 13;
  if (op == ncclProd) return (h & 1) ? 2 : ((h & 2) ? -1 : 1);
  return (int)(h % 3) - 1;
}

static size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

/* Encodes the small integers used here; each format's exact bit pattern written out by hand. */
static uint32_t encodeSmallFloat(double v, int expBits, int mantBits, int bias) {
  uint32_t sign = v < 0 ? 1u << (expBits + mantBits) : 0;
  double a = fabs(v);
  if (a == 0) return sign;
  int e = ilogb(a);
  uint32_t mant = (uint32_t)((a / ldexp(1.0, e) - 1.0) * (1 << mantBits));
  return sign | ((uint32_t)(e + bias) << mantBits) | mant;
}

static double decodeSmallFloat(uint32_t code, int expBits, int mantBits, int bias) {
  uint32_t mant = code & ((1u << mantBits) - 1), e = (code >> mantBits) & ((1u << expBits) - 1);
  double mag = e == 0 ? ldexp(mant, 1 - bias - mantBits) : ldexp(mant | (1u << mantBits), (int)e - bias - mantBits);
  return (code >> (expBits + mantBits)) & 1 ? -mag : mag;
}

static void storeValue(void* p, size_t i, ncclDataType_t t, double v) {
  switch (t) {
    case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)(int)v; break;
    case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)(int64_t)v; break;
    case ncclInt64: ((int64_t*)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)(int64_t)v; break;
    case ncclFloat32: ((float*)p)[i] = (float)v; break;
    case ncclFloat64: ((double*)p)[i] = v; break;
    case ncclFloat16: ((uint16_t*)p)[i] = (uint16_t)encodeSmallFloat(v, 5, 10, 15); break;
    case ncclBfloat16: ((uint16_t*)p)[i] = (uint16_t)encodeSmallFloat(v, 8, 7, 127); break;
    case ncclFloat8e4m3: ((uint8_t*)p)[i] = (uint8_t)encodeSmallFloat(v, 4, 3, 7); break;
    default: ((uint8_t*)p)[i] = (uint8_t)encodeSmallFloat(v, 5, 2, 15); break;
  }
}

static double loadValue(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return ((const int8_t*)p)[i];
    case ncclUint8: return ((const uint8_t*)p)[i];
    case ncclInt32: return ((const int32_t*)p)[i];
    case ncclUint32: return ((const uint32_t*)p)[i];
    case ncclInt64: return (double)((const int64_t*)p)[i];
    case ncclUint64: return (double)((const uint64_t*)p)[i];
    case ncclFloat32: return ((const float*)p)[i];
    case ncclFloat64: return ((const double*)p)[i];
    case ncclFloat16: return decodeSmallFloat(((const uint16_t*)p)[i], 5, 10, 15);
    case ncclBfloat16: return decodeSmallFloat(((const uint16_t*)p)[i], 8, 7, 127);
    case ncclFloat8e4m3: return decodeSmallFloat(((const uint8_t*)p)[i], 4, 3, 7);
    default: return decodeSmallFloat(((const uint8_t*)p)[i], 5, 2, 15);
  }
}

static int isUnsigned(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }
static int isInt(ncclDataType_t t) { return t <= ncclUint64; }

/* An integer element as the type holds it: wrapped to its width, sign- or zero-extended. */
static int64_t wrapInt(uint64_t v, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return (int8_t)(uint8_t)v;
    case ncclUint8: return (uint8_t)v;
    case ncclInt32: return (int32_t)(uint32_t)v;
    case ncclUint32: return (uint32_t)v;
    default: return (int64_t)v; /* 64-bit: compared as raw bits */
  }
}

static int lessInt(int64_t a, int64_t b, ncclDataType_t t) {
  return isUnsigned(t) ? (uint64_t)a < (uint64_t)b : a < b;
}

/* Expected integer result of element i, wrapped like the device type. */
static int64_t expectedInt(int nranks, size_t i, ncclDataType_t t, ncclRedOp_t op) {
  int64_t acc = 0;
  for (int r = 0; r < nranks; r++) {
    int64_t v = wrapInt((uint64_t)(int64_t)inputValue(r, i, op), t);
    if (r == 0) acc = v;
    else if (op == ncclSum || op == ncclAvg) acc = wrapInt((uint64_t)acc + (uint64_t)v, t);
    else if (op == ncclProd) acc = wrapInt((uint64_t)acc * (uint64_t)v, t);
    else if (op == ncclMin) acc = lessInt(v, acc, t) ? v : acc;
    else acc = lessInt(acc, v, t) ? v : acc;
  }
  if (op == ncclAvg) acc = isUnsigned(t) ? (int64_t)((uint64_t)acc / (uint64_t)nranks) : acc / nranks;
  return wrapInt((uint64_t)acc, t);
}

static int64_t loadInt(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return ((const int8_t*)p)[i];
    case ncclUint8: return ((const uint8_t*)p)[i];
    case ncclInt32: return ((const int32_t*)p)[i];
    case ncclUint32: return ((const uint32_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}

/* The expected floating result of element i (exact but for avg). */
static double expectedFloat(int nranks, size_t i, ncclRedOp_t op) {
  double acc = 0;
  for (int r = 0; r < nranks; r++) {
    double v = inputValue(r, i, op);
    if (r == 0) acc = v;
    else if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  return op == ncclAvg ? acc / nranks : acc;
}

static double tolerance(ncclDataType_t t, ncclRedOp_t op, double want) {
  if (op != ncclAvg) return 0;
  double rel = t == ncclFloat64 ? 1e-15 : t == ncclFloat32 ? 1e-7 : t == ncclFloat16 ? 1e-3
               : t == ncclBfloat16 ? 8e-3 : t == ncclFloat8e4m3 ? 0.07 : 0.13;
  return fabs(want) * rel;
}

struct world {
  int nranks, grouped;
  ncclComm_t comms[MAX_WORLD];
  cudaStream_t streams[MAX_WORLD];
  void *send[MAX_WORLD], *recv[MAX_WORLD];
  pthread_barrier_t barrier;
};

enum { COUNT_MAX = 1031 };
static const size_t counts[] = {1, 7, 1031};
static const ncclDataType_t types[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                       ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
                                       ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMin, ncclMax, ncclAvg};

static pthread_mutex_t checkLock = PTHREAD_MUTEX_INITIALIZER;

/* Fills rank r's input, runs the collective (one rank, or all in a group), checks rank r. */
static void fillInput(struct world* w, int r, size_t n, ncclDataType_t t, ncclRedOp_t op, int inPlace) {
  size_t bytes = n * typeSize(t);
  char* host = malloc(bytes);
  for (size_t i = 0; i < n; i++) storeValue(host, i, t, inputValue(r, i, op));
  void* dst = inPlace ? w->recv[r] : w->send[r];
  cudaSetDevice(r % ndev);
  CUDA_OK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, w->streams[r]));
  /* Poison the output so a missed write shows. */
  if (!inPlace) CUDA_OK(cudaMemsetAsync(w->recv[r], 0x5a, bytes, w->streams[r]));
  CUDA_OK(cudaStreamSynchronize(w->streams[r]));
  free(host);
}

static int checkAllReduce(struct world* w, int r, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  size_t bytes = n * typeSize(t);
  char* host = malloc(bytes);
  cudaSetDevice(r % ndev);
  /* Calls only enqueue: the result is there once the rank's stream is. */
  int bad = cudaStreamSynchronize(w->streams[r]) != cudaSuccess;
  bad |= cudaMemcpy(host, w->recv[r], bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
  for (size_t i = 0; i < n && !bad; i++) {
    if (isInt(t)) {
      int64_t want = expectedInt(w->nranks, i, t, op), got = loadInt(host, i, t);
      if (got != want) {
        fprintf(stderr, "world %d rank %d type %d op %d count %zu [%zu]: got %lld want %lld\n",
                w->nranks, r, (int)t, (int)op, n, i, (long long)got, (long long)want);
        bad = 1;
      }
      continue;
    }
    double want = expectedFloat(w->nranks, i, op), got = loadValue(host, i, t);
    if (!(fabs(got - want) <= tolerance(t, op, want))) {
      fprintf(stderr, "world %d rank %d type %d op %d count %zu [%zu]: got %g want %g\n", w->nranks,
              r, (int)t, (int)op, n, i, got, want);
      bad = 1;
    }
  }
  free(host);
  return bad;
}

static void runAllReduces(struct world* w, int r) {
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
      for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
        size_t n = counts[c];
        ncclDataType_t t = types[ti];
        ncclRedOp_t op = ops[oi];
        int inPlace = (int)((c + ti + oi) & 1);
        int lo = w->grouped ? 0 : r, hi = w->grouped ? w->nranks : r + 1;
        for (int k = lo; k < hi; k++) fillInput(w, k, n, t, op, inPlace);
        ncclResult_t res = ncclSuccess;
        if (w->grouped) ncclGroupStart();
        for (int k = lo; k < hi && res == ncclSuccess; k++)
          res = ncclAllReduce(inPlace ? w->recv[k] : w->send[k], w->recv[k], n, t, op, w->comms[k],
                              w->streams[k]);
        if (w->grouped) {
          ncclResult_t e = ncclGroupEnd();
          if (res == ncclSuccess) res = e;
        }
        int bad = res != ncclSuccess;
        for (int k = lo; k < hi; k++) bad |= checkAllReduce(w, k, n, t, op);
        pthread_mutex_lock(&checkLock);
        CHECK_EQ_INT(res, ncclSuccess);
        CHECK_EQ_INT(bad, 0);
        pthread_mutex_unlock(&checkLock);
      }
}

/* AllGather, Broadcast and ReduceScatter with int32 data (rank, index) encoded. */
static void runOthers(struct world* w, int r) {
  const size_t n = 333;
  int lo = w->grouped ? 0 : r, hi = w->grouped ? w->nranks : r + 1;
  int nr = w->nranks;
  int32_t* host = malloc(n * (size_t)nr * sizeof(int32_t));
  for (int k = lo; k < hi; k++) {
    for (size_t i = 0; i < n * (size_t)nr; i++) host[i] = k * 100000 + (int32_t)i;
    cudaSetDevice(k % ndev);
    /* On the rank's stream: the legacy stream is not ordered with the bootstrap's copies. */
    CUDA_OK(cudaMemcpyAsync(w->send[k], host, n * (size_t)nr * sizeof(int32_t),
                            cudaMemcpyHostToDevice, w->streams[k]));
    CUDA_OK(cudaMemsetAsync(w->recv[k], 0xa5, n * (size_t)nr * sizeof(int32_t), w->streams[k]));
    CUDA_OK(cudaStreamSynchronize(w->streams[k]));
  }
  for (int kind = 0; kind < 3; kind++) {
    ncclResult_t res = ncclSuccess;
    if (w->grouped) ncclGroupStart();
    for (int k = lo; k < hi; k++) {
      ncclResult_t e = kind == 0 ? ncclAllGather(w->send[k], w->recv[k], n, ncclInt32, w->comms[k], w->streams[k])
                     : kind == 1 ? ncclBroadcast(w->send[k], w->recv[k], n, ncclInt32, nr - 1, w->comms[k], w->streams[k])
                                 : ncclReduceScatter(w->send[k], w->recv[k], n, ncclInt32, ncclSum, w->comms[k], w->streams[k]);
      if (res == ncclSuccess) res = e;
    }
    if (w->grouped) {
      ncclResult_t e = ncclGroupEnd();
      if (res == ncclSuccess) res = e;
    }
    int bad = res != ncclSuccess;
    int32_t* got = malloc(n * (size_t)nr * sizeof(int32_t));
    for (int k = lo; k < hi; k++) {
      size_t outCount = kind == 0 ? n * (size_t)nr : n;
      cudaSetDevice(k % ndev);
      bad |= cudaStreamSynchronize(w->streams[k]) != cudaSuccess;
      bad |= cudaMemcpy(got, w->recv[k], outCount * sizeof(int32_t), cudaMemcpyDeviceToHost) != cudaSuccess;
      for (size_t i = 0; i < outCount && !bad; i++) {
        int64_t want;
        if (kind == 0) want = (int64_t)(i / n) * 100000 + (int64_t)(i % n);
        else if (kind == 1) want = (int64_t)(nr - 1) * 100000 + (int64_t)i;
        else {
          want = 0;
          for (int s = 0; s < nr; s++) want += (int64_t)s * 100000 + (int64_t)((size_t)k * n + i);
        }
        if (got[i] != (int32_t)want) {
          fprintf(stderr, "world %d rank %d kind %d [%zu]: got %d want %lld\n", nr, k, kind, i,
                  got[i], (long long)want);
          bad = 1;
        }
      }
    }
    free(got);
    pthread_mutex_lock(&checkLock);
    CHECK_EQ_INT(res, ncclSuccess);
    CHECK_EQ_INT(bad, 0);
    pthread_mutex_unlock(&checkLock);
  }
  free(host);
}

static void allocRank(struct world* w, int r) {
  size_t bytes = (size_t)COUNT_MAX * 8 * MAX_WORLD;
  CUDA_OK(cudaSetDevice(r % ndev));
  CUDA_OK(cudaStreamCreateWithFlags(&w->streams[r], cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&w->send[r], bytes));
  CUDA_OK(cudaMalloc(&w->recv[r], bytes));
}

static void freeRank(struct world* w, int r) {
  cudaSetDevice(r % ndev);
  CUDA_OK(cudaStreamDestroy(w->streams[r]));
  CUDA_OK(cudaFree(w->send[r]));
  CUDA_OK(cudaFree(w->recv[r]));
  CHECK_EQ_INT(ncclCommDestroy(w->comms[r]), ncclSuccess);
}

struct rankArg {
  struct world* w;
  int rank;
  ncclUniqueId id;
  ncclResult_t initRes;
};

static void* rankMain(void* p) {
  struct rankArg* a = p;
  struct world* w = a->w;
  allocRank(w, a->rank);
  a->initRes = ncclCommInitRank(&w->comms[a->rank], w->nranks, a->id, a->rank);
  if (a->initRes == ncclSuccess) {
    int dev = -1;
    ncclCommCuDevice(w->comms[a->rank], &dev);
    pthread_mutex_lock(&checkLock);
    CHECK_EQ_INT(dev, a->rank % ndev);
    pthread_mutex_unlock(&checkLock);
    runAllReduces(w, a->rank);
    runOthers(w, a->rank);
    freeRank(w, a->rank);
  }
  return NULL;
}

/* --- stream order: calls return at once, streams wait for the peers ------------------------- */

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls `s` until it has drained or `limitMs` passed; cudaSuccess once drained. */
static cudaError_t drainWithin(cudaStream_t s, double limitMs) {
  const double t0 = nowMs();
  cudaError_t e = cudaStreamQuery(s);
  while (e == cudaErrorNotReady && nowMs() - t0 < limitMs) {
    sleepMs(1);
    e = cudaStreamQuery(s);
  }
  return e;
}

/* Wrong elements of an int32 result read back from the device (-1: the copy failed). */
static long wrongInts(const int32_t* dev, const int32_t* want, size_t n) {
  int32_t* got = malloc(n * sizeof(int32_t));
  if (got == NULL ||
      cudaMemcpy(got, dev, n * sizeof(int32_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
    free(got);
    return -1;
  }
  long wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += got[i] != want[i];
  free(got);
  return wrong;
}

static int32_t pattern(int rank, size_t i, int salt) {
  return (int32_t)((rank + 1) * 1000 + (int)(i % 997) + salt * 7);
}

/* Fills `host` with rank's pattern, `want` with the sum over `nranks` ranks. */
static void sumPattern(int32_t* host, int32_t* want, int rank, int nranks, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) {
    host[i] = pattern(rank, i, salt);
    want[i] = 0;
    for (int q = 0; q < nranks; q++) want[i] += pattern(q, i, salt);
  }
}

struct asyncArg {
  ncclUniqueId id;
  int rank, nranks;
};
static int peersCalled; /* (a): ranks other than 0 that have called */

/* (a) Rank 0 calls at once; every other rank sleeps 200 ms first. Rank 0's call returns before
 * any peer has called, its stream waits for them, and the result is right. */
#define ASYNC_COUNT 4099
static void* asyncRank(void* p) {
  struct asyncArg* a = p;
  ncclComm_t comm = NULL;
  cudaStream_t s = NULL;
  int32_t *in = NULL, *out = NULL;
  int32_t* host = malloc(ASYNC_COUNT * sizeof(int32_t));
  int32_t* want = malloc(ASYNC_COUNT * sizeof(int32_t));
  TCHECK(host != NULL && want != NULL);
  if (host == NULL || want == NULL) goto free_host;
  /* Allocations before the rendezvous: one may synchronize the device while a peer's stream
   * already waits for us. */
  TCUDA_OK(cudaSetDevice(a->rank % ndev));
  TCUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TCUDA_OK(cudaMalloc((void**)&in, ASYNC_COUNT * sizeof(int32_t)));
  TCUDA_OK(cudaMalloc((void**)&out, ASYNC_COUNT * sizeof(int32_t)));
  if (s == NULL || in == NULL || out == NULL) goto free_host;
  sumPattern(host, want, a->rank, a->nranks, ASYNC_COUNT, 0);
  TCUDA_OK(cudaMemcpy(in, host, ASYNC_COUNT * sizeof(int32_t), cudaMemcpyHostToDevice));
  TCUDA_OK(cudaMemset(out, 0x5a, ASYNC_COUNT * sizeof(int32_t)));
  TCUDA_OK(cudaDeviceSynchronize());
  TCHECK_EQ_INT(ncclCommInitRank(&comm, a->nranks, a->id, a->rank), ncclSuccess);
  if (comm == NULL) goto free_host;
  if (a->rank != 0) {
    sleepMs(200);
    __atomic_add_fetch(&peersCalled, 1, __ATOMIC_SEQ_CST);
  }
  const double t0 = nowMs();
  TCHECK_EQ_INT(ncclAllReduce(in, out, ASYNC_COUNT, ncclInt32, ncclSum, comm, s), ncclSuccess);
  if (a->rank == 0) {
    const double took = nowMs() - t0;
    TCHECK_EQ_INT(__atomic_load_n(&peersCalled, __ATOMIC_SEQ_CST), 0);
    TCHECK_EQ_INT(cudaStreamQuery(s), cudaErrorNotReady); /* waits for the peers */
    if (__atomic_load_n(&peersCalled, __ATOMIC_SEQ_CST) != 0)
      fprintf(stderr, "async: rank 0's ncclAllReduce returned after %.1f ms, after a peer called\n",
              took);
  }
  TCUDA_OK(cudaStreamSynchronize(s));
  TCHECK_EQ_INT(wrongInts(out, want, ASYNC_COUNT), 0);
free_host:
  if (in) TCUDA_OK(cudaFree(in));
  if (out) TCUDA_OK(cudaFree(out));
  if (s) TCUDA_OK(cudaStreamDestroy(s));
  if (comm) TCHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  free(host);
  free(want);
  return NULL;
}

static void asyncReturn(int nranks) {
  struct asyncArg args[MAX_WORLD];
  pthread_t tids[MAX_WORLD];
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  peersCalled = 0;
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct asyncArg){.id = id, .rank = r, .nranks = nranks};
    CHECK_EQ_INT(pthread_create(&tids[r], NULL, asyncRank, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(tids[r], NULL);
}

/* (b) Captured graphs: an all-reduce, the input overwritten right after it, an all-gather;
 * replayed GRAPH_REPLAYS times with new inputs written before each replay (and an eager call
 * now and then between replays), every result checked on the host. Rank 0 destroys its graph
 * before its communicator, the others after theirs. */
#define GRAPH_N 1031
#define GRAPH_M 257
#define GRAPH_REPLAYS 200
static void* graphRank(void* p) {
  struct asyncArg* a = p;
  const int nr = a->nranks;
  ncclComm_t comm = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int32_t *send = NULL, *recv = NULL, *send2 = NULL, *gathered = NULL, *eager = NULL;
  int32_t* hostIn = malloc(GRAPH_N * sizeof(int32_t));
  int32_t* wantSum = malloc(GRAPH_N * sizeof(int32_t));
  int32_t* hostIn2 = malloc(GRAPH_M * sizeof(int32_t));
  int32_t* wantSum2 = malloc(GRAPH_M * sizeof(int32_t));
  int32_t* wantGather = malloc(GRAPH_M * (size_t)nr * sizeof(int32_t));
  long wrong = 0, eagerWrong = 0;
  TCHECK(hostIn && wantSum && hostIn2 && wantSum2 && wantGather);
  if (!(hostIn && wantSum && hostIn2 && wantSum2 && wantGather)) goto free_host;
  TCUDA_OK(cudaSetDevice(a->rank % ndev));
  TCUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TCUDA_OK(cudaMalloc((void**)&send, GRAPH_N * sizeof(int32_t)));
  TCUDA_OK(cudaMalloc((void**)&recv, GRAPH_N * sizeof(int32_t)));
  TCUDA_OK(cudaMalloc((void**)&send2, GRAPH_M * sizeof(int32_t)));
  TCUDA_OK(cudaMalloc((void**)&gathered, GRAPH_M * (size_t)nr * sizeof(int32_t)));
  TCUDA_OK(cudaMalloc((void**)&eager, GRAPH_M * sizeof(int32_t)));
  TCHECK_EQ_INT(ncclCommInitRank(&comm, nr, a->id, a->rank), ncclSuccess); /* after allocating */
  if (!(comm && s && send && recv && send2 && gathered && eager)) goto free_device;
  TCUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  TCHECK_EQ_INT(ncclAllReduce(send, recv, GRAPH_N, ncclInt32, ncclSum, comm, s), ncclSuccess);
  TCUDA_OK(cudaMemsetAsync(send, 0xff, GRAPH_N * sizeof(int32_t), s)); /* read before this */
  TCHECK_EQ_INT(ncclAllGather(send2, gathered, GRAPH_M, ncclInt32, comm, s), ncclSuccess);
  TCUDA_OK(cudaStreamEndCapture(s, &graph));
  if (graph != NULL) TCUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  if (exec == NULL) goto free_device;
  for (int it = 0; it < GRAPH_REPLAYS; it++) {
    sumPattern(hostIn, wantSum, a->rank, nr, GRAPH_N, it);
    sumPattern(hostIn2, wantSum2, a->rank, nr, GRAPH_M, it + 1000);
    for (int q = 0; q < nr; q++)
      for (size_t i = 0; i < GRAPH_M; i++)
        wantGather[(size_t)q * GRAPH_M + i] = pattern(q, i, it + 1000);
    TCUDA_OK(cudaMemcpyAsync(send, hostIn, GRAPH_N * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    TCUDA_OK(cudaMemcpyAsync(send2, hostIn2, GRAPH_M * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    TCUDA_OK(cudaMemsetAsync(recv, 0x5a, GRAPH_N * sizeof(int32_t), s));
    TCUDA_OK(cudaMemsetAsync(gathered, 0x5a, GRAPH_M * (size_t)nr * sizeof(int32_t), s));
    const int withEager = it % 10 == 5; /* eager and graph operations on one stream */
    if (withEager)
      TCHECK_EQ_INT(ncclAllReduce(send2, eager, GRAPH_M, ncclInt32, ncclSum, comm, s), ncclSuccess);
    TCUDA_OK(cudaGraphLaunch(exec, s));
    TCUDA_OK(cudaStreamSynchronize(s));
    const long w1 = wrongInts(recv, wantSum, GRAPH_N);
    const long w2 = wrongInts(gathered, wantGather, GRAPH_M * (size_t)nr);
    if (w1 != 0 || w2 != 0)
      fprintf(stderr, "graph: world %d rank %d replay %d: %ld wrong in the all-reduce, %ld in the "
              "all-gather\n", nr, a->rank, it, w1, w2);
    wrong += (w1 != 0) + (w2 != 0);
    if (withEager) eagerWrong += wrongInts(eager, wantSum2, GRAPH_M) != 0;
  }
  TCHECK_EQ_INT(wrong, 0);
  TCHECK_EQ_INT(eagerWrong, 0);
free_device:
  if (a->rank == 0) { /* graph first */
    if (exec) TCUDA_OK(cudaGraphExecDestroy(exec));
    if (graph) TCUDA_OK(cudaGraphDestroy(graph));
    exec = NULL;
    graph = NULL;
  }
  if (comm) TCHECK_EQ_INT(ncclCommDestroy(comm), ncclSuccess);
  /* The others' graphs outlive their communicators. */
  if (exec) TCUDA_OK(cudaGraphExecDestroy(exec));
  if (graph) TCUDA_OK(cudaGraphDestroy(graph));
  if (send) TCUDA_OK(cudaFree(send));
  if (recv) TCUDA_OK(cudaFree(recv));
  if (send2) TCUDA_OK(cudaFree(send2));
  if (gathered) TCUDA_OK(cudaFree(gathered));
  if (eager) TCUDA_OK(cudaFree(eager));
  if (s) TCUDA_OK(cudaStreamDestroy(s));
free_host:
  free(hostIn);
  free(wantSum);
  free(hostIn2);
  free(wantSum2);
  free(wantGather);
  return NULL;
}

static void graphReplays(int nranks) {
  struct asyncArg args[MAX_WORLD];
  pthread_t tids[MAX_WORLD];
  ncclUniqueId id;
  CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < nranks; r++) {
    args[r] = (struct asyncArg){.id = id, .rank = r, .nranks = nranks};
    CHECK_EQ_INT(pthread_create(&tids[r], NULL, graphRank, &args[r]), 0);
  }
  for (int r = 0; r < nranks; r++) pthread_join(tids[r], NULL);
}

/* Two ranks made by one thread (ncclCommInitAll), each with a stream and int32 buffers. */
struct pair {
  ncclComm_t comms[2];
  cudaStream_t streams[2];
  int32_t *in[2], *out[2];
};
#define PAIR_COUNT 4096

static int pairOpen(struct pair* p) {
  memset(p, 0, sizeof(*p));
  CHECK_EQ_INT(ncclCommInitAll(p->comms, 2, NULL), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    CUDA_OK(cudaSetDevice(r % ndev));
    CUDA_OK(cudaStreamCreateWithFlags(&p->streams[r], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void**)&p->in[r], PAIR_COUNT * sizeof(int32_t)));
    CUDA_OK(cudaMalloc((void**)&p->out[r], PAIR_COUNT * sizeof(int32_t)));
    if (p->in[r] == NULL || p->out[r] == NULL) return 0;
    /* On the rank's stream: the legacy stream is not ordered with the bootstrap's copies. */
    CUDA_OK(cudaMemsetAsync(p->in[r], 1, PAIR_COUNT * sizeof(int32_t), p->streams[r]));
    CUDA_OK(cudaMemsetAsync(p->out[r], 0x5a, PAIR_COUNT * sizeof(int32_t), p->streams[r]));
    CUDA_OK(cudaStreamSynchronize(p->streams[r])); /* untouched output: 0x5a5a5a5a */
  }
  return p->comms[0] != NULL && p->comms[1] != NULL;
}

static void pairClose(struct pair* p) {
  for (int r = 0; r < 2; r++) {
    if (p->comms[r]) CHECK_EQ_INT(ncclCommDestroy(p->comms[r]), ncclSuccess);
    CUDA_OK(cudaSetDevice(r % ndev));
    if (p->streams[r]) CUDA_OK(cudaStreamDestroy(p->streams[r]));
    if (p->in[r]) CUDA_OK(cudaFree(p->in[r]));
    if (p->out[r]) CUDA_OK(cudaFree(p->out[r]));
  }
}

/* Elements of rank r's output that an operation wrote (0 when none ran). */
static long written(const struct pair* p, int r) {
  int32_t* want = malloc(PAIR_COUNT * sizeof(int32_t));
  if (want == NULL) return -1;
  for (size_t i = 0; i < PAIR_COUNT; i++) want[i] = 0x5a5a5a5a;
  CUDA_OK(cudaSetDevice(r % ndev));
  const long n = wrongInts(p->out[r], want, PAIR_COUNT);
  free(want);
  return n;
}

/* Rank r's all-reduce of `count` int32 on its own stream. */
static ncclResult_t pairAllReduce(const struct pair* p, int r, size_t count) {
  return ncclAllReduce(p->in[r], p->out[r], count, ncclInt32, ncclSum, p->comms[r], p->streams[r]);
}

static void* abortLater(void* arg) {
  CHECK_EQ_INT(ncclCommAbort((ncclComm_t)arg), ncclSuccess);
  return NULL;
}

/* (c) Rank 0's stream waits for rank 1, which never calls; another thread aborts rank 0: the
 * stream drains within 2 s, nothing is written, rank 1 learns ncclRemoteError. Then a new
 * world works. */
static void abortWhileStalled(void) {
  struct pair p;
  if (!pairOpen(&p)) {
    pairClose(&p);
    return;
  }
  CUDA_OK(cudaSetDevice(0));
  CHECK_EQ_INT(pairAllReduce(&p, 0, PAIR_COUNT), ncclSuccess);
  sleepMs(200);
  CHECK_EQ_INT(cudaStreamQuery(p.streams[0]), cudaErrorNotReady);
  pthread_t tid;
  const double t0 = nowMs();
  CHECK_EQ_INT(pthread_create(&tid, NULL, abortLater, p.comms[0]), 0);
  const cudaError_t e = drainWithin(p.streams[0], 3000);
  const double ms = nowMs() - t0;
  pthread_join(tid, NULL);
  p.comms[0] = NULL;
  CHECK_EQ_INT(e, cudaSuccess);
  CHECK(ms < 2000);
  printf("bootstrap_gpu: abort: the waiting stream drained %.1f ms after ncclCommAbort\n", ms);
  CHECK_EQ_INT(written(&p, 0), 0);
  ncclResult_t state = ncclSuccess;
  CHECK_EQ_INT(ncclCommGetAsyncError(p.comms[1], &state), ncclSuccess);
  CHECK_EQ_INT(state, ncclRemoteError);
  CUDA_OK(cudaSetDevice(1 % ndev));
  CHECK_EQ_INT(pairAllReduce(&p, 1, PAIR_COUNT), ncclRemoteError);
  CHECK_EQ_INT(cudaStreamQuery(p.streams[1]), cudaSuccess); /* nothing was enqueued */
  pairClose(&p);

  /* A new world on the same GPUs works: one thread, both ranks, one group. */
  if (!pairOpen(&p)) {
    pairClose(&p);
    return;
  }
  CHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++)
    CHECK_EQ_INT(pairAllReduce(&p, r, PAIR_COUNT), ncclSuccess);
  CHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  int32_t* want = malloc(PAIR_COUNT * sizeof(int32_t));
  for (size_t i = 0; want != NULL && i < PAIR_COUNT; i++) want[i] = 2 * 0x01010101;
  for (int r = 0; r < 2 && want != NULL; r++) {
    CUDA_OK(cudaSetDevice(r % ndev));
    CUDA_OK(cudaStreamSynchronize(p.streams[r]));
    CHECK_EQ_INT(wrongInts(p.out[r], want, PAIR_COUNT), 0);
  }
  free(want);
  pairClose(&p);
}

/* (e) Runtime failures surface through ncclCommGetAsyncError and release the waiting streams:
 * ranks that disagree on the count (one thread calls both, no group: calls do not block), and a
 * rank whose peer never calls (SYMM_BOOTSTRAP_TIMEOUT=1). Later calls fail at once. */
static void asyncErrors(void) {
  struct pair p;
  if (pairOpen(&p)) {
    for (int r = 0; r < 2; r++) {
      CUDA_OK(cudaSetDevice(r % ndev));
      CHECK_EQ_INT(pairAllReduce(&p, r, 100 + (size_t)r), ncclSuccess);
    }
    for (int r = 0; r < 2; r++) {
      CUDA_OK(cudaSetDevice(r % ndev));
      CHECK_EQ_INT(drainWithin(p.streams[r], 2000), cudaSuccess);
      ncclResult_t state = ncclSuccess;
      CHECK_EQ_INT(ncclCommGetAsyncError(p.comms[r], &state), ncclSuccess);
      CHECK_EQ_INT(state, ncclInvalidUsage);
      CHECK_EQ_INT(written(&p, r), 0);
      CHECK_EQ_INT(pairAllReduce(&p, r, 100), ncclInvalidUsage);
    }
  }
  pairClose(&p);

  const char* limit = getenv("SYMM_BOOTSTRAP_TIMEOUT");
  char* saved = limit != NULL ? strdup(limit) : NULL;
  setenv("SYMM_BOOTSTRAP_TIMEOUT", "1", 1);
  if (pairOpen(&p)) {
    CUDA_OK(cudaSetDevice(0));
    const double t0 = nowMs();
    CHECK_EQ_INT(pairAllReduce(&p, 0, PAIR_COUNT), ncclSuccess);
    CHECK_EQ_INT(drainWithin(p.streams[0], 5000), cudaSuccess);
    const double ms = nowMs() - t0;
    CHECK(ms >= 900 && ms < 4000);
    printf("bootstrap_gpu: timeout: the waiting stream drained %.0f ms after the call (1 s)\n", ms);
    CHECK_EQ_INT(written(&p, 0), 0);
    for (int r = 0; r < 2; r++) {
      ncclResult_t state = ncclSuccess;
      CHECK_EQ_INT(ncclCommGetAsyncError(p.comms[r], &state), ncclSuccess);
      CHECK_EQ_INT(state, ncclSystemError);
    }
  }
  pairClose(&p);
  if (saved != NULL) setenv("SYMM_BOOTSTRAP_TIMEOUT", saved, 1);
  else unsetenv("SYMM_BOOTSTRAP_TIMEOUT");
  free(saved);
}

/* --- driver ---------------------------------------------------------------------------------- */

static int lineChecks, lineFailures;
static void lineBegin(void) {
  lineChecks = harnessChecks;
  lineFailures = harnessFailures;
}
static void lineEnd(const char* what) {
  printf("bootstrap_gpu: %-58s %d checks, %d failed\n", what, harnessChecks - lineChecks,
         harnessFailures - lineFailures);
  fflush(stdout);
}

/* Every collective, type and op, one thread per rank (grouped = 0) or one thread for all. */
static void sweep(int nranks, int grouped) {
  if (!grouped) {
    struct world w = {.nranks = nranks};
    struct rankArg args[MAX_WORLD];
    pthread_t tids[MAX_WORLD];
    ncclUniqueId id;
    CHECK_EQ_INT(ncclGetUniqueId(&id), ncclSuccess);
    for (int r = 0; r < nranks; r++) {
      args[r] = (struct rankArg){.w = &w, .rank = r, .id = id};
      pthread_create(&tids[r], NULL, rankMain, &args[r]);
    }
    for (int r = 0; r < nranks; r++) {
      pthread_join(tids[r], NULL);
      CHECK_EQ_INT(args[r].initRes, ncclSuccess);
    }
    return;
  }
  struct world g = {.nranks = nranks, .grouped = 1};
  for (int r = 0; r < nranks; r++) allocRank(&g, r);
  CHECK_EQ_INT(ncclCommInitAll(g.comms, nranks, NULL), ncclSuccess);
  runAllReduces(&g, 0);
  runOthers(&g, 0);
  for (int r = 0; r < nranks; r++) freeRank(&g, r);
}

int main(void) {
  harnessManyStreamsPerGpu();
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("bootstrap_gpu: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  lineBegin();
  asyncReturn(2);
  asyncReturn(4);
  lineEnd("(a) rank 0's call returns before its peers call (2, 4)");
  lineBegin();
  graphReplays(2);
  graphReplays(3);
  lineEnd("(b) captured graphs, 200 replays with new inputs (2, 3)");
  lineBegin();
  abortWhileStalled();
  lineEnd("(c) abort while a stream waits for a peer: drained < 2 s");
  lineBegin();
  for (int nranks = 1; nranks <= MAX_WORLD; nranks++) sweep(nranks, 0);
  lineEnd("every collective/type/op, a thread per rank (1..8)");
  lineBegin();
  for (int nranks = 1; nranks <= MAX_WORLD; nranks++) sweep(nranks, 1);
  lineEnd("(d) every collective/type/op, one thread in groups (1..8)");
  lineBegin();
  asyncErrors();
  lineEnd("(e) mismatch and timeout through ncclCommGetAsyncError");
  return harnessReport("bootstrap_gpu");
}
