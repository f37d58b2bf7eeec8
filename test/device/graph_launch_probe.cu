// SPDX-License-Identifier: Apache-2.0
// Two "ranks" as threads of one process on one GPU, without libsymmcoll: each call is a kernel
// that meets the same call of the other rank (device-side epochs, as ours); eager calls on s1,
// replays of a captured graph of 4 calls on s2, ordered by one event per rank as src/core/order.c
// orders them. It shows that the streams_2 hang (test/core/README.md) is CUDA's: with external
// event records in the graph, some runs stop for good with both threads inside cudaGraphLaunch.
//   nvcc -arch=sm_90a -O2 -std=c++17 -o graph_launch_probe test/device/graph_launch_probe.cu
//   for i in $(seq 30); do ./graph_launch_probe MODE 20000; done | sort | uniq -c
// MODE: see `mode` below. UPLOAD=1: cudaGraphUpload (and a sync) before the first replay.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); _exit(1); } } while (0)
typedef unsigned long long u64;
__global__ void meet(u64* state, u64* mine, const u64* peer) {
  const u64 e = state[0] + 1;
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(mine), "l"(e) : "memory");
  u64 got;
  do { asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(got) : "l"(peer) : "memory"); } while (got < e);
  state[0] = e;
}
static u64* dev;  // [0..1] state per rank, [8..9] flag per rank
static int mode;  // 0 graph replays, 1 eager on s2, 2 graph without event nodes (ordered around
                  // its launch), 3 graph with the external wait only, 4 with the external records only,
                  // 5 as 0 with a host barrier of the two threads before each graph launch, 6 the graph
                  // records a second event G (eager calls wait on E and G)
static long calls;
static std::atomic<long> progress[2];
static std::atomic<long> arrived;
static void hostBarrier(long round) {  // both threads have issued everything before it
  arrived.fetch_add(1);
  while (arrived.load() < 2 * round) {}
}
static void rankMain(int r) {
  cudaStream_t s1, s2; cudaEvent_t E, G;
  CK(cudaEventCreateWithFlags(&G, cudaEventDisableTiming));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
  u64 *st = dev + r, *mine = dev + 8 + r, *peer = dev + 8 + (1 - r);
  auto call = [&](cudaStream_t s, bool capturing, bool first) {
    if (!capturing) { CK(cudaStreamWaitEvent(s, E, 0)); if (mode == 6) CK(cudaStreamWaitEvent(s, G, 0)); }
    else if (first && (mode == 0 || mode == 3 || mode >= 5)) CK(cudaStreamWaitEvent(s, E, cudaEventWaitExternal));
    meet<<<1, 1, 0, s>>>(st, mine, peer);
    CK(cudaGetLastError());
    if (capturing) { if (mode == 0 || mode == 4 || mode == 5) CK(cudaEventRecordWithFlags(E, s, cudaEventRecordExternal));
      if (mode == 6) CK(cudaEventRecordWithFlags(G, s, cudaEventRecordExternal)); }
    else CK(cudaEventRecord(E, s));
  };
  call(s1, false, false);
  CK(cudaStreamSynchronize(s1));
  cudaGraph_t g; cudaGraphExec_t x = nullptr;
  if (mode != 1) {
    CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
    for (int j = 0; j < 4; j++) call(s2, true, j == 0);
    CK(cudaStreamEndCapture(s2, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    if (getenv("UPLOAD")) { CK(cudaGraphUpload(x, s2)); CK(cudaStreamSynchronize(s2)); }
  }
  long done = 0, rounds = 0;
  for (long it = 0; done < calls; it++) {
    call(s1, false, false); done++;
    if (it % 3 == 1) {
      if (mode == 1) for (int j = 0; j < 4; j++) call(s2, false, false);
      else {
        if (mode >= 2 && mode <= 4) CK(cudaStreamWaitEvent(s2, E, 0));
        if (mode == 5) hostBarrier(++rounds);
        CK(cudaGraphLaunch(x, s2));
        if (mode >= 2 && mode <= 4) CK(cudaEventRecord(E, s2));
      }
      done += 4;
    }
    if (it % 100 == 99) { CK(cudaStreamSynchronize(s1)); CK(cudaStreamSynchronize(s2)); }
    progress[r] = done;
  }
  CK(cudaStreamSynchronize(s1)); CK(cudaStreamSynchronize(s2));
}
int main(int argc, char** argv) {
  mode = argc > 1 ? atoi(argv[1]) : 0;
  calls = argc > 2 ? atol(argv[2]) : 20000;
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  CK(cudaMalloc(&dev, 16 * sizeof(u64)));
  CK(cudaMemset(dev, 0, 16 * sizeof(u64)));
  CK(cudaDeviceSynchronize());
  std::thread watchdog([] {
    sleep(10);
    printf("HANG mode %d: host progress %ld %ld\n", mode, progress[0].load(), progress[1].load());
    fflush(stdout);
    _exit(3);
  });
  watchdog.detach();
  std::thread a(rankMain, 0), b(rankMain, 1);
  a.join(); b.join();
  printf("ok mode %d\n", mode);
  return 0;
}
