/* SPDX-License-Identifier: Apache-2.0 */
/* Host cost of the CUDA calls on our eager all-reduce path, one at a time (perf/RESULTS.md):
 * kernel launches with a small and with an all-reduce-sized argument block (runtime and driver),
 * cudaEventRecord, the stream queries, cudaGetDevice, and all of them in the sequence one eager
 * call of ours makes; the same for the driver calls of a replayed call, two other ways to mark
 * a launch's end for another stream, and the locks of our own code. Prints microseconds per call
 * (median of 11 batches). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

/* CUDA 13 gave the edge-data form the plain name; 12.3-12.9 call it _v3 (as src/core/order.c). */
#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#endif

struct Big {
  char bytes[328]; /* about sizeof(symm::KernelArgs) */
};
__global__ void smallKernel(int x) {
  if (x == 12345) printf("never\n");
}
__global__ void bigKernel(Big b) {
  if (b.bytes[0] == 123) printf("never\n");
}

enum { kBatch = 400, kBatches = 11 };

template <typename F> static double perCall(const char* name, cudaStream_t s, F body) {
  double t[kBatches];
  for (int b = 0; b < kBatches; b++) {
    CK(cudaStreamSynchronize(s));
    double t0 = benchNowUs();
    for (int i = 0; i < kBatch; i++) body();
    t[b] = (benchNowUs() - t0) / kBatch;
  }
  CK(cudaStreamSynchronize(s));
  qsort(t, kBatches, sizeof(double), benchCmpDouble);
  printf("%-40s %8.3f us/call\n", name, t[kBatches / 2]);
  return t[kBatches / 2];
}

/* A driver entry point by name (CUDA 12.0 ABI), or exit. */
static void* driverFn(const char* name) {
  void* fn = NULL;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
  if (fn == NULL) {
    fprintf(stderr, "no driver entry point %s\n", name);
    exit(1);
  }
  return fn;
}

/* Driver launches of a kernel's CUfunction and of its CUkernel; the driver calls a replayed call
 * of ours makes (src/core/order.c, src/enqueue.c, symmCollReplay), one at a time and in sequence; and
 * other ways to mark a launch's end for a later launch on another stream: a completion event
 * recorded by the launch itself (a programmatic event that fires when every block has exited),
 * and a value written to device memory. */
static void driverCalls(cudaStream_t s, cudaEvent_t ev, Big& big) {
  typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void**, void**);
  typedef CUresult (*LaunchExFn)(const CUlaunchConfig*, CUfunction, void**, void**);
  typedef CUresult (*CtxDeviceFn)(CUdevice*);
  typedef CUresult (*CaptureInfoFn)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                    const CUgraphNode**, size_t*);
  typedef CUresult (*StreamIdFn)(CUstream, unsigned long long*);
  typedef CUresult (*EventRecordFn)(CUevent, CUstream);
  typedef CUresult (*WriteValueFn)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  const LaunchFn launch = (LaunchFn)driverFn("cuLaunchKernel");
  const LaunchExFn launchEx = (LaunchExFn)driverFn("cuLaunchKernelEx");
  const CtxDeviceFn ctxDevice = (CtxDeviceFn)driverFn("cuCtxGetDevice");
  const CaptureInfoFn captureInfo = (CaptureInfoFn)driverFn("cuStreamGetCaptureInfo");
  const StreamIdFn streamId = (StreamIdFn)driverFn("cuStreamGetId");
  const EventRecordFn eventRecord = (EventRecordFn)driverFn("cuEventRecord");
  const WriteValueFn writeValue = (WriteValueFn)driverFn("cuStreamWriteValue64");
  cudaFunction_t f;
  CK(cudaGetFuncBySymbol(&f, (const void*)bigKernel));
  const CUfunction fn = (CUfunction)f;
  const CUstream cs = (CUstream)s;
  uint64_t* word = NULL;
  CK(cudaMalloc((void**)&word, sizeof(*word)));
  perCall("cuCtxGetDevice", s, [&] {
    CUdevice d;
    (void)ctxDevice(&d);
  });
  perCall("cuStreamGetCaptureInfo", s, [&] {
    CUstreamCaptureStatus st;
    cuuint64_t id;
    CUgraph g;
    (void)captureInfo(cs, &st, &id, &g, NULL, NULL);
  });
  perCall("cuStreamGetId", s, [&] {
    unsigned long long id;
    (void)streamId(cs, &id);
  });
  perCall("cuLaunchKernel (CUfunction), 328 B", s, [&] {
    void* args[] = {&big};
    (void)launch(fn, 1, 1, 1, 32, 1, 1, 0, cs, args, NULL);
  });
  /* The context-independent handle (cudaGetKernel) launched in the current context. */
  cudaKernel_t k;
  CK(cudaGetKernel(&k, (const void*)bigKernel));
  perCall("cuLaunchKernel (CUkernel), 328 B", s, [&] {
    void* args[] = {&big};
    (void)launch((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, cs, args, NULL);
  });
  perCall("CUfunction launch + cuEventRecord", s, [&] {
    void* args[] = {&big};
    (void)launch(fn, 1, 1, 1, 32, 1, 1, 0, cs, args, NULL);
    (void)eventRecord((CUevent)ev, cs);
  });
  perCall("CUfunction launch + cuStreamWriteValue64", s, [&] {
    void* args[] = {&big};
    (void)launch(fn, 1, 1, 1, 32, 1, 1, 0, cs, args, NULL);
    (void)writeValue(cs, (CUdeviceptr)word, 1, 0);
  });
  CUlaunchAttribute attr = {};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
  attr.value.programmaticEvent.event = (CUevent)ev;
  attr.value.programmaticEvent.flags = 0;
  attr.value.programmaticEvent.triggerAtBlockStart = 0;
  CUlaunchConfig config = {};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = cs;
  perCall("cuLaunchKernelEx, no attribute", s, [&] {
    void* args[] = {&big};
    config.attrs = NULL;
    config.numAttrs = 0;
    (void)launchEx(&config, fn, args, NULL);
  });
  perCall("cuLaunchKernelEx, completion event", s, [&] {
    void* args[] = {&big};
    config.attrs = &attr;
    config.numAttrs = 1;
    if (launchEx(&config, fn, args, NULL) != CUDA_SUCCESS) {
      fprintf(stderr, "cuLaunchKernelEx with a programmatic event refused\n");
      exit(1);
    }
  });
  perCall("replayed call's driver calls, in sequence", s, [&] {
    CUdevice d;
    (void)ctxDevice(&d);
    CUstreamCaptureStatus st;
    cuuint64_t cid;
    CUgraph g;
    (void)captureInfo(cs, &st, &cid, &g, NULL, NULL);
    unsigned long long id;
    (void)streamId(cs, &id);
    void* args[] = {&big};
    (void)launch(fn, 1, 1, 1, 32, 1, 1, 0, cs, args, NULL);
    (void)eventRecord((CUevent)ev, cs);
  });
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(word));
  /* What our own code takes per call for its locks and references (src/core/comm.c, src/enqueue.c). */
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
  int refs = 1;
  perCall("mutex lock + unlock", s, [&] {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
  });
  perCall("rwlock read lock + unlock", s, [&] {
    pthread_rwlock_rdlock(&rwlock);
    pthread_rwlock_unlock(&rwlock);
  });
  perCall("atomic add + sub (a reference)", s, [&] {
    __atomic_add_fetch(&refs, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&refs, 1, __ATOMIC_ACQ_REL);
  });
}

int main() {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  Big big = {};
  CK(cudaFuncGetAttributes(new cudaFuncAttributes, (const void*)smallKernel));
  CK(cudaFuncGetAttributes(new cudaFuncAttributes, (const void*)bigKernel));
  perCall("launch, 4-byte argument", s, [&] { smallKernel<<<1, 32, 0, s>>>(1); });
  perCall("launch, 328-byte argument", s, [&] { bigKernel<<<1, 32, 0, s>>>(big); });
  perCall("launch 328 B + cudaGetLastError", s, [&] {
    bigKernel<<<1, 32, 0, s>>>(big);
    (void)cudaGetLastError();
  });
  perCall("cudaLaunchKernel, 328 B", s, [&] {
    void* args[] = {&big};
    (void)cudaLaunchKernel((const void*)bigKernel, dim3(1), dim3(32), args, 0, s);
  });
  perCall("cudaEventRecord", s, [&] { (void)cudaEventRecord(ev, s); });
  perCall("launch 328 B + cudaEventRecord", s, [&] {
    bigKernel<<<1, 32, 0, s>>>(big);
    (void)cudaEventRecord(ev, s);
  });
  perCall("cudaStreamIsCapturing", s, [&] {
    cudaStreamCaptureStatus st;
    (void)cudaStreamIsCapturing(s, &st);
  });
  perCall("cudaGetDevice", s, [&] {
    int d;
    (void)cudaGetDevice(&d);
  });
  perCall("cudaStreamGetCaptureInfo", s, [&] {
    cudaStreamCaptureStatus st;
    unsigned long long id;
    cudaGraph_t g;
    (void)cudaStreamGetCaptureInfo(s, &st, &id, &g, NULL, NULL, NULL);
  });
  perCall("cudaStreamGetId", s, [&] {
    unsigned long long id;
    (void)cudaStreamGetId(s, &id);
  });
  driverCalls(s, ev, big);
  /* The CUDA calls of one eager call on our path (src/enqueue.c, src/core/order.c), in order. */
  perCall("our path's CUDA calls, in sequence", s, [&] {
    int d;
    (void)cudaGetDevice(&d);
    cudaStreamCaptureStatus st;
    unsigned long long id;
    cudaGraph_t g;
    (void)cudaStreamGetCaptureInfo(s, &st, &id, &g, NULL, NULL, NULL);
    (void)cudaStreamGetId(s, &id);
    bigKernel<<<1, 32, 0, s>>>(big);
    (void)cudaGetLastError();
    (void)cudaEventRecord(ev, s);
  });
  return 0;
}
