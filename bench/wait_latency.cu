/* SPDX-License-Identifier: Apache-2.0 */
/* How long a signal takes to release a waiting stream, by how it is written and waited on. (A
 * measurement tool for perf/RESULTS.md, not installed. The library's copy-engine all-gather
 * waits with stream memory operations and costs 31-41 us at every size up to 256 KiB on the
 * H100 pair; a copy-engine two-shot would take several such steps per chunk.)
 *
 * A ping-pong between two streams: "A" on GPU 0, "B" on GPU 0 too (one GPU: how fast a stream
 * wakes up, no link) or on GPU 1 with --peer (signals crossing the link). Each signal is a
 * 32-bit word in the receiver's memory set to 1; the waiter waits until it is 1 and resets it to
 * 0, as the library's copy-engine words work. Round i: A signals B, B waits and signals A, A
 * waits. Each stream's N rounds are captured into one graph (B's launched first); the time of
 * A's graph over 2N is one hop. Kinds of signal and wait:
 *   write  cuStreamWriteValue32          memop   cuStreamBatchMemOp: wait == 1, write 0
 *   copy   4-byte cudaMemcpyAsync of 1    kernel  a one-thread kernel spins (acquire), resets
 *   kernel a one-thread kernel stores 1 with release semantics at system scope
 * "alone" rows: one stream signals itself and waits, N times: the cost of a step whose wait
 * passes at once (no partner).
 * usage: wait_latency [--peer] [--rounds N] [--runs N]   (defaults and most: 500 rounds; 7 runs)
 * At 2000 rounds the first ping-pong hung on one H200 (500 never did). The likely cause: B's
 * graph, waiting on the GPU for A's, which the host had not launched yet, filled the launch
 * queue, so cudaGraphLaunch of B blocked the host. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "stream_signals.cuh"

/* One side: its stream, its device and the words others signal it through. */
struct Side {
  int dev;
  cudaStream_t stream;
  uint32_t* word; /* [0] the signal word, [1] a word holding 1 (the copy's source) */
};

/* `from` sets `to`'s signal word to 1, after its stream's earlier work. */
static void signalSide(const Side& from, const Side& to, SignalKind how) {
  signalWord(from.stream, to.word, how, from.word + 1);
}

static void waitReset(const Side& me, WaitKind how) { waitResetWord(me.stream, me.word, how); }

static cudaGraphExec_t captureSide(const Side& s, int rounds, bool first, const Side& other,
                                   SignalKind sig, WaitKind wait, bool alone) {
  CK(cudaSetDevice(s.dev));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < rounds; i++) {
    if (alone) {
      signalSide(s, s, sig);
      waitReset(s, wait);
    } else if (first) {
      signalSide(s, other, sig);
      waitReset(s, wait);
    } else {
      waitReset(s, wait);
      signalSide(s, other, sig);
    }
  }
  CK(cudaStreamEndCapture(s.stream, &g));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  return exec;
}

/* Microseconds per hop (ping-pong) or per step (alone): median of `runs`. */
static double measure(Side& a, Side& b, int rounds, int runs, SignalKind sig, WaitKind wait,
                      bool alone) {
  cudaGraphExec_t ga = captureSide(a, rounds, true, b, sig, wait, alone);
  cudaGraphExec_t gb = alone ? NULL : captureSide(b, rounds, false, a, sig, wait, false);
  cudaEvent_t t0, t1;
  CK(cudaSetDevice(a.dev));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  double t[32];
  for (int r = 0; r < runs + 1; r++) {
    if (gb != NULL) {
      CK(cudaSetDevice(b.dev));
      CK(cudaGraphLaunch(gb, b.stream));
    }
    CK(cudaSetDevice(a.dev));
    CK(cudaEventRecord(t0, a.stream));
    CK(cudaGraphLaunch(ga, a.stream));
    CK(cudaEventRecord(t1, a.stream));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    if (r > 0) t[r - 1] = ms * 1e3 / (alone ? rounds : 2.0 * rounds);
    if (gb != NULL) {
      CK(cudaSetDevice(b.dev));
      CK(cudaStreamSynchronize(b.stream));
    }
  }
  CK(cudaSetDevice(a.dev));
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  CK(cudaGraphExecDestroy(ga));
  if (gb != NULL) CK(cudaGraphExecDestroy(gb));
  qsort(t, runs, sizeof(double), benchCmpDouble);
  return t[runs / 2];
}

static void setUp(Side& s, int dev, int peerDev) {
  s.dev = dev;
  CK(cudaSetDevice(dev));
  if (peerDev != dev) {
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, dev, peerDev));
    if (!can) {
      printf("wait_latency: no peer access between GPUs %d and %d\n", dev, peerDev);
      exit(0);
    }
    CK(cudaDeviceEnablePeerAccess(peerDev, 0));
  }
  CK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  CK(cudaMalloc(&s.word, 2 * sizeof(uint32_t)));
  const uint32_t init[2] = {0, 1};
  CK(cudaMemcpy(s.word, init, sizeof(init), cudaMemcpyHostToDevice));
}

int main(int argc, char** argv) {
  /* A lazily loaded kernel would wait for an idle device while the other side's kernel spins. */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int peer = 0, rounds = 500, runs = 7;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--peer")) peer = 1;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
  }
  if (rounds < 1) rounds = 1;
  if (rounds > 500) rounds = 500;
  if (runs < 1) runs = 1;
  if (runs > 32) runs = 32;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (peer && ndev < 2) {
    printf("wait_latency: --peer needs 2 GPUs (found %d)\n", ndev);
    return 0;
  }
  if (!loadBatchMemOp()) {
    printf("wait_latency: no cuStreamBatchMemOp\n");
    return 1;
  }
  Side a, b;
  setUp(a, 0, peer ? 1 : 0);
  setUp(b, peer ? 1 : 0, 0);
  printf("# wait_latency: A on GPU 0, B on GPU %d%s; graphs of %d rounds, median of %d runs\n",
         b.dev, peer ? " (signals over the link)" : " (one GPU: no link)", rounds, runs);
  printf("%-10s %-8s %-8s %10s\n", "pattern", "signal", "wait", "us");
  const struct {
    SignalKind sig;
    WaitKind wait;
  } kinds[] = {{kWriteSignal, kMemOpWait}, {kCopySignal, kMemOpWait},
               {kKernelSignal, kKernelWait}, {kWriteSignal, kKernelWait},
               {kKernelSignal, kMemOpWait}};
  for (int alone = 0; alone < 2; alone++)
    for (const auto& k : kinds) {
      const double us = measure(a, b, rounds, runs, k.sig, k.wait, alone != 0);
      printf("%-10s %-8s %-8s %10.2f\n", alone ? "alone/step" : "ping/hop", kSignalName[k.sig],
             kWaitName[k.wait], us);
      fflush(stdout);
    }
  return 0;
}
