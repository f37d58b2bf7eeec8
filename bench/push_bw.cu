/* SPDX-License-Identifier: Apache-2.0 */
/* How fast one GPU can push bytes into its peer's memory, by method (a measurement tool for
 * perf/RESULTS.md, not installed): the copy engine (cudaMemcpyPeerAsync), SM 16-byte stores (as
 * the two-shot's push phase does), and TMA bulk stores (cp.async.bulk from shared memory to the
 * peer's global memory, fed by cp.async.bulk loads), and the copy engine and SM stores side by
 * side on two streams (a share of the bytes each), and the pulls: SM 16-byte loads and TMA bulk
 * loads by the receiver from the sender's memory, as a pull-based two-shot would read. Each
 * method runs one way (GPU 0 -> 1) and both ways at once (what an all-reduce does). Every pushed
 * byte is checked once per method. Prints GB/s, median of the iterations.
 * usage: push_bw [--loopback] [MiB per direction, default 256]
 * (--loopback: both "GPUs" are GPU 0, a check that every method runs and moves the right bytes;
 * its rates are local memory's, not a link's) */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

__device__ __forceinline__ size_t divUp(size_t a, size_t b) { return (a + b - 1) / b; }

/* SM stores: block b copies its contiguous part, 4 vectors in flight per thread. */
__global__ void smPush(uint4* dst, const uint4* src, size_t n16) {
  const size_t per = divUp(n16, gridDim.x);
  const size_t lo = min((size_t)blockIdx.x * per, n16), hi = min(lo + per, n16);
  const size_t stride = blockDim.x;
  size_t v = lo + threadIdx.x;
  for (; v + 3 * stride < hi; v += 4 * stride) {
    uint4 x[4];
#pragma unroll
    for (int u = 0; u < 4; u++) x[u] = src[v + u * stride];
#pragma unroll
    for (int u = 0; u < 4; u++) dst[v + u * stride] = x[u];
  }
  for (; v < hi; v += stride) dst[v] = src[v];
}

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* TMA: lane 0 of every warp runs its own pipeline of `stages` chunks over its own part:
 * bulk load global -> shared (mbarrier completion), bulk store shared -> peer global. */
__global__ void tmaPush(char* dst, const char* src, size_t bytes, uint32_t chunk, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap(); /* bulk copies need sm_90; main() skips this method on older GPUs */
#else
  constexpr int kMaxStages = 8, kMaxWarps = 8;
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bars[kMaxWarps][kMaxStages];
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if ((threadIdx.x & 31) != 0) return;
  const size_t parts = (size_t)gridDim.x * warps;
  const size_t per = divUp(divUp(bytes, parts), 16) * 16;
  const size_t part = (size_t)blockIdx.x * warps + warp;
  const size_t lo = min(part * per, bytes), hi = min(lo + per, bytes);
  char* ring = smem + (size_t)warp * stages * chunk;
  uint64_t* bar = bars[warp];
  for (int s = 0; s < stages; s++)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smemAddr(&bar[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const size_t nch = divUp(hi - lo, chunk);
  auto load = [&](size_t c) {
    const int s = (int)(c % stages);
    const uint32_t len = (uint32_t)min((size_t)chunk, hi - lo - c * chunk);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddr(&bar[s])),
                 "r"(len)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(smemAddr(ring + (size_t)s * chunk)),
        "l"(src + lo + c * chunk), "r"(len), "r"(smemAddr(&bar[s]))
        : "memory");
  };
  for (size_t c = 0; c < nch && c < (size_t)stages; c++) load(c);
  for (size_t c = 0; c < nch; c++) {
    const int s = (int)(c % stages);
    const uint32_t parity = (uint32_t)((c / stages) & 1);
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(smemAddr(&bar[s])), "r"(parity)
          : "memory");
    const uint32_t len = (uint32_t)min((size_t)chunk, hi - lo - c * chunk);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + lo +
                                                                                   c * chunk),
                 "r"(smemAddr(ring + (size_t)s * chunk)), "r"(len)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    /* Refill the stage of chunk c-1 once its store has read it (only chunk c may be pending). */
    if (c >= 1 && c - 1 + stages < nch) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(c - 1 + stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

struct Method {
  const char* name;
  int kind; /* 0 copy engine, 1 SM stores, 2 TMA, 3 copy engine and SM stores side by side,
             * 4 SM loads, 5 TMA loads (4, 5: the receiving GPU's kernel pulls from the
             * sender's memory) */
  int blocks, threads, stages;
  uint32_t chunk;
  int cePercent; /* kind 3: the copy engine's share of the bytes */
};

static int loopback; /* --loopback: GPU g of the tool is device gpu(g) */
static int gpu(int g) { return loopback ? 0 : g; }

static char* src[2];
static char* dst[2];
static cudaStream_t stream[2], side[2];
static cudaEvent_t ev[2][2], fork[2], join[2];

/* The GPU whose stream runs the bytes from `from` to its peer: the receiver for a pull. */
static int runsOn(const Method& m, int from) { return m.kind >= 4 ? 1 - from : from; }

static void launch(const Method& m, int from, size_t bytes) {
  char* to = dst[1 - from];
  const int on = runsOn(m, from);
  CK(cudaSetDevice(gpu(on)));
  if (m.kind == 0) {
    CK(cudaMemcpyPeerAsync(to, gpu(1 - from), src[from], gpu(from), bytes, stream[from]));
  } else if (m.kind == 3) {
    const size_t ce = bytes / 100 * m.cePercent / 4096 * 4096;
    CK(cudaEventRecord(fork[from], stream[from]));
    CK(cudaStreamWaitEvent(side[from], fork[from], 0));
    CK(cudaMemcpyPeerAsync(to, gpu(1 - from), src[from], gpu(from), ce, side[from]));
    CK(cudaEventRecord(join[from], side[from]));
    smPush<<<m.blocks, m.threads, 0, stream[from]>>>((uint4*)(to + ce),
                                                     (const uint4*)(src[from] + ce), (bytes - ce) / 16);
    CK(cudaStreamWaitEvent(stream[from], join[from], 0));
  } else if (m.kind == 1 || m.kind == 4) { /* the same copy, run by the sender or the receiver */
    smPush<<<m.blocks, m.threads, 0, stream[on]>>>((uint4*)to, (const uint4*)src[from], bytes / 16);
  } else {
    /* the same bulk copies, run by the sender (stores over the link) or the receiver (loads) */
    const size_t smem = (size_t)(m.threads / 32) * m.stages * m.chunk;
    tmaPush<<<m.blocks, m.threads, smem, stream[on]>>>(to, src[from], bytes, m.chunk, m.stages);
  }
  CK(cudaGetLastError());
}

/* GB/s of one direction (both: the slower of the two), median of `iters`. */
static double measure(const Method& m, size_t bytes, bool both, int iters) {
  double t[64];
  for (int i = 0; i < iters + 2; i++) {
    for (int g = 0; g < (both ? 2 : 1); g++) {
      const int e = runsOn(m, g);
      CK(cudaSetDevice(gpu(e)));
      CK(cudaEventRecord(ev[e][0], stream[e]));
    }
    for (int g = 0; g < (both ? 2 : 1); g++) launch(m, g, bytes);
    double worst = 0;
    for (int g = 0; g < (both ? 2 : 1); g++) {
      const int e = runsOn(m, g);
      CK(cudaSetDevice(gpu(e)));
      CK(cudaEventRecord(ev[e][1], stream[e]));
      CK(cudaEventSynchronize(ev[e][1]));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, ev[e][0], ev[e][1]));
      if (ms > worst) worst = ms;
    }
    if (i >= 2) t[i - 2] = worst;
  }
  qsort(t, iters, sizeof(double), benchCmpDouble);
  return (double)bytes / (t[iters / 2] * 1e-3) / 1e9;
}

/* Every byte GPU 0 pushed into GPU 1 (and back, `both`) equals the sender's pattern. */
static bool check(const Method& m, size_t bytes, bool both, unsigned char* host) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(gpu(g)));
    CK(cudaMemset(dst[g], 0, bytes));
    CK(cudaDeviceSynchronize());
  }
  for (int g = 0; g < (both ? 2 : 1); g++) launch(m, g, bytes);
  for (int g = 0; g < (both ? 2 : 1); g++) {
    CK(cudaSetDevice(gpu(runsOn(m, g))));
    CK(cudaStreamSynchronize(stream[runsOn(m, g)]));
  }
  for (int g = 0; g < (both ? 2 : 1); g++) {
    CK(cudaSetDevice(gpu(1 - g)));
    CK(cudaMemcpy(host, dst[1 - g], bytes, cudaMemcpyDeviceToHost));
    const unsigned char want = g == 0 ? 0x5a : 0xa5;
    for (size_t i = 0; i < bytes; i++)
      if (host[i] != want) {
        fprintf(stderr, "%s: byte %zu from GPU %d is %#x, want %#x\n", m.name, i, g, host[i], want);
        return false;
      }
  }
  return true;
}

int main(int argc, char** argv) {
  size_t bytes = (size_t)256 << 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--loopback")) loopback = 1;
    else bytes = (size_t)atol(argv[i]) << 20;
  }
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (!loopback && ndev < 2) {
    printf("push_bw: needs 2 GPUs, found %d\n", ndev);
    return 0;
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(gpu(g)));
    if (!loopback) {
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, g, 1 - g));
      if (!can) {
        printf("push_bw: no peer access between GPUs 0 and 1\n");
        return 0;
      }
      CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    }
    CK(cudaMalloc(&src[g], bytes));
    CK(cudaMalloc(&dst[g], bytes));
    CK(cudaMemset(src[g], g == 0 ? 0x5a : 0xa5, bytes));
    CK(cudaStreamCreateWithFlags(&stream[g], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&side[g], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork[g], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join[g], cudaEventDisableTiming));
    CK(cudaEventCreate(&ev[g][0]));
    CK(cudaEventCreate(&ev[g][1]));
    CK(cudaFuncSetAttribute(tmaPush, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  Method methods[64];
  int nm = 0;
  methods[nm++] = {"copy engine", 0, 0, 0, 0, 0, 0};
  for (int b : {64, 128, 132}) methods[nm++] = {"sm stores", 1, b, 256, 0, 0, 0};
  for (int b : {64, 128, 132}) methods[nm++] = {"sm loads", 4, b, 256, 0, 0, 0};
  for (int pct : {20, 35, 50})
    for (int b : {32, 64, 128}) methods[nm++] = {"ce+sm", 3, b, 256, 0, 0, pct};
  for (int b : {64, 128})
    for (int w : {1, 2})
      for (uint32_t ch : {8192u, 16384u})
        if ((size_t)w * 4 * ch <= 200 * 1024) {
          methods[nm++] = {"tma", 2, b, 32 * w, 4, ch, 0};
          methods[nm++] = {"tma loads", 5, b, 32 * w, 4, ch, 0};
        }
  int major = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  unsigned char* host = (unsigned char*)malloc(bytes);
  printf("# push_bw%s: %zu MiB per direction, GB/s = bytes / time of the slower direction, median "
         "of 10\n", loopback ? " --loopback (both on GPU 0: local memory, not a link)" : "",
         bytes >> 20);
  printf("%-12s %6s %7s %6s %6s %4s %9s %9s %s\n", "method", "blocks", "threads", "stages",
         "chunk", "ce%", "one-way", "both", "check");
  for (int i = 0; i < nm; i++) {
    const Method& m = methods[i];
    if ((m.kind == 2 || m.kind == 5) && major < 9) continue;
    const bool ok = check(m, bytes, false, host) && check(m, bytes, true, host);
    const double one = measure(m, bytes, false, 10), two = measure(m, bytes, true, 10);
    printf("%-12s %6d %7d %6d %6u %4d %9.1f %9.1f %s\n", m.name, m.blocks, m.threads, m.stages,
           m.chunk, m.cePercent, one, two, ok ? "ok" : "WRONG");
  }
  free(host);
  return 0;
}
