/* SPDX-License-Identifier: Apache-2.0 */
/* Can a two-shot all-reduce whose link traffic moves entirely on copy engines beat the SM-store
 * ceiling of an NVLink pair? (A measurement tool for perf/RESULTS.md, not installed; the
 * library's two-shot pushes with SM stores, which move 359-365 GB/s both ways on the H200 pair
 * against the copy engine's 385-391.)
 *
 * Two ranks in one process, one per GPU (or both on GPU 0 with --loopback: checks the data
 * flow only, its times mean nothing). Rank r owns half r of the vector. The half is cut into K
 * chunks; per chunk k, on three streams of each rank:
 *   push   (copy engine): [wait until the peer freed staging slot k % slots] copy our input's
 *          chunk k of the peer's half into the peer's staging slot; signal "ready" to the peer;
 *   reduce (SM kernel):   wait for "ready" in our slot; out = our input + staging, our half's
 *          chunk k; signal "free" to the peer once the slot is read;
 *   back   (copy engine): after that reduce, copy the reduced chunk into the peer's output;
 *          after the last chunk signal "done" to the peer.
 * That writes the peer's output directly, as the library can only where outputs are known to
 * every rank (windows, a graph's exchanged buffers). With --outputs staged (plain buffers), back
 * copies land in the peer's gather region instead, each followed by a "landed" signal, and a
 * fourth stream of the receiver copies each landed chunk into its output (one more local pass).
 * A call starts with an arrive barrier and ends waiting for the peer's "done". Signals are the
 * library's kind: 32-bit words set to the constant 1 in the receiver's memory (a 4-byte copy from
 * a word holding 1, or cuStreamWriteValue32) and waited on and reset to 0 with
 * cuStreamBatchMemOp, so each rank's call is captured once into a CUDA graph and replayed.
 *
 * Prints, per size: a bare copy-engine push of the whole vector both ways (the floor a data
 * path of copy engines can reach: every byte crosses the link once each way), then the
 * pipeline per (K, slots, reduce blocks, signal, lag): time (median of the runs, each the mean
 * over `iters` calls back to back) and bus bandwidth (size / time for 2 ranks), with every
 * element of both outputs checked against the exact sum once per configuration.
 * Signals: "copy" and "write" (above, waited on with stream memory operations), or "kernel": a
 * one-thread kernel stores the word with release semantics and another spins on it (acquire).
 * usage: ce_twoshot [--loopback] [--eager] [--iters N] [--runs N] [--chunks 2,4,...]
 *                   [--signals copy,write,kernel] [--blocks 32,...] [--lags 0,1,...]
 *                   [--outputs direct,staged] [MiB ...]
 *                   (defaults: chunks 2,4,8,16,32; every signal; 32 blocks; lag 0 (the back
 *                   copies on a stream of their own); direct outputs; 64 256 1024 MiB) */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "stream_signals.cuh"

enum { kMaxSlots = 64, kMaxChunks = 256 };
/* One rank's signal words, in its own device memory. */
struct Words {
  uint32_t ready[kMaxSlots]; /* the peer's chunk is in our staging slot */
  uint32_t freed[kMaxSlots]; /* the peer has read its staging slot we wrote */
  uint32_t landed[kMaxChunks]; /* --outputs staged: the peer's chunk is in our gather region */
  uint32_t arrive, done, one;
};

struct Rank {
  int dev;
  float *in, *out;
  char* stage;  /* slots x chunk bytes */
  char* gather; /* --outputs staged: the peer's reduced half lands here */
  Words* words;
  cudaStream_t main, push, reduce, back, copyOut;
  cudaEvent_t fork, joinPush, joinBack, joinCopyOut, reduced[kMaxChunks], t0, t1;
  cudaGraphExec_t graph;
};
static Rank rk[2];

__global__ void addChunk(float4* out, const float4* a, const float4* b, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

/* Waits until our word is 1 and resets it: a spinning kernel for kernel signals, stream memory
 * operations for the others. */
static void waitReset(cudaStream_t s, uint32_t* word, SignalKind how) {
  waitResetWord(s, word, how == kKernelSignal ? kKernelWait : kMemOpWait);
}

/* Sets the peer's word to 1 once the stream's earlier work is done. */
static void signalPeer(const Rank& me, cudaStream_t s, uint32_t* peerWord, SignalKind how) {
  signalWord(s, peerWord, how, &me.words->one);
}

struct Config {
  size_t bytes; /* the whole vector */
  int chunks, slots, blocks;
  SignalKind signal;
  int lag; /* 0: the back copies on their own stream; L > 0: on the push stream, chunk k - L's
            * after chunk k's push (one copy-engine queue per rank) */
  bool staged; /* back copies into the peer's gather region, copied out there */
};

/* Enqueues rank r's part of one all-reduce on its main stream (captured). */
static void enqueueCall(int r, const Config& c) {
  Rank &me = rk[r], &peer = rk[1 - r];
  const size_t half = c.bytes / 2, chunk = (half + c.chunks - 1) / c.chunks;
  const int chunks = (int)((half + chunk - 1) / chunk); /* every one non-empty */
  const size_t mine = (size_t)r * half, theirs = (size_t)(1 - r) * half;
  char* in = (char*)me.in;
  char* out = (char*)me.out;
  cudaStream_t back = c.lag > 0 ? me.push : me.back;
  /* back: reduced chunk k into the peer's output (or gather region), once it is reduced */
  auto backCopy = [&](int k) {
    const size_t off = (size_t)k * chunk, len = half - off < chunk ? half - off : chunk;
    CK(cudaStreamWaitEvent(back, me.reduced[k], 0));
    char* to = c.staged ? peer.gather + off : (char*)peer.out + mine + off;
    CK(cudaMemcpyAsync(to, out + mine + off, len, cudaMemcpyDeviceToDevice, back));
    if (c.staged) signalPeer(me, back, &peer.words->landed[k], c.signal);
  };
  signalPeer(me, me.main, &peer.words->arrive, c.signal);
  waitReset(me.main, &me.words->arrive, c.signal);
  CK(cudaEventRecord(me.fork, me.main));
  CK(cudaStreamWaitEvent(me.push, me.fork, 0));
  CK(cudaStreamWaitEvent(me.reduce, me.fork, 0));
  CK(cudaStreamWaitEvent(me.back, me.fork, 0));
  if (c.staged) CK(cudaStreamWaitEvent(me.copyOut, me.fork, 0));
  for (int k = 0; k < chunks; k++) {
    const size_t off = (size_t)k * chunk, len = half - off < chunk ? half - off : chunk;
    const int slot = k % c.slots;
    /* push: our input's share of the peer's half into its staging slot */
    if (k >= c.slots) waitReset(me.push, &me.words->freed[slot], c.signal);
    CK(cudaMemcpyAsync(peer.stage + (size_t)slot * chunk, in + theirs + off, len,
                       cudaMemcpyDeviceToDevice, me.push));
    signalPeer(me, me.push, &peer.words->ready[slot], c.signal);
    /* reduce: our half's chunk, from our input and what the peer put in our slot */
    waitReset(me.reduce, &me.words->ready[slot], c.signal);
    addChunk<<<c.blocks, 512, 0, me.reduce>>>((float4*)(out + mine + off),
                                              (const float4*)(in + mine + off),
                                              (const float4*)(me.stage + (size_t)slot * chunk),
                                              len / 16);
    CK(cudaGetLastError());
    CK(cudaEventRecord(me.reduced[k], me.reduce));
    if (k + c.slots < chunks) signalPeer(me, me.reduce, &peer.words->freed[slot], c.signal);
    if (c.lag == 0) backCopy(k);
    else if (k >= c.lag) backCopy(k - c.lag);
    /* copy-out: the peer's reduced chunk k from our gather region into our output */
    if (c.staged) {
      waitReset(me.copyOut, &me.words->landed[k], c.signal);
      CK(cudaMemcpyAsync(out + theirs + off, me.gather + off, len, cudaMemcpyDeviceToDevice,
                         me.copyOut));
    }
  }
  for (int k = c.lag > 0 ? (chunks > c.lag ? chunks - c.lag : 0) : chunks; k < chunks; k++)
    backCopy(k);
  signalPeer(me, back, &peer.words->done, c.signal);
  CK(cudaEventRecord(me.joinPush, me.push));
  CK(cudaEventRecord(me.joinBack, me.back));
  if (c.staged) CK(cudaEventRecord(me.joinCopyOut, me.copyOut));
  CK(cudaStreamWaitEvent(me.main, me.joinPush, 0));
  CK(cudaStreamWaitEvent(me.main, me.joinBack, 0));
  if (c.staged) CK(cudaStreamWaitEvent(me.main, me.joinCopyOut, 0));
  waitReset(me.main, &me.words->done, c.signal);
}

static int eager = 0; /* --eager: every call enqueued again, no graph */

/* Graphs: each rank's call captured once per configuration. */
static void prepare(const Config& c) {
  if (eager) return;
  for (int r = 0; r < 2; r++) {
    Rank& me = rk[r];
    CK(cudaSetDevice(me.dev));
    if (me.graph != NULL) CK(cudaGraphExecDestroy(me.graph));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(me.main, cudaStreamCaptureModeRelaxed));
    enqueueCall(r, c);
    CK(cudaStreamEndCapture(me.main, &g));
    CK(cudaGraphInstantiate(&me.graph, g, 0));
    CK(cudaGraphDestroy(g));
  }
}

/* One call on both ranks' main streams. */
static void callBoth(const Config& c) {
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    if (eager) enqueueCall(r, c);
    else CK(cudaGraphLaunch(rk[r].graph, rk[r].main));
  }
}

/* Seconds from each rank's t0 to its t1 (both recorded), the slower rank. */
static double slowerRankSeconds() {
  double worst = 0;
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    CK(cudaEventSynchronize(rk[r].t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, rk[r].t0, rk[r].t1));
    if (ms > worst) worst = ms;
  }
  return worst * 1e-3;
}

/* Records t0 (start) or t1 (end) on both ranks' main streams. */
static void recordOnBoth(bool end) {
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    CK(cudaEventRecord(end ? rk[r].t1 : rk[r].t0, rk[r].main));
  }
}

/* Seconds per call: mean over `iters` calls back to back, the slower rank. */
static double timeCalls(const Config& c, int iters) {
  recordOnBoth(false);
  for (int i = 0; i < iters; i++) callBoth(c);
  recordOnBoth(true);
  return slowerRankSeconds() / iters;
}

/* Both outputs hold in0 + in1 exactly (inputs are small integers). */
static bool checkOutputs(size_t bytes, float* const in[2], float* got) {
  const size_t n = bytes / sizeof(float);
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    CK(cudaMemcpy(got, rk[r].out, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
      if (got[i] != in[0][i] + in[1][i]) {
        fprintf(stderr, "rank %d element %zu: %g, want %g\n", r, i, got[i], in[0][i] + in[1][i]);
        return false;
      }
  }
  return true;
}

static void poisonOutputs(size_t bytes) {
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    CK(cudaMemset(rk[r].out, 0xff, bytes)); /* NaN */
    CK(cudaDeviceSynchronize());
  }
}

/* A bare copy-engine push of `bytes` each way at once: seconds, median of `runs`. */
static double barePush(size_t bytes, int runs) {
  double t[32];
  for (int i = 0; i < runs + 2; i++) {
    recordOnBoth(false);
    for (int r = 0; r < 2; r++) {
      CK(cudaSetDevice(rk[r].dev));
      CK(cudaMemcpyAsync(rk[1 - r].out, rk[r].in, bytes, cudaMemcpyDeviceToDevice, rk[r].main));
    }
    recordOnBoth(true);
    const double worst = slowerRankSeconds();
    if (i >= 2) t[i - 2] = worst;
  }
  qsort(t, runs, sizeof(double), benchCmpDouble);
  return t[runs / 2];
}

/* One configuration: captured, run once on poisoned outputs and checked, then timed. */
static bool runConfig(const Config& c, float* const hostIn[2], float* got, int runs, int iters) {
  prepare(c);
  poisonOutputs(c.bytes);
  callBoth(c);
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(rk[r].dev));
    CK(cudaStreamSynchronize(rk[r].main));
  }
  const bool ok = checkOutputs(c.bytes, hostIn, got);
  double t[32];
  (void)timeCalls(c, 2);
  for (int i = 0; i < runs; i++) t[i] = timeCalls(c, iters);
  qsort(t, runs, sizeof(double), benchCmpDouble);
  const double med = t[runs / 2];
  printf("%8zuMi %-22s %6d %5d %6d %6s %4d %10.1f %8.1f %s\n", c.bytes >> 20,
         c.staged ? "CE two-shot, staged" : "CE two-shot",
         c.chunks, c.slots, c.blocks, kSignalName[c.signal], c.lag, med * 1e6, c.bytes / med / 1e9,
         ok ? "ok" : "WRONG");
  fflush(stdout);
  return ok;
}

/* "a,b,c" -> up to 16 integers in least..most */
static void parseList(const char* text, int least, int most, int* out, int* n) {
  *n = 0;
  for (const char* p = text; *p != '\0' && *n < 16;) {
    const int v = atoi(p);
    if (v >= least && v <= most) out[(*n)++] = v;
    const char* comma = strchr(p, ',');
    if (comma == NULL) break;
    p = comma + 1;
  }
}

int main(int argc, char** argv) {
  /* Every kernel loaded up front: a lazily loaded one would wait for the device to go idle while
   * a wait kernel spins (eager calls enqueue both ranks' waits before their signals). */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int loopback = 0, iters = 5, runs = 5;
  int chunkList[16] = {2, 4, 8, 16, 32}, nchunks = 5;
  int blockList[16] = {32}, nblocks = 1;
  int lagList[16] = {0}, nlags = 1;
  const char* signals = "copy,write,kernel";
  const char* outputs = "direct";
  size_t sizes[16];
  int nsizes = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--loopback")) loopback = 1;
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--eager")) eager = 1;
    else if (!strcmp(argv[i], "--chunks") && i + 1 < argc)
      parseList(argv[++i], 1, kMaxChunks, chunkList, &nchunks);
    else if (!strcmp(argv[i], "--signals") && i + 1 < argc) signals = argv[++i];
    else if (!strcmp(argv[i], "--outputs") && i + 1 < argc) outputs = argv[++i];
    else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
      parseList(argv[++i], 1, 1024, blockList, &nblocks);
    else if (!strcmp(argv[i], "--lags") && i + 1 < argc)
      parseList(argv[++i], 0, 8, lagList, &nlags);
    else if (nsizes < 16) sizes[nsizes++] = (size_t)atol(argv[i]) << 20;
  }
  /* Both ranks' eight streams on one GPU: with the default eight hardware queues, a queue
   * blocked in a wait can hold the work that would end it (seen as hangs). */
  if (loopback) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (nsizes == 0) {
    sizes[nsizes++] = (size_t)64 << 20;
    sizes[nsizes++] = (size_t)256 << 20;
    sizes[nsizes++] = (size_t)1024 << 20;
  }
  if (runs > 32) runs = 32;
  if (runs < 1) runs = 1;
  if (iters < 1) iters = 1;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (!loopback && ndev < 2) {
    printf("ce_twoshot: needs 2 GPUs (found %d); --loopback runs both ranks on GPU 0\n", ndev);
    return 0;
  }
  if (!loadBatchMemOp()) {
    printf("ce_twoshot: no cuStreamBatchMemOp\n");
    return 1;
  }
  size_t maxBytes = 0;
  for (int i = 0; i < nsizes; i++) maxBytes = sizes[i] > maxBytes ? sizes[i] : maxBytes;
  /* Staging: up to half the vector (K=1 puts the whole half in one slot). */
  const size_t stageBytes = maxBytes / 2;
  srand(1);
  float* hostIn[2];
  float* got = (float*)malloc(maxBytes);
  for (int r = 0; r < 2; r++) hostIn[r] = (float*)malloc(maxBytes);
  for (int r = 0; r < 2; r++) {
    Rank& me = rk[r];
    me.dev = loopback ? 0 : r;
    CK(cudaSetDevice(me.dev));
    if (!loopback) {
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, me.dev, 1 - me.dev));
      if (!can) {
        printf("ce_twoshot: no peer access between GPUs 0 and 1\n");
        return 0;
      }
      CK(cudaDeviceEnablePeerAccess(1 - me.dev, 0));
    }
    CK(cudaMalloc(&me.in, maxBytes));
    CK(cudaMalloc(&me.out, maxBytes));
    CK(cudaMalloc(&me.stage, stageBytes));
    CK(cudaMalloc(&me.gather, maxBytes / 2));
    CK(cudaMalloc(&me.words, sizeof(Words)));
    Words w;
    memset(&w, 0, sizeof(w));
    w.one = 1;
    CK(cudaMemcpy(me.words, &w, sizeof(w), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < maxBytes / sizeof(float); i++)
      hostIn[r][i] = (float)(rand() % 2001 - 1000);
    CK(cudaMemcpy(me.in, hostIn[r], maxBytes, cudaMemcpyHostToDevice));
    CK(cudaStreamCreateWithFlags(&me.main, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&me.push, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&me.reduce, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&me.back, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&me.copyOut, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&me.fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&me.joinPush, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&me.joinBack, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&me.joinCopyOut, cudaEventDisableTiming));
    for (int k = 0; k < kMaxChunks; k++)
      CK(cudaEventCreateWithFlags(&me.reduced[k], cudaEventDisableTiming));
    CK(cudaEventCreate(&me.t0));
    CK(cudaEventCreate(&me.t1));
  }
  printf("# ce_twoshot%s: 2 ranks, float sum; time = median of %d runs of %d %s back to back; "
         "busbw = bytes / time\n",
         loopback ? " --loopback (both ranks on GPU 0: data flow check only)" : "", runs, iters,
         eager ? "eager calls" : "graph replays");
  printf("%10s %-22s %6s %5s %6s %6s %4s %10s %8s %s\n", "size", "method", "chunks", "slots",
         "blocks", "signal", "lag", "time_us", "GB/s", "check");
  const int slotList[] = {2, 4, 0}; /* 0: one slot per chunk (no reuse) */
  int failures = 0;
  for (int si = 0; si < nsizes; si++) {
    const size_t bytes = sizes[si];
    const double bare = barePush(bytes, runs);
    printf("%8zuMi %-22s %6s %5s %6s %6s %4s %10.1f %8.1f %s\n", bytes >> 20,
           "bare CE push both ways", "-", "-", "-", "-", "-", bare * 1e6, bytes / bare / 1e9, "-");
    for (int ci = 0; ci < nchunks; ci++)
      for (int sl = 0; sl < 3; sl++)
        for (int sig = 0; sig < 3; sig++)
          for (int staged = 0; staged < 2; staged++)
            for (int bi = 0; bi < nblocks * nlags; bi++) {
              Config c = {bytes, chunkList[ci], slotList[sl], blockList[bi % nblocks],
                          (SignalKind)sig, lagList[bi / nblocks], staged != 0};
              if (c.slots == 0) c.slots = c.chunks;
              const bool listed = strstr(signals, kSignalName[sig]) != NULL &&
                                  c.slots <= c.chunks && c.slots <= kMaxSlots &&
                                  (slotList[sl] == 0 || c.slots < c.chunks) && /* else "no reuse" */
                                  (bytes / 2 / c.chunks) % 16 == 0 &&
                                  strstr(outputs, staged ? "staged" : "direct") != NULL;
              if (listed) failures += !runConfig(c, hostIn, got, runs, iters);
            }
  }
  for (int r = 0; r < 2; r++) free(hostIn[r]);
  free(got);
  printf("# %s\n", failures ? "WRONG results" : "all outputs exact");
  return failures != 0;
}
