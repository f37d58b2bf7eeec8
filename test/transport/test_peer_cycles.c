/* SPDX-License-Identifier: Apache-2.0 */
/* GPU test of setup's life cycle: thousands of create/destroy cycles leave fds, mappings and GPU
 * memory where they were; a rank that cannot stage its setup exchange leaves every rank
 * forwarding with right results; a peer process killed or stopped while our kernel waits for it
 * leaves the survivor able to abort. Usage: test_peer_cycles bootstrap|procs|setup <count>,
 * test_peer_cycles fault | fault_readback | peer_gone kill|stop (white-box, see peer_common.h). */
#include "peer_common.h"
#include "setup.h"

/* ---- a rank that cannot stage its setup exchange (SYMMCOLL_FAULT_EXCHANGE_RANK) ---------- */

/* Setup finished on every rank (no one waits in the exchange the faulty rank could not stage),
 * nobody got symmetric memory, and all-reduces still come out right through the real NCCL. */
static void faultExchangeBody(struct rankCtx* local, int n, void* arg) {
  (void)arg;
  enum { COUNT = 4099 };
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    c->entry = symmCommFind(c->comm);
    TCHECK(c->entry != NULL);
    if (c->entry == NULL) continue;
    TCHECK(symmTransportPeers(c->entry) == NULL);
    float* host = malloc(COUNT * sizeof(float));
    float* dev = NULL;
    cudaStream_t stream = NULL;
    TCHECK(host != NULL);
    if (host == NULL) continue;
    for (int k = 0; k < COUNT; k++) host[k] = (float)((k % 97) * (c->rank + 1));
    CUDA_OK(cudaSetDevice(c->dev));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void**)&dev, COUNT * sizeof(float)));
    CUDA_OK(cudaMemcpyAsync(dev, host, COUNT * sizeof(float), cudaMemcpyHostToDevice, stream));
    TCHECK_EQ_INT(ncclAllReduce(dev, dev, COUNT, ncclFloat32, ncclSum, c->comm, stream),
                  ncclSuccess);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host, dev, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    const float ranksSum = (float)(c->nranks * (c->nranks + 1) / 2);
    int bad = 0;
    for (int k = 0; k < COUNT; k++) bad += host[k] != (float)(k % 97) * ranksSum;
    TCHECK_EQ_INT(bad, 0);
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaStreamDestroy(stream));
    free(host);
  }
}

/* ---- a rank whose last staging agreement fails after the all-gather ------------------------ */

/* Rank 1 cannot read back the final staging agreement (SYMMCOLL_FAULT_READBACK_*), which rank 0
 * completed: rank 0 staged and runs our kernel, which can only stop at its deadline; rank 1
 * must not forward alone (its all-reduce would wait for rank 0's real one forever), it fails
 * its communicator: the call returns the error, and so does ncclCommGetAsyncError. */
static void faultReadbackBody(struct rankCtx* local, int n, void* arg) {
  (void)arg;
  enum { COUNT = 4099 };
  for (int i = 0; i < n; i++) {
    struct rankCtx* c = &local[i];
    c->entry = symmCommFind(c->comm);
    TCHECK(c->entry != NULL);
    if (c->entry == NULL) continue;
    float* dev = NULL;
    cudaStream_t stream = NULL;
    CUDA_OK(cudaSetDevice(c->dev));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void**)&dev, COUNT * sizeof(float)));
    CUDA_OK(cudaMemsetAsync(dev, 0, COUNT * sizeof(float), stream));
    const ncclResult_t res = ncclAllReduce(dev, dev, COUNT, ncclFloat32, ncclSum, c->comm, stream);
    ncclResult_t state = ncclSuccess;
    if (c->rank == 1) {
      TCHECK(symmTransportPeers(c->entry) == NULL);
      TCHECK_EQ_INT(res, ncclUnhandledCudaError);
      TCHECK_EQ_INT(ncclCommGetAsyncError(c->comm, &state), ncclSuccess);
      TCHECK_EQ_INT(state, ncclUnhandledCudaError);
    } else {
      TCHECK(symmTransportPeers(c->entry) != NULL);
      TCHECK_EQ_INT(res, ncclSuccess);
      CUDA_OK(cudaStreamSynchronize(stream)); /* the kernel gives up at its deadline */
      TCHECK_EQ_INT(ncclCommGetAsyncError(c->comm, &state), ncclSuccess);
      TCHECK_EQ_INT(state, ncclRemoteError);
    }
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaStreamDestroy(stream));
  }
}

/* ---- create/destroy cycles --------------------------------------------------------------- */

struct resources {
  int fds, maps;
  size_t freeMem[8]; /* per device; 0 for the devices not measured */
};

/* Only the devices the cycles use: querying another one creates a context the cycles never
 * touch. On 4 GPUs, measuring all four counted that context's fds and mappings as the cycles'
 * (+36 fds and +305 mappings when the first measurement created it; with it created before the
 * counts, still +7 mappings over 1000 cycles, not a per-cycle leak). */
static void measure(struct resources* r, int firstDev, int ndevs) {
  int prevDev = 0;
  CUDA_OK(cudaGetDevice(&prevDev));
  for (int d = 0; d < ndev && d < 8; d++) {
    size_t total = 0;
    r->freeMem[d] = 0;
    if (d < firstDev || d >= firstDev + ndevs) continue;
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemGetInfo(&r->freeMem[d], &total));
  }
  CUDA_OK(cudaSetDevice(prevDev));
  r->fds = harnessCountEntries("/proc/self/fd");
  r->maps = countLines("/proc/self/maps");
}

/* The driver may grow internal pools (page tables, stream/event pools) on first use and keep
 * them until the context goes; one 2 MiB granule per device covers that. A per-cycle leak of
 * even one granule would show as cycles x 2 MiB, far beyond this. */
#define DEVICE_SLACK (2u << 20)

static void compareResources(const struct resources* before, const struct resources* after,
                             int cycles, const char* what) {
  printf("%s: %d cycles: fds %d -> %d, maps %d -> %d", what, cycles, before->fds, after->fds,
         before->maps, after->maps);
  for (int d = 0; d < ndev && d < 8; d++)
    if (before->freeMem[d])
      printf(", dev%d free %zu -> %zu MiB", d, before->freeMem[d] >> 20, after->freeMem[d] >> 20);
  printf("\n");
  fflush(stdout); /* rank processes leave through _exit */
  CHECK_EQ_INT(after->fds, before->fds);
  CHECK_EQ_INT(after->maps, before->maps);
  for (int d = 0; d < ndev && d < 8; d++)
    if (before->freeMem[d]) CHECK(after->freeMem[d] + DEVICE_SLACK >= before->freeMem[d]);
}

/* ncclCommInitAll of 2 ranks (one process, both GPUs), created and destroyed `cycles` times. */
static void cyclesInitAll(int cycles) {
  ncclComm_t comms[2];
  struct resources before, after;
  int ineligible = 0, failed = 0;
  for (int i = -3; i < cycles; i++) {
    if (i == 0) measure(&before, 0, 2); /* after warm-up: the driver's one-time allocations are made */
    ncclResult_t res = ncclCommInitAll(comms, 2, NULL);
    if (res != ncclSuccess) {
      failed++;
      continue;
    }
    for (int r = 0; r < 2; r++) {
      struct symmComm* e = symmCommFind(comms[r]);
      ineligible += e == NULL || symmTransportPeers(e) == NULL;
    }
    for (int r = 0; r < 2; r++) failed += ncclCommDestroy(comms[r]) != ncclSuccess;
  }
  measure(&after, 0, 2);
  CHECK_EQ_INT(failed, 0);
  CHECK_EQ_INT(ineligible, 0);
  CHECK_EQ_INT(symmCommCount(), 0);
  compareResources(&before, &after, cycles, "InitAll(2)");
}

/* Two processes: a parent communicator, then `cycles` ncclCommSplit children, each set up (fds
 * passed between the processes) and destroyed. Measured in each process. */
/* Both processes at the same point, every earlier child destroyed (imports of our memory
 * included), through the real NCCL on the parent communicator. */
static void processBarrier(struct rankCtx* c, int* word, cudaStream_t stream) {
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclAllReduce, (word, word, 1, ncclInt32, ncclSum, c->comm, stream));
  CHECK_EQ_INT(res, ncclSuccess);
  CUDA_OK(cudaStreamSynchronize(stream));
}

/* One create/destroy cycle; returns 0 when it worked and the communicator was eligible. */
typedef int (*cycleFn)(struct rankCtx* local);

/* A child of the parent communicator through the real NCCL's ncclCommSplit, then destroyed. */
static int splitCycle(struct rankCtx* local) {
  ncclComm_t child = NULL;
  if (ncclCommSplit(local->comm, 0, local->rank, &child, NULL) != ncclSuccess || child == NULL)
    return 1;
  struct symmComm* e = symmCommFind(child);
  int bad = e == NULL || symmTransportPeers(e) == NULL;
  bad |= ncclCommDestroy(child) != ncclSuccess;
  return bad;
}

/* Our peer memory alone torn down and set up again on the parent communicator: the fd exchange
 * between the processes every time, without the ~0.8 s each ncclCommSplit costs the real NCCL. */
static int setupCycle(struct rankCtx* local) {
  struct symmComm* entry = symmCommFind(local->comm);
  if (entry == NULL) return 1;
  symmTransportTeardown(entry, 0);
  struct symmComm* one[1] = {entry};
  (void)symmSetupAgree(one, 1);
  return symmTransportPeers(entry) == NULL;
}

/* `cycles` cycles after 5 of warm-up, fds / maps / free device memory measured in each process
 * before and after, both processes at the same point each time. */
static void runCycles(struct rankCtx* local, int cycles, cycleFn cycle, const char* label) {
  struct resources before, after;
  int failed = 0;
  int* word = NULL;
  cudaStream_t stream = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&word, sizeof(int)));
  CUDA_OK(cudaMemsetAsync(word, 0, sizeof(int), stream));
  for (int i = -5; i < cycles; i++) {
    if (i == 0) {
      processBarrier(local, word, stream);
      measure(&before, local->dev, 1); /* the other device is the other process's to change */
    }
    failed += cycle(local);
    if (local->rank == 0 && i > 0 && i % 100 == 0) {
      printf("rank 0: %d cycles done\n", i);
      fflush(stdout);
    }
  }
  processBarrier(local, word, stream);
  measure(&after, local->dev, 1);
  CHECK_EQ_INT(failed, 0);
  CHECK_EQ_INT(ourSocketsLeft(), 0);
  char what[64];
  snprintf(what, sizeof(what), "rank %d %s (2 processes)", local->rank, label);
  compareResources(&before, &after, cycles, what);
  CUDA_OK(cudaFree(word));
  CUDA_OK(cudaStreamDestroy(stream));
}

static void cyclesSplitBody(struct rankCtx* local, int n, void* arg) {
  (void)n;
  runCycles(local, *(int*)arg, splitCycle, "Split");
}

static void cyclesSetupBody(struct rankCtx* local, int n, void* arg) {
  (void)n;
  runCycles(local, *(int*)arg, setupCycle, "setup/teardown");
}

/* ---- a peer process killed (SIGKILL) or stopped (SIGSTOP) while our kernel waits for it ------ */

static double monoSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Both ranks: ten checked all-reduces of ours, then a 256 MiB one (several two-shot rounds).
 * Rank 1 signals itself right after launching it: killed, its context goes with the call perhaps
 * half done; stopped, its GPU work goes on but it issues nothing more. Rank 0 issues one more
 * call, which no peer will meet: its stream must be stuck, and then ncclCommAbort (as PyTorch's
 * watchdog calls it) must return and the stream drain within seconds, leaving the GPU usable.
 * Nothing of ours may wait for the gone peer: no exchange in teardown, no deadline. */
static void peerGoneBody(int rank, ncclComm_t comm, int sig) {
  enum { SMALL = 4099 };
  const size_t big = (size_t)64 << 20; /* int32 elements: 256 MiB */
  struct symmComm* entry = symmCommFind(comm);
  const struct symmPeers* peers = entry != NULL ? symmTransportPeers(entry) : NULL;
  CHECK(peers != NULL);
  int32_t* host = malloc(SMALL * sizeof(int32_t));
  int32_t* dev = NULL;
  cudaStream_t stream = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void**)&dev, big * sizeof(int32_t)));
  CHECK(host != NULL);
  if (peers == NULL || host == NULL || dev == NULL) _exit(3);
  for (int k = 0; k < 10; k++) checkOurAllReduce(comm, peers, rank, 2, host, dev, SMALL, stream);
  CHECK_EQ_INT(ncclAllReduce(dev, dev, big, ncclInt32, ncclSum, comm, stream), ncclSuccess);
  if (rank == 1) {
    raise(sig);
    for (;;) pause(); /* stopped: the parent kills it once rank 0 is done */
  }
  CHECK_EQ_INT(ncclAllReduce(dev, dev, SMALL, ncclInt32, ncclSum, comm, stream), ncclSuccess);
  usleep(500 * 1000);
  CHECK_EQ_INT(cudaStreamQuery(stream), cudaErrorNotReady); /* waiting for the gone peer */
  const double t0 = monoSeconds();
  CHECK_EQ_INT(ncclCommAbort(comm), ncclSuccess);
  const double aborted = monoSeconds() - t0;
  const cudaError_t drained = cudaStreamSynchronize(stream);
  const double drainedAt = monoSeconds() - t0;
  printf("peer_gone %s: ncclCommAbort returned after %.2f s, the stream drained (%s) after "
         "%.2f s\n", sig == SIGKILL ? "kill" : "stop", aborted, cudaGetErrorName(drained), drainedAt);
  CHECK(aborted < 20.0);
  CHECK_EQ_INT(drained, cudaSuccess);
  CHECK(drainedAt < 30.0);
  /* The GPU still works for this process. */
  CUDA_OK(cudaMemsetAsync(dev, 0, SMALL * sizeof(int32_t), stream));
  CUDA_OK(cudaMemcpyAsync(host, dev, SMALL * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CHECK_EQ_INT(host[SMALL - 1], 0);
  CUDA_OK(cudaFree(dev));
  CUDA_OK(cudaStreamDestroy(stream));
  free(host);
}

/* Two rank processes as runProcesses makes them, but rank 1 never reports (it dies or stops):
 * only rank 0's counts come back; then rank 1 is killed if it is still there and reaped. */
static void runPeerGone(int sig) {
  int idPipe[2], resultPipe[2];
  if (pipe(idPipe) != 0 || pipe(resultPipe) != 0) {
    CHECK(0);
    return;
  }
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      CHECK(0);
      return;
    }
    if (pids[r] == 0) {
      close(resultPipe[0]);
      if (r == 1) close(resultPipe[1]); /* so a rank 0 that dies early ends the parent's read */
      ncclUniqueId id;
      const int ok = rankProcessId(r, idPipe, &id);
      CHECK(ok);
      ncclComm_t comm = NULL;
      if (ok) {
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(testPrewarmKernels());
        ncclResult_t res = ncclCommInitRank(&comm, 2, id, r);
        CHECK_EQ_INT(res, ncclSuccess);
        CHECK_EQ_INT(usingBootstrap(), 0);
        if (res == ncclSuccess) peerGoneBody(r, comm, sig);
      }
      fflush(stdout); /* _exit does not flush: the timing line */
      if (r == 0) {
        int counts[2] = {harnessChecks, harnessFailures};
        (void)procsWriteAll(resultPipe[1], counts, sizeof(counts));
        close(resultPipe[1]);
      }
      _exit(0);
    }
  }
  close(idPipe[0]);
  close(idPipe[1]);
  close(resultPipe[1]);
  int counts[2];
  if (procsReadAll(resultPipe[0], counts, sizeof(counts)) == 0) {
    harnessChecks += counts[0];
    harnessFailures += counts[1];
  } else {
    CHECK(!"rank 0 died before reporting");
  }
  close(resultPipe[0]);
  kill(pids[1], SIGKILL);
  for (int r = 0; r < 2; r++) {
    int status = 0;
    CHECK_EQ_INT(waitpid(pids[r], &status, 0), pids[r]);
    if (r == 0) CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    else CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
}

/* ---- main -------------------------------------------------------------------------------- */

static int faultMode(const char* arg) {
  (void)arg;
  /* Rank 1 cannot stage any of its setup exchanges (as if device memory had run out). */
  setenv("SYMMCOLL_FAULT_EXCHANGE_RANK", "1", 1);
  symmParamResetAll();
  runProcesses(faultExchangeBody, NULL);
  return 0;
}

static int faultReadbackMode(const char* arg) {
  (void)arg;
  /* Exchanges 0-2 are setup's (records, access, tables), 3 and 4 staging's (built at creation
   * here, SYMMCOLL_STAGE_AT_CREATION=1): 4 is its final agreement. */
  setenv("SYMMCOLL_FAULT_READBACK_RANK", "1", 1);
  setenv("SYMMCOLL_FAULT_READBACK_CALL", "4", 1);
  setenv("SYMMCOLL_SPIN_DEADLINE_MS", "3000", 1);
  symmParamResetAll();
  runProcesses(faultReadbackBody, NULL);
  return 0;
}

static int peerGoneMode(const char* arg) {
  if (arg == NULL || (strcmp(arg, "kill") != 0 && strcmp(arg, "stop") != 0)) return -1;
  runPeerGone(strcmp(arg, "kill") == 0 ? SIGKILL : SIGSTOP);
  return 0;
}

static int cycles;

/* A small staging buffer keeps 1,000 cycles fast; a leak still shows (cycles x buffer). */
static void cyclesKnobs(const char* arg) {
  cycles = arg != NULL ? atoi(arg) : 1000;
  setenv("SYMMCOLL_BUFFER_BYTES", "8388608", 0);
  symmParamResetAll();
}

static int bootstrapMode(const char* arg) {
  cyclesKnobs(arg);
  cyclesInitAll(cycles);
  return 0;
}

static int procsMode(const char* arg) {
  cyclesKnobs(arg);
  runProcesses(cyclesSplitBody, &cycles);
  return 0;
}

static int setupMode(const char* arg) {
  cyclesKnobs(arg);
  runProcesses(cyclesSetupBody, &cycles);
  return 0;
}

int main(int argc, char** argv) {
  static const struct peerMode modes[] = {
      {"bootstrap", 1, PEER_BOOTSTRAP, bootstrapMode}, {"procs", 2, PEER_FORKED, procsMode},
      {"setup", 2, PEER_FORKED, setupMode},            {"fault", 2, PEER_FORKED, faultMode},
      {"fault_readback", 2, PEER_FORKED, faultReadbackMode},
      {"peer_gone", 2, PEER_FORKED, peerGoneMode}};
  static const struct peerTest test = {"peer_cycles",
                                       "bootstrap|procs|setup <count> | fault | fault_readback | "
                                       "peer_gone kill|stop", 0,
                                       modes, sizeof(modes) / sizeof(modes[0])};
  return peerMain(&test, argc, argv);
}
