/* SPDX-License-Identifier: Apache-2.0 */
/* test_allreduce's cases: host inputs and the reference, poisoned outputs checked, and the sweeps
 * (every size class x dtype x op x placement, then large sizes) with every wanted algorithm. */
#include "allreduce_test.h"

#include <string.h>

#include "ar_helpers.h"

/* ------------------------------------------------------------------------------------------ */
/* Host data for one case: every rank's input (all drivers generate all of them) and the result */


void hostCaseInit(struct hostCase* h, size_t bytes) {
  h->capBytes = bytes;
  for (int r = 0; r < nranksWorld; r++) h->in[r] = malloc(bytes);
  h->expect = malloc(bytes);
  h->got = malloc(bytes);
  if (!h->expect || !h->got) { fprintf(stderr, "out of host memory\n"); exit(2); }
  for (int r = 0; r < nranksWorld; r++)
    if (!h->in[r]) { fprintf(stderr, "out of host memory\n"); exit(2); }
}

void hostCaseFree(struct hostCase* h) {
  for (int r = 0; r < nranksWorld; r++) free(h->in[r]);
  free(h->expect);
  free(h->got);
}

void hostCaseFill(struct hostCase* h, const struct arCall* a, uint64_t seed) {
  for (int r = 0; r < nranksWorld; r++)
    arFillInput(a->dtype, a->op, nranksWorld, r, seed, opt.real, h->in[r], a->count);
  arHostReference(a->dtype, a->op, nranksWorld, (const void* const*)h->in, h->expect, a->count);
}

void uploadInputs(struct driver* d, const struct arCall* a, const struct hostCase* h) {
  const size_t bytes = a->count * symmTypeSize(a->dtype);
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    /* Poison the output (and its surroundings) so stale data cannot pass. */
    CUDA_OR_DIE(cudaMemsetAsync(c->recvMem, 0xA5, opt.maxBytes + 256, c->stream));
    CUDA_OR_DIE(cudaMemcpyAsync((void*)sendPtr(c, a), h->in[c->rank], bytes,
                                cudaMemcpyHostToDevice, c->stream));
  }
}

int syncAll(struct driver* d) {
  int ok = 1;
  for (int i = 0; i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    cudaError_t e = cudaStreamSynchronize(d->local[i]->stream);
    if (e != cudaSuccess) {
      fprintf(stderr, "rank %d: stream error %s\n", d->local[i]->rank, cudaGetErrorString(e));
      ok = 0;
    }
    if (opt.mode == MODE_DIRECT && d->local[i]->errorHost[0] != 0) {
      fprintf(stderr, "rank %d: kernel gave up (error flag %u)\n", d->local[i]->rank,
              d->local[i]->errorHost[0]);
      ok = 0;
    }
  }
  return ok;
}

/* Downloads each local rank's result and compares it; returns mismatching elements. */
size_t checkResults(struct driver* d, const struct arCall* a, struct hostCase* h,
                           const char* what, double tol) {
  const size_t bytes = a->count * symmTypeSize(a->dtype);
  size_t bad = 0;
  for (int i = 0; i < d->nlocal; i++) {
    struct rankCtx* c = d->local[i];
    CUDA_OR_DIE(cudaSetDevice(c->dev));
    CUDA_OR_DIE(cudaMemcpy(h->got, recvPtr(c, a), bytes, cudaMemcpyDeviceToHost));
    char label[256];
    snprintf(label, sizeof(label), "%s algo=%s dtype=%s op=%s count=%zu rank=%d/%d %s sendOff=%zu recvOff=%zu",
             what, symmAlgoName(a->algo), arTypeName(a->dtype), arOpName(a->op), a->count,
             c->rank, nranksWorld, a->inPlace ? "in-place" : "out-of-place",
             a->sendOff[c->rank], a->recvOff[c->rank]);
    size_t b = arCompare(a->dtype, h->expect, h->got, a->count, tol, label);
    /* The bytes right after the output must still hold the poison. */
    unsigned char tail[16];
    const size_t tailBytes = opt.maxBytes + 256 - a->recvOff[c->rank] - bytes < 16
                                 ? opt.maxBytes + 256 - a->recvOff[c->rank] - bytes : 16;
    CUDA_OR_DIE(cudaMemcpy(tail, (char*)recvPtr(c, a) + bytes, tailBytes, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < tailBytes; k++)
      if (tail[k] != 0xA5) {
        fprintf(stderr, "  OVERRUN %s: byte %zu after the output was written\n", label, k);
        b++;
        break;
      }
    TCHECK(b == 0, "%s: %zu mismatches", label, b);
    bad += b;
  }
  return bad;
}

/* ------------------------------------------------------------------------------------------ */
/* Cases */

/* Per thread: in --threads mode every rank thread is a driver and must draw the same sequence
 * (a shared state would interleave the draws, and the ranks would issue different calls). */
__thread uint64_t rngState;
uint64_t rnd(void) { /* same sequence in every driver: all ranks agree on the cases */
  rngState ^= rngState << 13;
  rngState ^= rngState >> 7;
  rngState ^= rngState << 17;
  return rngState;
}

void randomOffsets(struct arCall* a) {
  const size_t es = symmTypeSize(a->dtype);
  for (int r = 0; r < nranksWorld; r++) {
    a->sendOff[r] = (rnd() & 1) ? 0 : (rnd() % (64 / es)) * es;
    a->recvOff[r] = (rnd() & 1) ? 0 : (rnd() % (64 / es)) * es;
  }
}

/* Nccl mode cannot see the transport's staging size: the library's default is assumed there
 * (a forced algorithm that does not fit falls back to the table; results are checked anyway). */
int algoWanted(enum symmAlgo algo, ncclDataType_t dt, ncclRedOp_t op, size_t count) {
  const size_t staging = opt.mode == MODE_DIRECT ? opt.stagingBytes : (size_t)64 << 20;
  if (!symmAlgoFits(SYMM_COLL_ALLREDUCE, algo, count * symmTypeSize(dt), nranksWorld, staging))
    return 0;
  return (opt.algoMask & (1u << algo)) && symmAlgoExists(SYMM_COLL_ALLREDUCE, algo, dt, op);
}

void selectAlgo(const struct driver* d, enum symmAlgo algo) {
  if (opt.mode == MODE_NCCL) setAlgoEnv(d, symmAlgoName(algo));
}

/* Epoch (localState word 0) and the two Lamport refresh cursors (words 2 and 3) of every local
 * rank, direct mode (in nccl mode the library owns that memory). */
struct refreshState {
  uint64_t w[SYMM_MAX_RANKS][4];
};
static void readRefreshState(struct driver* d, struct refreshState* s) {
  for (int i = 0; i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    CUDA_OR_DIE(
        cudaMemcpy(s->w[i], d->local[i]->stateMem, sizeof(s->w[i]), cudaMemcpyDeviceToHost));
  }
}

/* A call that leaves the next one on its own parity (an even number of epochs) must also have
 * refreshed a line of the other parity, or a run of such calls would let that parity's Lamport
 * lines age past 2^32 epochs (refreshLamportLine, sync.cuh). Only with a Lamport region; direct
 * mode only (the caller reads `before` there). */
static long refreshChecks; /* calls whose other-parity refresh was checked */
static void checkRefresh(struct driver* d, const struct refreshState* before, const char* algo) {
  if (!arHasLamportRegion(&d->local[0]->peers)) return;
  struct refreshState after;
  readRefreshState(d, &after);
  for (int i = 0; i < d->nlocal; i++) {
    const uint64_t used = after.w[i][0] - before->w[i][0];
    if (used == 0 || used % 2 != 0) continue;
    refreshChecks++;
    const int other = (int)((before->w[i][0] + 2) & 1u); /* the first epoch's is (e0 + 1) & 1 */
    TCHECK(after.w[i][2 + other] != before->w[i][2 + other], /* the cursor wraps */
           "rank %d, %s: %llu epochs, the other parity's Lamport lines not refreshed",
           d->local[i]->rank, algo, (unsigned long long)used);
  }
}

/* The two-shot's split-round signal rows (start-rest, then mid-first: algos.h) of every local
 * rank's pad, direct mode. Counting which words two-shot calls change shows that
 * SYMMCOLL_TWOSHOT_SPLIT reaches the kernel: none at 0, start-rest from 1, mid-first at 2. */
enum { kSplitRowsPurposes = 2 };
#define SPLIT_ROW_WORDS ((size_t)SYMM_MAX_BLOCKS * SYMM_MAX_RANKS)
static long splitRowWrites[kSplitRowsPurposes]; /* words changed, per purpose, whole run */
static long splitRowCalls;                      /* two-shot calls whose rows were compared */
static uint64_t* readSplitRows(struct driver* d) {
  const size_t words = kSplitRowsPurposes * SPLIT_ROW_WORDS;
  uint64_t* rows = malloc((size_t)d->nlocal * words * sizeof(uint64_t));
  TCHECK(rows != NULL, "out of memory");
  for (int i = 0; rows != NULL && i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    const uint64_t* pad = (const uint64_t*)d->local[i]->signalsMem;
    CUDA_OR_DIE(cudaMemcpy(rows + (size_t)i * words,
                           pad + SYMM_PAD_SPLIT_START_REST_BASE,
                           words * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  }
  return rows;
}
static void countSplitRows(struct driver* d, uint64_t* before) {
  uint64_t* after = readSplitRows(d);
  if (before != NULL && after != NULL) {
    for (int i = 0; i < d->nlocal; i++)
      for (int p = 0; p < kSplitRowsPurposes; p++)
        for (size_t w = 0; w < SPLIT_ROW_WORDS; w++) {
          const size_t at = ((size_t)i * kSplitRowsPurposes + (size_t)p) * SPLIT_ROW_WORDS + w;
          splitRowWrites[p] += before[at] != after[at];
        }
    splitRowCalls++;
  }
  free(before);
  free(after);
}

/* After the sweeps (direct mode, the two-shot among the algorithms): the rows moved exactly as
 * the split setting says. */
static void checkSplitRows(void) {
  if (splitRowCalls == 0) return;
  const char* env = getenv("SYMMCOLL_TWOSHOT_SPLIT");
  const int raw = env != NULL ? atoi(env) : 0;
  const int split = raw >= 0 && raw <= 2 ? raw : 0; /* the library keeps 0 for other values */
  TCHECK((splitRowWrites[0] > 0) == (split >= 1),
         "SYMMCOLL_TWOSHOT_SPLIT=%d: %ld start-rest signal words written over %ld two-shot calls",
         split, splitRowWrites[0], splitRowCalls);
  TCHECK((splitRowWrites[1] > 0) == (split >= 2),
         "SYMMCOLL_TWOSHOT_SPLIT=%d: %ld mid-first signal words written over %ld two-shot calls",
         split, splitRowWrites[1], splitRowCalls);
}

/* Runs `a` with every wanted algorithm on the same data; in nccl mode also NCCL's own. */
static void runCase(struct driver* d, struct arCall* a, struct hostCase* h, int tries) {
  const int exactForNccl = !opt.real && a->op != ncclAvg;
  const int narrow = a->dtype == ncclFloat16 || a->dtype == ncclBfloat16 ||
                     a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2;
  for (int algo = SYMM_ALGO_NCCL + 1; algo < SYMM_NALGOS; algo++) {
    if (!algoWanted((enum symmAlgo)algo, a->dtype, a->op, a->count)) continue;
    a->algo = (enum symmAlgo)algo;
    selectAlgo(d, a->algo);
    for (int t = 0; t < tries; t++) {
      /* Two-shot also reads peers' user buffers directly (as from a registered window), ...
       * or those of the ranks that registered them (random subset, ncclCommRegister), or
       * writes the peers' outputs directly (as into registered output windows). */
      const uint64_t mode = rnd() % 4;
      a->zeroCopy = a->algo == SYMM_ALGO_TWOSHOT && allRanks != NULL && mode == 1;
      a->writeOutputs = a->algo == SYMM_ALGO_TWOSHOT && allRanks != NULL && mode == 3;
      a->exchangeDescs = a->algo == SYMM_ALGO_TWOSHOT && allRanks != NULL && mode == 2;
      a->descMask = (uint32_t)rnd();
      uploadInputs(d, a, h);
      struct refreshState before;
      uint64_t* splitBefore = NULL;
      if (opt.mode == MODE_DIRECT) {
        TCHECK(syncAll(d), "sync before algo=%s", symmAlgoName(a->algo));
        readRefreshState(d, &before);
        if (a->algo == SYMM_ALGO_TWOSHOT) splitBefore = readSplitRows(d);
      }
      ncclResult_t r = issueAll(d, a, 0);
      TCHECK(r == ncclSuccess, "issue algo=%s: %s", symmAlgoName(a->algo), ncclGetErrorString(r));
      TCHECK(syncAll(d), "sync algo=%s dtype=%s op=%s count=%zu", symmAlgoName(a->algo),
             arTypeName(a->dtype), arOpName(a->op), a->count);
      if (opt.mode == MODE_DIRECT) checkRefresh(d, &before, symmAlgoName(a->algo));
      if (splitBefore != NULL) countSplitRows(d, splitBefore);
      checkResults(d, a, h, "vs host reference", -1.0);
    }
  }
  if (opt.mode == MODE_NCCL && opt.compareNccl) {
    if (a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2) {
      int major = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d->local[0]->dev);
      if (major < 9) return; /* NCCL has no fp8 before sm_90 */
    }
    a->algo = SYMM_ALGO_NCCL;
    selectAlgo(d, SYMM_ALGO_NCCL);
    uploadInputs(d, a, h);
    ncclResult_t r = issueAll(d, a, 0);
    TCHECK(r == ncclSuccess, "real NCCL dtype=%s op=%s: %s", arTypeName(a->dtype),
           arOpName(a->op), ncclGetErrorString(r));
    TCHECK(syncAll(d), "sync real NCCL");
    /* NCCL's avg and real-valued sums round differently: tolerance there, bitwise elsewhere. */
    const int isInt = a->dtype <= ncclUint64;
    const int fp8 = a->dtype == ncclFloat8e4m3 || a->dtype == ncclFloat8e5m2;
    const double tol = exactForNccl ? -1.0 : isInt ? 1.0 : fp8 ? 0.26 : narrow ? 0.07 : 1e-5;
    checkResults(d, a, h, "real NCCL vs reference", tol);
  }
}

void sweepSmall(struct driver* d) {
  static const size_t counts[] = {1, 2, 3, 5, 7, 8, 13, 16, 31, 61, 127, 128, 251, 1021,
                                  4099, 65521, 65539, 262147};
  const size_t ncounts = opt.quick ? 10 : sizeof(counts) / sizeof(counts[0]);
  struct hostCase h;
  hostCaseInit(&h, counts[sizeof(counts) / sizeof(counts[0]) - 1] * 8);
  long cases = 0;
  for (size_t ci = 0; ci < ncounts; ci++) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      for (int op = 0; op < ncclNumOps; op++) {
        struct arCall a = {.dtype = (ncclDataType_t)dt, .op = (ncclRedOp_t)op,
                           .count = counts[ci]};
        if (a.count * symmTypeSize(a.dtype) + 64 > opt.maxBytes) continue;
        hostCaseFill(&h, &a, opt.seed + ci * 131 + (uint64_t)dt * 7 + (uint64_t)op);
        for (int place = 0; place < 2; place++) {
          a.inPlace = place;
          randomOffsets(&a);
          runCase(d, &a, &h, 1);
          cases++;
        }
      }
    }
  }
  if (d->isLeader) printf("sizes x dtypes x ops x placements: %ld cases\n", cases);
  hostCaseFree(&h);
}

void sweepLarge(struct driver* d) {
  struct hostCase h;
  hostCaseInit(&h, opt.maxBytes);
  long cases = 0;
  const ncclDataType_t types[2] = {ncclBfloat16, ncclFloat32};
  for (size_t bytes = 1024; bytes <= opt.maxBytes; bytes *= opt.quick ? 16 : 4) {
    for (int ti = 0; ti < 2; ti++) {
      struct arCall a = {.dtype = types[ti], .op = ncclSum};
      a.count = bytes / symmTypeSize(a.dtype) - (bytes > 1024 ? 3 : 0); /* also not 16-B multiple */
      hostCaseFill(&h, &a, opt.seed ^ bytes);
      a.inPlace = (int)((bytes / 1024) & 1) ^ ti;
      randomOffsets(&a);
      runCase(d, &a, &h, 1);
      cases++;
    }
  }
  /* A staged two-shot of two rounds leaves the next call on its own parity: its refresh of the
   * other parity must show (checkRefresh). Three tries: some may go zero copy (one round). */
  const size_t twoRounds =
      opt.mode == MODE_DIRECT ? arTwoShotRoundElems(&d->local[0]->peers, 4) * 3 / 2 : 0;
  if (twoRounds > 0 && (opt.algoMask & (1u << SYMM_ALGO_TWOSHOT)) &&
      arHasLamportRegion(&d->local[0]->peers) && twoRounds * 4 + 64 <= opt.maxBytes) {
    const long checksBefore = refreshChecks;
    struct arCall a = {.dtype = ncclFloat32, .op = ncclSum, .count = twoRounds};
    hostCaseFill(&h, &a, opt.seed ^ twoRounds);
    randomOffsets(&a);
    runCase(d, &a, &h, 3);
    cases++;
    TCHECK(refreshChecks > checksBefore, "two-shot of %zu floats: no call of an even number of "
           "epochs, the refresh check did not run", twoRounds);
  }
  checkSplitRows();
  if (d->isLeader) printf("large sizes (bf16, float sum, up to %zu MiB): %ld cases, %ld refresh "
                          "checks; split-round rows over %ld two-shot calls: %ld start-rest, %ld "
                          "mid-first words written\n", opt.maxBytes >> 20, cases, refreshChecks,
                          splitRowCalls, splitRowWrites[0], splitRowWrites[1]);
  hostCaseFree(&h);
}
