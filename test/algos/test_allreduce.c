/* SPDX-License-Identifier: Apache-2.0 */
/* GPU all-reduce correctness: every algorithm x dtype x op x size x placement, graphs, soak, abort.
 *
 * Two ways to reach the kernels:
 *   --mode direct  the test builds peer memory itself (cudaMalloc + peer access in one process,
 *                  cudaIpc handles between forked processes) and calls symmCollLaunch with
 *                  the algorithm forced: tests the kernels without src/transport.
 *   --mode nccl    through ncclAllReduce on real communicators (SYMMCOLL_ALLREDUCE_ALGO forced),
 *                  also comparing with the real NCCL's result (algo=nccl) on the same data.
 * Ranks: --ranks N in one process driven by one thread (ncclCommInitAll + groups in nccl mode,
 * like nccl-tests -g), --procs N (fork, one rank per process), --threads (nccl mode: N threads
 * each calling ncclCommInitRank; with SYMMCOLL_NCCL_LIB at the test bootstrap for N > GPUs).
 * Ranks are placed on GPU rank % ngpus. Prints "test_allreduce: N checks, M failed". */
#include "allreduce_test.h"

#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"
#include "forward.h"
#include "param.h"
#include "procs.h"
#include "watchdog.h"

int harnessFailures, harnessChecks;

struct arOptions opt = {MODE_DIRECT, 2, 0, 0, 0, 0, 1, 1, 0, 20000, 1000, 64u << 20, 256u << 20, 12345,
                        (1u << SYMM_ALGO_ONESHOT) | (1u << SYMM_ALGO_TWOSHOT) |
                            (1u << SYMM_ALGO_MULTIMEM) | (1u << SYMM_ALGO_LAMPORT)};
int nranksWorld, ngpus;
pthread_barrier_t threadBarrier;
struct rankCtx* allRanks;

void arDie(const char* file, int line, const char* call, const char* error) {
  fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, error);
  exit(2);
}

/* ------------------------------------------------------------------------------------------ */
/* Drivers */

static void runDriver(struct driver* d) {
  rngState = opt.seed * 2654435761u + 1; /* identical case sequence in every driver */
  if (opt.mode == MODE_NCCL && d->isLeader) {
    for (int i = 0; i < d->nlocal; i++) {
      struct symmComm* sc = symmCommFind(d->local[i]->comm);
      printf("rank %d: %s\n", d->local[i]->rank,
             sc && sc->transport ? "symmetric memory: our kernels run"
                                 : "no symmetric memory: every call forwards to the real NCCL");
    }
  }
  sweepSmall(d);
  sweepLarge(d);
  if (opt.replays > 0) graphTest(d);
  if (opt.soak > 0) soakTest(d);
  if (opt.abortTest && !opt.threads && opt.procs == 0) abortTest(d);
}

static void setupNcclSingle(struct rankCtx* ctx) {
  ncclComm_t comms[SYMM_MAX_RANKS];
  int devs[SYMM_MAX_RANKS];
  for (int r = 0; r < nranksWorld; r++) devs[r] = ctx[r].dev;
  NCCL_OR_DIE(ncclCommInitAll(comms, nranksWorld, devs));
  for (int r = 0; r < nranksWorld; r++) ctx[r].comm = comms[r];
}

static void teardown(struct rankCtx* c) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaDeviceSynchronize());
  if (c->comm) NCCL_OR_DIE(ncclCommDestroy(c->comm));
  c->comm = NULL;
}

struct threadArg {
  struct rankCtx* ctx;
  ncclUniqueId id;
};

static void* threadMain(void* p) {
  struct threadArg* t = p;
  struct rankCtx* c = t->ctx;
  allocRankMemory(c);
  NCCL_OR_DIE(ncclCommInitRank(&c->comm, nranksWorld, t->id, c->rank));
  struct driver d = {.nlocal = 1, .local = {c}, .isLeader = c->rank == 0};
  runDriver(&d);
  driverBarrier();
  teardown(c);
  return NULL;
}

static int childMain(int rank) {
  struct rankCtx c;
  memset(&c, 0, sizeof(c));
  c.rank = rank;
  int count = 0;
  CUDA_OR_DIE(cudaGetDeviceCount(&count));
  ngpus = count;
  c.dev = rank % ngpus;
  allocRankMemory(&c);
  if (opt.mode == MODE_DIRECT) {
    connectDirectIpc(&c);
  } else {
    struct blob mine, all[SYMM_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    if (rank == 0) NCCL_OR_DIE(ncclGetUniqueId(&mine.id));
    exchange(rank, &mine, all);
    NCCL_OR_DIE(ncclCommInitRank(&c.comm, nranksWorld, all[0].id, rank));
  }
  struct driver d = {.nlocal = 1, .local = {&c}, .isLeader = rank == 0};
  runDriver(&d);
  /* Every rank finishes its kernels before any unmaps: one more exchange as a barrier. */
  CUDA_OR_DIE(cudaDeviceSynchronize());
  struct blob dummy, all[SYMM_MAX_RANKS];
  memset(&dummy, 0, sizeof(dummy));
  exchange(rank, &dummy, all);
  teardown(&c);
  char name[32];
  snprintf(name, sizeof(name), "test_allreduce[rank %d]", rank);
  return harnessReport(name);
}

static void usage(void) {
  fprintf(stderr,
          "usage: test_allreduce [--mode direct|nccl] [--ranks N] [--procs N] [--threads]\n"
          "  [--algos oneshot,twoshot,multimem,lamport] [--soak CALLS] [--replays N] [--staging-mb MB]\n"
          "  [--max-mb MB] [--quick] [--real] [--no-abort] [--no-nccl-compare] [--seed S]\n");
  exit(2);
}

/* nccl mode, auto: a tuning file read at communicator setup sends every size class of the soak
 * to one of our algorithms (Lamport <= 1 KiB, one-shot <= 4 KiB, two-shot to 16 KiB, emulated
 * multimem to 64 KiB where it has a kernel, two-shot to 96 KiB) and the rest to the real NCCL. */
static int installTuningFile(void) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/symmcoll_test_tuning_%d.txt", (int)getpid());
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    return 0;
  }
  fprintf(f, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
             "allreduce lamport<=1K oneshot<=4K twoshot<=16383 multimem<=64K twoshot<=96K\n");
  fclose(f);
  setenv("SYMMCOLL_TUNING_FILE", path, 1);
  return 1;
}

int main(int argc, char** argv) {
  watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
  harnessManyStreamsPerGpu();
  /* Logging first: src/core/knobs.c logs under its lock, which deadlocks if the first param read
   * (with the variable set) also has to initialise logging. */
  (void)symmLogLevel();
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--mode") && v) { opt.mode = !strcmp(v, "nccl") ? MODE_NCCL : MODE_DIRECT; i++; }
    else if (!strcmp(a, "--ranks") && v) { opt.ranks = atoi(v); i++; }
    else if (!strcmp(a, "--procs") && v) { opt.procs = atoi(v); opt.ranks = opt.procs; i++; }
    else if (!strcmp(a, "--threads")) opt.threads = 1;
    else if (!strcmp(a, "--soak") && v) { opt.soak = atol(v); i++; }
    else if (!strcmp(a, "--replays") && v) { opt.replays = atol(v); i++; }
    else if (!strcmp(a, "--staging-mb") && v) { opt.stagingBytes = (size_t)atol(v) << 20; i++; }
    else if (!strcmp(a, "--max-mb") && v) { opt.maxBytes = (size_t)atol(v) << 20; i++; }
    else if (!strcmp(a, "--seed") && v) { opt.seed = (uint64_t)atoll(v); i++; }
    else if (!strcmp(a, "--quick")) opt.quick = 1;
    else if (!strcmp(a, "--real")) opt.real = 1;
    else if (!strcmp(a, "--no-abort")) opt.abortTest = 0;
    else if (!strcmp(a, "--no-nccl-compare")) opt.compareNccl = 0;
    else if (!strcmp(a, "--algos") && v) {
      opt.algoMask = 0;
      char buf[256];
      snprintf(buf, sizeof(buf), "%s", v);
      for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int al = symmAlgoParse(tok);
        if (al <= 0) usage();
        opt.algoMask |= 1u << al;
      }
      i++;
    } else usage();
  }
  /* Multicast never: these machines forbid it. Multimem runs emulated. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  setenv("SYMMCOLL_MULTIMEM_EMULATE", "1", 1);
  if (opt.mode == MODE_NCCL && !installTuningFile()) return 2;
  nranksWorld = opt.ranks;
  if (nranksWorld < 1 || nranksWorld > SYMM_MAX_RANKS) usage();
  if (opt.maxBytes < (4u << 20)) opt.maxBytes = 4u << 20;

  ngpus = procsCountGpus();
  if (ngpus == 0) {
    printf("test_allreduce: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  if (opt.mode == MODE_NCCL && !opt.threads && opt.procs == 0 && nranksWorld > ngpus) {
    printf("test_allreduce: %d ranks in one process need %d GPUs (have %d), skipped\n",
           nranksWorld, nranksWorld, ngpus);
    return TEST_SKIP_CODE;
  }
  /* Without MPS, kernels of processes sharing a GPU are time-sliced, not concurrent: ranks that
   * wait for each other then crawl (minutes for this test). */
  if (opt.procs > ngpus) {
    printf("test_allreduce: %d processes need %d GPUs (have %d): processes sharing a GPU run "
           "their kernels time-sliced, skipped\n", opt.procs, opt.procs, ngpus);
    return TEST_SKIP_CODE;
  }
  /* The real NCCL refuses two ranks on one GPU; only the test bootstrap takes them. */
  if (opt.mode == MODE_NCCL && nranksWorld > ngpus &&
      (symmRealLoad() != ncclSuccess || dlsym(symmReal.handle, "symmTestBootstrapIsFake") == NULL)) {
    printf("test_allreduce: %d ranks on %d GPU(s) need the test bootstrap as SYMMCOLL_NCCL_LIB "
           "(the real NCCL refuses two ranks on one GPU), skipped\n", nranksWorld, ngpus);
    return TEST_SKIP_CODE;
  }
  if (nranksWorld > 2 && opt.maxBytes > (64u << 20)) opt.maxBytes = 64u << 20;
  printf("test_allreduce: mode=%s ranks=%d %s gpus=%d staging=%zu MiB max=%zu MiB soak=%ld "
         "replays=%ld\n",
         opt.mode == MODE_NCCL ? "nccl" : "direct", nranksWorld,
         opt.procs ? "processes" : opt.threads ? "threads" : "one-thread", ngpus,
         opt.stagingBytes >> 20, opt.maxBytes >> 20, opt.soak, opt.replays);
  fflush(stdout);

  if (opt.procs > 0) {
    pid_t pids[SYMM_MAX_RANKS];
    for (int r = 0; r < nranksWorld; r++)
      if (pipe(upPipe[r]) != 0 || pipe(downPipe[r]) != 0) { perror("pipe"); return 2; }
    for (int r = 0; r < nranksWorld; r++) {
      pids[r] = fork();
      if (pids[r] == 0) {
        /* Keep only our own ends, so a rank that dies is seen as end-of-file, not a hang. */
        for (int o = 0; o < nranksWorld; o++) {
          close(upPipe[o][0]);
          close(downPipe[o][1]);
          if (o != r) {
            close(upPipe[o][1]);
            close(downPipe[o][0]);
          }
        }
        _exit(childMain(r));
      }
    }
    for (int r = 0; r < nranksWorld; r++) {
      close(upPipe[r][1]);
      close(downPipe[r][0]);
    }
    /* Relay the blob exchanges: setup, then the final barrier. */
    relayBlobs();
    relayBlobs();
    int failed = 0;
    for (int r = 0; r < nranksWorld; r++) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank %d exited with status %d\n", r, status);
        failed++;
      }
    }
    printf("test_allreduce: %d processes, %d failed\n", nranksWorld, failed);
    return failed ? 1 : 0;
  }

  struct rankCtx ctx[SYMM_MAX_RANKS];
  memset(ctx, 0, sizeof(ctx));
  for (int r = 0; r < nranksWorld; r++) {
    ctx[r].rank = r;
    ctx[r].dev = r % ngpus;
  }
  if (opt.threads) {
    if (opt.mode != MODE_NCCL) usage();
    pthread_barrier_init(&threadBarrier, NULL, (unsigned)nranksWorld);
    struct threadArg targs[SYMM_MAX_RANKS];
    pthread_t th[SYMM_MAX_RANKS];
    ncclUniqueId id;
    NCCL_OR_DIE(ncclGetUniqueId(&id));
    for (int r = 0; r < nranksWorld; r++) {
      targs[r].ctx = &ctx[r];
      targs[r].id = id;
      pthread_create(&th[r], NULL, threadMain, &targs[r]);
    }
    for (int r = 0; r < nranksWorld; r++) pthread_join(th[r], NULL);
    return harnessReport("test_allreduce");
  }
  for (int r = 0; r < nranksWorld; r++) allocRankMemory(&ctx[r]);
  if (opt.mode == MODE_DIRECT) {
    connectDirectLocal(ctx, nranksWorld);
    allRanks = ctx;
  } else {
    setupNcclSingle(ctx);
  }
  struct driver d = {.nlocal = nranksWorld, .isLeader = 1};
  for (int r = 0; r < nranksWorld; r++) d.local[r] = &ctx[r];
  runDriver(&d);
  for (int r = 0; r < nranksWorld; r++) teardown(&ctx[r]);
  return harnessReport("test_allreduce");
}

