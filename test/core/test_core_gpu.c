/* SPDX-License-Identifier: Apache-2.0 */
/* GPU tests of the host path through the test bootstrap (ranks are threads; SYMMCOLL_NCCL_LIB
 * names test/bootstrap/libnccl.so.2): a late rank, an injected kernel error, two streams with
 * eager calls and graph replays (streams-eager: no graph, its calls issued eagerly), abort from
 * a watchdog thread, groups, non-blocking communicators and their splits, a shrink with
 * NCCL_SHRINK_ABORT, an agreed knob that differs, a mixed soak, and repeated identical calls.
 * Exits 77 without a GPU.
 *   test_core_gpu late N DELAY_MS | fault N | streams[-eager] N ITERS | abort N CYCLES |
 *                 abort-setup[-norevoke] N | group N | split N | shrink N (N >= 3) |
 *                 nonblocking N | mismatch N | soak N CALLS | cta-zero N | ce-abort N |
 *                 cta-efficiency N | max-ctas N | repeat N CALLS */
#include "core_gpu.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "watchdog.h"

int harnessFailures, harnessChecks;
int ndev, nranks;
long param;
ncclUniqueId uid;
pthread_barrier_t barrier;

/* ---- driver --------------------------------------------------------------------------------- */
static rankBody body;
static int blockingComms = 1;

/* The ranks of the running world, for the watchdog's report. */
static struct rank* liveRanks[9];

/* When a test hangs (SYMMCOLL_TEST_WATCHDOG_S): each rank's launches of ours and what its device
 * state says, read on a stream of its own (copies still run while kernels spin): the epoch, the
 * gave-up word and the block ticket, and the start/mid signal words its blocks 0 and 1 received
 * from each writer. Ranks whose epochs or signals disagree show who waits for whom. */
static void reportDeviceState(void) {
  for (int q = 0; q < nranks; q++) {
    struct rank* r = liveRanks[q];
    struct symmComm* c = r != NULL ? symmCommFind(r->comm) : NULL;
    const struct symmPeers* p = c != NULL ? symmTransportPeers(c) : NULL;
    if (p == NULL) continue;
    uint64_t state[SYMM_STATE_KERNEL_WORDS] = {0}, sig[2][2][SYMM_MAX_RANKS];
    memset(sig, 0, sizeof(sig));
    const enum cudaMemcpyKind toHost = cudaMemcpyDeviceToHost;
    cudaStream_t s = NULL;
    int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMemcpyAsync(state, p->localState, sizeof(state), toHost, s) == cudaSuccess;
    for (int purpose = 0; purpose < 2 && ok; purpose++)
      for (int b = 0; b < 2 && ok; b++) {
        const uint64_t* words = p->signals[p->rank] + SYMM_PAD_SIGNAL_WORD(purpose, b, 0);
        const size_t bytes = (size_t)p->nranks * sizeof(uint64_t);
        ok = cudaMemcpyAsync(sig[purpose][b], words, bytes, toHost, s) == cudaSuccess;
      }
    ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
    fprintf(stderr, "rank %d: %llu launches of ours; device %s: epoch %llu, gave up %llu, "
            "ticket %llu\n", q, (unsigned long long)__atomic_load_n(&c->launches, __ATOMIC_RELAXED),
            ok ? "state" : "state unreadable", (unsigned long long)state[SYMM_STATE_EPOCH],
            (unsigned long long)state[SYMM_STATE_GAVE_UP],
            (unsigned long long)state[SYMM_STATE_TICKET]);
    for (int purpose = 0; ok && purpose < 2; purpose++)
      for (int b = 0; b < 2; b++) {
        fprintf(stderr, "  %s signals, block %d, from writers 0..%d:", purpose ? "mid" : "start", b,
                p->nranks - 1);
        for (int w = 0; w < p->nranks; w++)
          fprintf(stderr, " %llu", (unsigned long long)sig[purpose][b][w]);
        fprintf(stderr, "\n");
      }
    if (s != NULL) (void)cudaStreamDestroy(s);
  }
}

static void* rankMain(void* arg) {
  struct rank r = {.rank = (int)(long)arg};
  if (openRank(&r, blockingComms)) {
    __atomic_store_n(&liveRanks[r.rank], &r, __ATOMIC_RELEASE);
    body(&r);
    __atomic_store_n(&liveRanks[r.rank], NULL, __ATOMIC_RELEASE);
    closeRank(&r, r.comm != NULL);
  }
  return NULL;
}

void runWorld(rankBody b, int extraParties, void* (*extra)(void*), void* extraArg) {
  body = b;
  TCHECK_EQ_INT(ncclGetUniqueId(&uid), ncclSuccess);
  pthread_barrier_init(&barrier, NULL, (unsigned)(nranks + extraParties));
  pthread_t threads[9];
  for (long r = 0; r < nranks; r++) pthread_create(&threads[r], NULL, rankMain, (void*)r);
  if (extra != NULL) pthread_create(&threads[nranks], NULL, extra, extraArg);
  for (int r = 0; r < nranks + (extra != NULL); r++) pthread_join(threads[r], NULL);
  pthread_barrier_destroy(&barrier);
}
int main(int argc, char** argv) {
  watchdogReport = reportDeviceState;
  watchdogArm(0); /* SYMMCOLL_TEST_WATCHDOG_S: stacks instead of a silent hang */
  harnessManyStreamsPerGpu();
  (void)symmLogLevel();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  if (argc < 3) {
    fprintf(stderr, "usage: test_core_gpu late|fault|streams|streams-eager|abort|abort-setup[-norevoke]|group|"
            "nonblocking|split|shrink|mismatch|soak|cta-zero|ce-abort|gave-up|cta-efficiency|"
            "max-ctas|repeat|check-pointers|window-flags N [number]\n");
    return 2;
  }
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("test_core_gpu: no GPU, skipped\n");
    return TEST_SKIP_CODE;
  }
  ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
  maxCTAs = NCCL_CONFIG_UNDEF_INT;
  nranks = atoi(argv[2]);
  param = argc > 3 ? atol(argv[3]) : 0;
  if (nranks < 2 || nranks > 8) return 2;
  if (symmRealLoad() != ncclSuccess || dlsym(symmReal.handle, "symmTestBootstrapIsFake") == NULL) {
    fprintf(stderr, "test_core_gpu: SYMMCOLL_NCCL_LIB must name the test bootstrap\n");
    return 2;
  }
  const char* mode = argv[1];
  if (!strcmp(mode, "late")) runWorld(lateRank, 0, NULL, NULL);
  else if (!strcmp(mode, "fault")) runWorld(faultRank, 0, NULL, NULL);
  else if (!strcmp(mode, "streams")) runWorld(streamsRank, 0, NULL, NULL);
  else if (!strcmp(mode, "streams-eager")) {
    streamsReplay = 0;
    runWorld(streamsRank, 0, NULL, NULL);
  }
  else if (!strcmp(mode, "abort")) runAbortCycles();
  else if (!strcmp(mode, "abort-setup")) runWorld(abortSetupRank, 1, abortSetupHelper, NULL);
  else if (!strcmp(mode, "abort-setup-norevoke")) {
    /* As with a real NCCL older than 2.28: no ncclCommRevoke to end the blocked exchange. */
    symmReal.ncclCommRevoke = NULL;
    runWorld(abortSetupRank, 1, abortSetupHelper, NULL);
  }
  else if (!strcmp(mode, "gave-up")) runWorld(gaveUpRank, 0, NULL, NULL);
  else if (!strcmp(mode, "group")) runWorld(groupRank, 0, NULL, NULL);
  else if (!strcmp(mode, "mismatch")) runWorld(mismatchRank, 0, NULL, NULL);
  else if (!strcmp(mode, "soak")) runWorld(soakRank, 0, NULL, NULL);
  else if (!strcmp(mode, "repeat")) runWorld(repeatRank, 0, NULL, NULL);
  else if (!strcmp(mode, "check-pointers")) runWorld(checkPointersRank, 0, NULL, NULL);
  else if (!strcmp(mode, "window-flags")) runWorld(windowFlagsRank, 0, NULL, NULL);
  else if (!strcmp(mode, "cta-zero")) {
    ctaPolicy = NCCL_CTA_POLICY_ZERO;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "ce-abort")) {
    ctaPolicy = NCCL_CTA_POLICY_ZERO;
    runWorld(ceAbortRank, 0, NULL, NULL);
    runWorld(ctaRank, 0, NULL, NULL); /* a new communicator works */
  } else if (!strcmp(mode, "cta-efficiency")) {
    ctaPolicy = NCCL_CTA_POLICY_EFFICIENCY;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "max-ctas")) {
    maxCTAs = 1;
    runWorld(ctaRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "nonblocking")) {
    blockingComms = 0;
    runWorld(nonBlockingRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "split")) {
    blockingComms = 0;
    runWorld(splitRank, 0, NULL, NULL);
  } else if (!strcmp(mode, "shrink")) {
    if (nranks < 3) return 2; /* the child needs two ranks for our kernels */
    runWorld(shrinkRank, 0, NULL, NULL);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  CHECK_EQ_INT(symmCommCount(), 0);
  return harnessReport("test_core_gpu");
}
