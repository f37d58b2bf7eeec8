/* SPDX-License-Identifier: Apache-2.0 */
/* The test bootstrap on GPUs: collectives at world sizes 1..8 (several ranks per GPU) against a
 * reference computed here, with threads and with one thread driving every rank in a group. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <nccl.h>

#include "harness.h"

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#define MAX_WORLD 8
#define CUDA_OK(call) CHECK_EQ_INT((call), cudaSuccess)

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

static int isUnsigned(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }
static int isInt(ncclDataType_t t) { return t <= ncclUint64; }

static int64_t loadInt(const void* p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return ((const int8_t*)p)[i];
    case ncclUint8: return ((const uint8_t*)p)[i];
    case ncclInt32: return ((const int32_t*)p)[i];
    case ncclUint32: return ((const uint32_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}

static double loadValue(const void* p, size_t i, ncclDataType_t t) {
  if (t == ncclUint64) return (double)((const uint64_t*)p)[i];
  if (isInt(t)) return (double)loadInt(p, i, t);
  switch (t) {
    case ncclFloat32: return ((const float*)p)[i];
    case ncclFloat64: return ((const double*)p)[i];
    case ncclFloat16: return decodeSmallFloat(((const uint16_t*)p)[i], 5, 10, 15);
    case ncclBfloat16: return decodeSmallFloat(((const uint16_t*)p)[i], 8, 7, 127);
    case ncclFloat8e4m3: return decodeSmallFloat(((const uint8_t*)p)[i], 4, 3, 7);
    default: return decodeSmallFloat(((const uint8_t*)p)[i], 5, 2, 15);
  }
}


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
  int bad = cudaMemcpy(host, w->recv[r], bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
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
    /* On the rank's stream: a pageable cudaMemcpy may return before its last bytes land, and
     * cudaMemset is asynchronous; neither orders a non-blocking stream. */
    CUDA_OK(cudaMemcpyAsync(w->send[k], host, n * (size_t)nr * sizeof(int32_t),
                            cudaMemcpyHostToDevice, w->streams[k]));
    CUDA_OK(cudaMemsetAsync(w->recv[k], 0xa5, n * (size_t)nr * sizeof(int32_t), w->streams[k]));
    CUDA_OK(cudaStreamSynchronize(w->streams[k])); /* `host` is reused for the next rank */
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

int main(void) {
  harnessManyStreamsPerGpu();
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("bootstrap_gpu: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  for (int nranks = 1; nranks <= MAX_WORLD; nranks++) {
    /* Threads, one per rank. */
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
    /* One thread, every rank, through ncclCommInitAll and groups. */
    struct world g = {.nranks = nranks, .grouped = 1};
    for (int r = 0; r < nranks; r++) allocRank(&g, r);
    CHECK_EQ_INT(ncclCommInitAll(g.comms, nranks, NULL), ncclSuccess);
    runAllReduces(&g, 0);
    runOthers(&g, 0);
    for (int r = 0; r < nranks; r++) freeRank(&g, r);
  }
  return harnessReport("bootstrap_gpu");
}
