/* SPDX-License-Identifier: Apache-2.0 */
/* GPU test of peer-mapped memory: patterns read through every peer's mapping, signal ping-pong,
 * registered windows, abort of a spinning kernel, for every way ranks are created (two processes,
 * non-blocking communicators, ncclCommInitAll, threads, the test bootstrap).
 * Usage: test_peer_mem procs|nonblocking|initall|threads|bootstrap [nranks]
 * White-box: linked with the internal library, so its nccl* entry points are libsymmcoll's and
 * SYMMCOLL_NCCL_LIB picks the real NCCL or the bootstrap. Exits 77 without (enough) GPUs. */
#include "peer_common.h"

/* ---- the peer-memory test body (any mode; `local` = ranks this thread drives) ----------- */

static void checkView(struct rankCtx* c) {
  const struct symmPeers* p = c->peers;
  TCHECK_EQ_INT(p->rank, c->rank);
  TCHECK_EQ_INT(p->nranks, c->nranks);
  TCHECK(p->bufferBytes >= 4096 && p->bufferBytes % 4 == 0);
  TCHECK(p->signalBytes >= (size_t)SYMM_MAX_RANKS * 4);
  TCHECK(p->localState != NULL && p->localStateBytes > 0);
  TCHECK(p->abortFlag != NULL && p->errorFlag != NULL);
  for (int r = 0; r < c->nranks; r++) {
    TCHECK(p->buffers[r] != NULL && p->signals[r] != NULL);
    for (int q = 0; q < r; q++) TCHECK(p->buffers[q] != p->buffers[r]);
  }
  /* Multicast never exists where the safety variables are set (they always are here). */
  TCHECK(p->multicastBuffer == NULL);
  TCHECK_EQ_INT(symmTransportMulticastReady(c->entry), 0);
  TCHECK_EQ_INT(symmTransportMulticastAttempts(), 0);
}

static void hostSpotCheck(struct rankCtx* c, int peer, uint32_t seed) {
  enum { SPOT = 1024 };
  uint32_t host[SPOT];
  size_t words = c->peers->bufferBytes / 4;
  size_t starts[2] = {0, words - SPOT};
  for (int k = 0; k < 2; k++) {
    /* Copy engine through the peer mapping (a different path from the kernels). */
    CUDA_OK(cudaMemcpy(host, (const uint32_t*)c->peers->buffers[peer] + starts[k], sizeof(host),
                       cudaMemcpyDefault));
    int bad = 0;
    for (int i = 0; i < SPOT; i++) bad += host[i] != testPattern(seed, (uint32_t)peer, starts[k] + (size_t)i);
    if (bad) fprintf(stderr, "rank %d: %d words of peer %d at %zu differ (host copy)\n", c->rank, bad, peer, starts[k]);
    TCHECK_EQ_INT(bad, 0);
  }
}

static void patternPhase(struct rankCtx* local, int n) {
  uint32_t seed = runSeed ^ 0x1234u;
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    CUDA_OK(cudaSetDevice(c->dev));
    resetResults(c);
    /* Signal pads start zeroed on every rank but for the constant word (symm_peers.h): counted
     * before anyone signals. */
    CUDA_OK(testLaunchFill((uint32_t*)c->peers->buffers[c->rank], c->peers->bufferBytes / 4, seed,
                           (uint32_t)c->rank, c->stream));
  }
  worldBarrier(local, n);
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    CUDA_OK(cudaSetDevice(c->dev));
    for (int p = 0; p < c->nranks; p++) {
      CUDA_OK(testLaunchVerify((const uint32_t*)c->peers->buffers[p], c->peers->bufferBytes / 4,
                               seed, (uint32_t)p, 0, &c->vres[p], c->stream));
      CUDA_OK(testLaunchCountNonzero((const uint32_t*)c->peers->signals[p], c->peers->signalBytes / 4, &c->vres[p],
                                     c->stream));
    }
    CUDA_OK(cudaStreamSynchronize(c->stream));
    for (int p = 0; p < c->nranks; p++) {
      if (c->vres[p].mismatches)
        fprintf(stderr, "rank %d/%d: %llu words of peer %d's buffer differ (first at word %llu)\n",
                c->rank, c->nranks, c->vres[p].mismatches, p, c->vres[p].firstBad);
      TCHECK_EQ_INT(c->vres[p].mismatches, 0);
      /* One nonzero word in each pad: the constant 1, where symm_peers.h puts it. */
      TCHECK_EQ_INT(c->vres[p].nonzero, 1);
      uint64_t one = 0;
      CUDA_OK(cudaMemcpy(&one, c->peers->signals[p] + SYMM_PAD_ONE_WORD, sizeof(one),
                         cudaMemcpyDefault));
      TCHECK_EQ_INT(one, 1);
      hostSpotCheck(c, p, seed);
    }
  }
  worldBarrier(local, n);
}

static void pingPongPhase(struct rankCtx* local, int n) {
  /* Launch every local rank's kernel before waiting on any: one thread may drive all ranks. */
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    CUDA_OK(cudaSetDevice(c->dev));
    memset(c->pres, 0, sizeof(*c->pres));
    CUDA_OK(testLaunchPingPong(*c->peers, PING_ROUNDS, 64, WAIT_NS, c->pres, c->stream));
  }
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    CUDA_OK(cudaSetDevice(c->dev));
    CUDA_OK(cudaStreamSynchronize(c->stream));
    TCHECK_EQ_INT(c->pres->rounds, (unsigned)PING_ROUNDS * (unsigned)(c->nranks - 1));
    TCHECK_EQ_INT(c->pres->badData, 0);
    TCHECK_EQ_INT(c->pres->timeouts, 0);
    TCHECK_EQ_INT(c->pres->aborted, 0);
  }
  worldBarrier(local, n);
}

/* Registered windows: peers read each other's ncclMemAlloc memory through the window mapping.
 * A thread driving several ranks registers (and deregisters) them inside one group, as NCCL
 * requires; the mapping then happens at the group's end. */
static void windowPhase(struct rankCtx* local, int n) {
  const size_t bytes = (3u << 20) + 4096 * 3; /* not a granularity multiple */
  uint32_t seed = runSeed ^ 0xabcdu;
  void* buf[MAX_LOCAL] = {0};
  ncclWindow_t win[MAX_LOCAL] = {0};
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    TCHECK_EQ_INT(ncclMemAlloc(&buf[i], bytes), ncclSuccess);
    if (buf[i] == NULL) return;
    CUDA_OK(testLaunchFill(buf[i], bytes / 4, seed, (uint32_t)local[i].rank, local[i].stream));
    CUDA_OK(cudaStreamSynchronize(local[i].stream));
  }
  if (n > 1) TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    TCHECK_EQ_INT(settleAlways(local[i].comm, ncclCommWindowRegister(local[i].comm, buf[i], bytes,
                                                                &win[i], NCCL_WIN_COLL_SYMMETRIC)),
                  ncclSuccess);
    /* Inside the group nothing is mapped yet. */
    void* early[SYMM_MAX_RANKS];
    if (n > 1) TCHECK_EQ_INT(symmTransportFindWindow(local[i].entry, buf[i], 64, early), 0);
  }
  if (n > 1) TCHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  worldBarrier(local, n);
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    void* ptrs[SYMM_MAX_RANKS] = {0};
    const size_t off = 4096 + 12, len = bytes - off - 40;
    int found = symmTransportFindWindow(c->entry, (char*)buf[i] + off, len, ptrs);
    TCHECK_EQ_INT(found, 1);
    if (!found) continue;
    TCHECK(ptrs[c->rank] == (char*)buf[i] + off);
    CUDA_OK(cudaSetDevice(c->dev));
    resetResults(c);
    for (int p = 0; p < c->nranks; p++) {
      TCHECK(ptrs[p] != NULL);
      if (ptrs[p] == NULL) continue;
      CUDA_OK(testLaunchVerify(ptrs[p], len / 4, seed, (uint32_t)p, off / 4, &c->vres[p], c->stream));
    }
    CUDA_OK(cudaStreamSynchronize(c->stream));
    for (int p = 0; p < c->nranks; p++) TCHECK_EQ_INT(c->vres[p].mismatches, 0);
    /* Ranges not (wholly) inside the window. */
    TCHECK_EQ_INT(symmTransportFindWindow(c->entry, (char*)buf[i] + bytes - 8, 16, ptrs), 0);
    TCHECK_EQ_INT(symmTransportFindWindow(c->entry, c->peers->buffers[c->rank], 64, ptrs), 0);
  }
  worldBarrier(local, n);
  /* NCCL registers a window's buffer by calling its own ncclCommRegister, which lands in ours;
   * on a non-blocking communicator it does so from its own thread. That call is NCCL's, not the
   * user's: no region may have been offered to the peers (they would have mapped it by now,
   * and nothing would withdraw it, as NCCL's deregistration of it is its own call too). */
  for (int i = 0; i < n; i++) TCHECK_EQ_INT(symmTransportUserRegMappedCount(local[i].entry), 0);
  if (n > 1) TCHECK_EQ_INT(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++) {
    void* ptrs[SYMM_MAX_RANKS];
    TCHECK_EQ_INT(settleAlways(local[i].comm, ncclCommWindowDeregister(local[i].comm, win[i])),
                  ncclSuccess);
    /* Inside a group the mapping stays until the group's end (deferred operations may use it). */
    TCHECK_EQ_INT(symmTransportFindWindow(local[i].entry, buf[i], 64, ptrs), n > 1 ? 1 : 0);
  }
  if (n > 1) TCHECK_EQ_INT(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < n; i++) {
    void* ptrs[SYMM_MAX_RANKS];
    TCHECK_EQ_INT(symmTransportFindWindow(local[i].entry, buf[i], 64, ptrs), 0);
  }
  worldBarrier(local, n);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    TCHECK_EQ_INT(ncclMemFree(buf[i]), ncclSuccess);
  }
}

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Last: a kernel spinning on signals that never come exits within 2 s of the host raising the
 * abort flag (host-mapped, seen by the device), and the aborted communicator stops launching. */
static void abortPhase(struct rankCtx* local, int n) {
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    memset(local[i].pres, 0, sizeof(*local[i].pres));
    CUDA_OK(testLaunchWaitForAbort(*local[i].peers, WAIT_NS, local[i].pres, local[i].stream));
  }
  struct timespec pause = {0, 200 * 1000 * 1000}, t0;
  nanosleep(&pause, NULL);
  for (int i = 0; i < n; i++) {
    /* Still spinning: nothing may have ended it before the flag. */
    CUDA_OK(cudaSetDevice(local[i].dev));
    TCHECK_EQ_INT(cudaStreamQuery(local[i].stream), cudaErrorNotReady);
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; i++) symmTransportSetAbort(local[i].entry);
  for (int i = 0; i < n; i++) {
    CUDA_OK(cudaSetDevice(local[i].dev));
    CUDA_OK(cudaStreamSynchronize(local[i].stream));
  }
  double waited = secondsSince(&t0);
  if (waited >= 2.0) fprintf(stderr, "rank %d: abort took %.3f s to drain\n", local[0].rank, waited);
  TCHECK(waited < 2.0);
  for (int i = 0; i < n; i++) {
    TCHECK_EQ_INT(local[i].pres->aborted, (unsigned)(local[i].nranks - 1));
    TCHECK_EQ_INT(local[i].pres->timeouts, 0);
    TCHECK_EQ_INT(local[i].pres->badData, 0);
    const struct symmPeers* view = symmTransportBeginLaunch(local[i].entry);
    TCHECK(view == NULL);
    if (view != NULL) symmTransportEndLaunch(local[i].entry);
  }
}

static void peerTest(struct rankCtx* local, int n, int windows) {
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= attach(&local[i]);
  if (ok) {
    for (int i = 0; i < n; i++) checkView(&local[i]);
    patternPhase(local, n);
    /* Every rank's setup is over: no handle server (abstract socket) may remain anywhere. */
    TCHECK_EQ_INT(ourSocketsLeft(), 0);
    pingPongPhase(local, n);
    if (windows) windowPhase(local, n);
    if (nonBlockingComms)
      for (int i = 0; i < n; i++) nonBlockingAllReduces(&local[i]);
    abortPhase(local, n);
  }
  for (int i = 0; i < n; i++) detach(&local[i]);
}

static void peerBody(struct rankCtx* local, int n, void* arg) {
  peerTest(local, n, *(int*)arg);
}

/* ---- main -------------------------------------------------------------------------------- */

static int windows = 1;

static int procsMode(const char* arg) {
  (void)arg;
  runProcesses(peerBody, &windows);
  return 0;
}

static int nonBlockingMode(const char* arg) {
  nonBlockingComms = 1;
  return procsMode(arg);
}

static int initAllMode(const char* arg) {
  (void)arg;
  runInitAll(2, peerBody, &windows); /* one thread, both ranks: windows through a group */
  return 0;
}

static int threadsMode(const char* arg) {
  (void)arg;
  runThreads(2, peerBody, &windows);
  return 0;
}

static int bootstrapMode(const char* arg) {
  const int nranks = arg != NULL ? atoi(arg) : 4;
  if (nranks < 2 || nranks > SYMM_MAX_RANKS) return -1;
  runThreads(nranks, peerBody, &windows);
  return 0;
}

int main(int argc, char** argv) {
  static const struct peerMode modes[] = {
      {"procs", 2, PEER_FORKED, procsMode},       {"nonblocking", 2, PEER_FORKED, nonBlockingMode},
      {"initall", 2, PEER_REAL, initAllMode},     {"threads", 2, PEER_REAL, threadsMode},
      {"bootstrap", 1, PEER_BOOTSTRAP, bootstrapMode}};
  static const struct peerTest test = {"peer_mem", "procs|nonblocking|initall|threads|bootstrap [nranks]",
                                       0, modes, sizeof(modes) / sizeof(modes[0])};
  return peerMain(&test, argc, argv);
}
