// SPDX-License-Identifier: Apache-2.0
// Replay time per kernel of a captured chain of small kernels, by graph shape and launch kind:
// the question behind the order of captured calls (src/core/order.c). One GPU, no NCCL.
//   graph_shape [kernels per graph, default 20] [replays, default 200]
// Shapes: a plain chain; the chain with one event record node that depends on every kernel (each
// kernel forks); the same record node behind the last kernel only; that plus an external event
// wait before the first kernel (what a capture of ours adds); and per kernel a wait and two
// records of events (the older order of captured calls). Each with plain launches and with
// programmatic dependent launch (kernels wait with griddepcontrol.wait, trigger early).
#include <cuda_runtime.h>

#include <vector>

#include "bench.h"

/* CUDA 13 gave the edge-data forms the plain names; 12.3-12.9 call them _v3/_v2. */
#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#define cudaGraphAddDependencies cudaGraphAddDependencies_v2
#define cudaGraphRemoveDependencies cudaGraphRemoveDependencies_v2
#endif

__global__ void tiny(unsigned long long* counter, int pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
#endif
  if (threadIdx.x == 0) atomicAdd(counter, 1ull);
}

enum Shape { CHAIN, SINK_EVERY, SINK_LAST, WAIT_SINK_LAST, EVENTS_PER_OP, NSHAPES };
static const char* const shapeNames[NSHAPES] = {"chain", "record after every kernel (forks)",
                                                "record after the last kernel",
                                                "external wait + record after the last",
                                                "wait + 2 records per kernel (old)"};

static void launch(cudaStream_t s, unsigned long long* counter, int pdl) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(256);
  config.stream = s;
  config.attrs = pdl ? &attr : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&config, tiny, counter, pdl));
}

/* The stream's one dependency (the node just captured). */
static cudaGraphNode_t lastNode(cudaStream_t s, cudaGraph_t* graph) {
  cudaStreamCaptureStatus status;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  CK(cudaStreamGetCaptureInfo(s, &status, nullptr, graph, &deps, &edges, &n));
  if (n != 1) {
    fprintf(stderr, "expected one dependency, got %zu\n", n);
    exit(1);
  }
  return deps[0];
}

static double run(Shape shape, int pdl, int kernels, int replays, unsigned long long* counter) {
  cudaStream_t s;
  cudaEvent_t order, scratch, start, stop;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&order, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&scratch, cudaEventDisableTiming));
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventRecord(order, s));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  if (shape == WAIT_SINK_LAST) CK(cudaStreamWaitEvent(s, order, cudaEventWaitExternal));
  cudaGraphNode_t sink = nullptr, previous = nullptr;
  cudaGraph_t graph = nullptr;
  for (int k = 0; k < kernels; k++) {
    if (shape == EVENTS_PER_OP)
      CK(cudaStreamWaitEvent(s, k == 0 ? order : scratch, k == 0 ? cudaEventWaitExternal : 0));
    launch(s, counter, pdl);
    if (shape == EVENTS_PER_OP) {
      CK(cudaEventRecordWithFlags(order, s, cudaEventRecordExternal));
      CK(cudaEventRecord(scratch, s));
      continue;
    }
    if (shape == CHAIN) continue;
    cudaGraphNode_t node = lastNode(s, &graph);
    if (sink == nullptr) {
      CK(cudaGraphAddEventRecordNode(&sink, graph, &node, 1, order));
    } else {
      CK(cudaGraphAddDependencies(graph, &node, &sink, nullptr, 1));
      if (shape != SINK_EVERY) CK(cudaGraphRemoveDependencies(graph, &previous, &sink, nullptr, 1));
    }
    previous = node;
  }
  CK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphUpload(exec, s));
  for (int w = 0; w < 10; w++) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  std::vector<double> perKernel;
  for (int rep = 0; rep < 5; rep++) {
    CK(cudaEventRecord(start, s));
    for (int r = 0; r < replays; r++) CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(stop, s));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    perKernel.push_back(ms * 1e3 / ((double)replays * kernels));
  }
  qsort(perKernel.data(), perKernel.size(), sizeof(double), benchCmpDouble);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
  CK(cudaEventDestroy(order));
  CK(cudaEventDestroy(scratch));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  printf("  %-42s %-5s %3zu nodes  %6.2f us per kernel\n", shapeNames[shape], pdl ? "PDL" : "plain",
         nodes, perKernel[perKernel.size() / 2]);
  return perKernel[perKernel.size() / 2];
}

int main(int argc, char** argv) {
  const int kernels = argc > 1 ? atoi(argv[1]) : 20;
  const int replays = argc > 2 ? atoi(argv[2]) : 200;
  unsigned long long* counter;
  CK(cudaMalloc(&counter, sizeof(*counter)));
  printf("graph_shape: %d kernels per graph, %d replays, median of 5\n", kernels, replays);
  for (int pdl = 0; pdl <= 1; pdl++)
    for (int shape = 0; shape < NSHAPES; shape++) run((Shape)shape, pdl, kernels, replays, counter);
  CK(cudaFree(counter));
  return 0;
}
