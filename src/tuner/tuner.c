/* SPDX-License-Identifier: Apache-2.0 */
/* The tuner: one all-reduce threshold table keyed by world size, element size and GPU arch;
 * all-gather and reduce-scatter forward until their kernels exist. */
#include "tuner.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "debug.h"
#include "param.h"

SYMMCOLL_PARAM_STR(AllReduceAlgo, "ALLREDUCE_ALGO", "auto",
                   "force the all-reduce algorithm: oneshot|twoshot|multimem|lamport|nccl|auto")
SYMMCOLL_PARAM(MultimemEmulate, "MULTIMEM_EMULATE", 0,
               "1: run the multimem kernel with peer loads/stores instead of multicast (tests)")
SYMMCOLL_PARAM(LamportMaxBytes, "LAMPORT_MAX_BYTES", -1,
               "Lamport (barrier-free) one-shot all-reduce up to this many bytes (-1: tuner table)")
SYMMCOLL_PARAM(OneshotMaxBytes, "ONESHOT_MAX_BYTES", -1,
               "one-shot all-reduce up to this many bytes (-1: tuner table)")
SYMMCOLL_PARAM(TwoshotMaxBytes, "TWOSHOT_MAX_BYTES", -1,
               "two-shot all-reduce up to this many bytes, NCCL above (-1: tuner table)")
/* 2x H200, bf16, graphs (perf/RESULTS.md, round 5): the two-shot reading registered windows in
 * place took 11.9/15.8/22.5 us at 1/2/4 MiB (push path 13.0/16.2/23.2) but 64.3 us at 16 MiB and
 * 3285 at 1 GiB (push 60.2 / 3034). */
SYMMCOLL_PARAM(ZeroCopyMaxBytes, "ZERO_COPY_MAX_BYTES", 4 << 20,
               "two-shot reads registered inputs (symmetric windows, ncclCommRegister) in place up "
               "to this many bytes")
SYMMCOLL_PARAM(MultimemMinBytes, "MULTIMEM_MIN_BYTES", -1,
               "multimem all-reduce from this many bytes (-1: tuner table)")
SYMMCOLL_PARAM(MultimemMaxBytes, "MULTIMEM_MAX_BYTES", -1,
               "multimem all-reduce up to this many bytes (-1: tuner table)")

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define NEVER ((size_t)0)      /* as a max: never; as multimemMin with max NEVER: off */

/* THE table. First row that matches (nranks in [minRanks, maxRanks], elemSize 0 = any or equal,
 * arch 0 = any or equal) wins; put specific rows before general ones. Times to beat are in
 * shared/BASELINE.md. Initial values are estimates for H200 over NVLink (NV18) and are meant to
 * be replaced by measurements (perf/ binaries with SYMMCOLL_ALLREDUCE_ALGO=... sweeps):
 *  - Lamport one-shot: no barrier at all (data carries epoch flags, 2x the bytes): smallest sizes.
 *  - one-shot moves (n-1)x the message per rank but needs one barrier: wins while latency rules.
 *  - two-shot moves 2(n-1)/n and needs two barriers: wins from a few hundred KiB.
 *  - multimem (NVLS) moves 2x/n through the switch: only with multicast (n >= 4).
 *  - NCCL above twoshotMax. */
struct symmTuneThresholds {
  size_t lamportMax;   /* Lamport one-shot for bytes <= this (checked first) */
  size_t oneshotMax;   /* one-shot for bytes <= this */
  size_t multimemMin;  /* multimem for multimemMin <= bytes <= multimemMax */
  size_t multimemMax;
  size_t twoshotMax;   /* two-shot for bytes <= this (after the above); above: NCCL */
};
struct tuneRow {
  int minRanks, maxRanks, elemSize, arch;
  struct symmTuneThresholds t;
};
static const struct tuneRow tuneTable[] = {
    /* ranks  elem arch  lamportMax  oneshotMax  multimemMin  multimemMax  twoshotMax */
    /* 2 ranks: measured on 2x H200 NV18, bf16, 2 processes, graph mode (perf/RESULTS.md,
     * round 3, 2026-11-22): Lamport 3.5-4.4 us to 128 KiB and 6.1 at 256 KiB (one-shot 6.5-6.7,
     * NCCL 7.2-8.3); one-shot 7.1-19.5 us from 512 KiB to 4 MiB (push two-shot 9.9-21.4);
     * push two-shot with 128 blocks 33.9 us at 8 MiB up to 2998 at 1 GiB (NCCL 46.3 / 3199):
     * never NCCL. */
    {2, 2, 0, 0, {256 * KiB, 4 * MiB, NEVER, NEVER, SIZE_MAX}},
    {3, 4, 0, 0, {8 * KiB, 64 * KiB, 64 * KiB, 1 * GiB, 64 * MiB}},
    {5, 8, 0, 0, {4 * KiB, 32 * KiB, 32 * KiB, 1 * GiB, 32 * MiB}},
};
static const struct symmTuneThresholds tuneFallback = {NEVER, 0, NEVER, NEVER, 0}; /* NCCL */

unsigned symmTunerAvailable(const struct symmTuneInput* in) {
  unsigned set = 1u << SYMM_ALGO_NCCL;
  if (in->nranks < 2 || in->nranks > SYMM_MAX_RANKS || symmTypeSize(in->datatype) == 0 ||
      (int)in->op < 0 || (int)in->op >= (int)ncclNumOps)
    return set;
  for (int a = SYMM_ALGO_NCCL + 1; a < SYMM_NALGOS; a++) {
    if (!symmAlgoExists(in->coll, (enum symmAlgo)a, in->datatype, in->op) ||
        !symmAlgoFits(in->coll, (enum symmAlgo)a, in->bytes, in->nranks, in->stagingBytes))
      continue;
    if (a == SYMM_ALGO_MULTIMEM && !in->multicastReady && symmParamMultimemEmulate() == 0)
      continue;
    set |= 1u << a;
  }
  return set;
}

static size_t knob(int64_t value, size_t tableValue) {
  return value < 0 ? tableValue : (size_t)value;
}

static void symmTunerThresholds(const struct symmTuneInput* in, struct symmTuneThresholds* out) {
  const size_t esize = symmTypeSize(in->datatype);
  *out = tuneFallback;
  for (size_t i = 0; i < sizeof(tuneTable) / sizeof(tuneTable[0]); i++) {
    const struct tuneRow* row = &tuneTable[i];
    if (in->nranks < row->minRanks || in->nranks > row->maxRanks) continue;
    if (row->elemSize != 0 && (size_t)row->elemSize != esize) continue;
    if (row->arch != 0 && row->arch != in->arch) continue;
    *out = row->t;
    break;
  }
  out->lamportMax = knob(symmParamLamportMaxBytes(), out->lamportMax);
  out->oneshotMax = knob(symmParamOneshotMaxBytes(), out->oneshotMax);
  out->twoshotMax = knob(symmParamTwoshotMaxBytes(), out->twoshotMax);
  out->multimemMin = knob(symmParamMultimemMinBytes(), out->multimemMin);
  out->multimemMax = knob(symmParamMultimemMaxBytes(), out->multimemMax);
}

/* Logs each distinct (ranks, type, op, size class, registered, choice) once. */
#define LOGGED_SLOTS 4096
static uint64_t loggedCases[LOGGED_SLOTS];
static pthread_mutex_t loggedLock = PTHREAD_MUTEX_INITIALIZER;

static int log2Ceil(size_t v) {
  int l = 0;
  while (l < 63 && ((size_t)1 << l) < v) l++;
  return l;
}

static void logOnce(const struct symmTuneInput* in, enum symmAlgo algo, const char* why) {
  if (symmLogLevel() < SYMM_LOG_INFO) return;
  const uint64_t key = 1u + ((uint64_t)in->nranks | (uint64_t)in->coll << 4 | (uint64_t)in->datatype << 8 |
                             (uint64_t)in->op << 16 | (uint64_t)log2Ceil(in->bytes) << 24 |
                             (uint64_t)(in->registered != 0) << 32 | (uint64_t)algo << 40);
  int fresh = 0;
  pthread_mutex_lock(&loggedLock);
  for (uint64_t i = 0; i < LOGGED_SLOTS; i++) {
    uint64_t* slot = &loggedCases[(key * 0x9e3779b97f4a7c15ull + i) % LOGGED_SLOTS];
    if (*slot == key) break;
    if (*slot == 0) {
      *slot = key;
      fresh = 1;
      break;
    }
  }
  pthread_mutex_unlock(&loggedLock);
  if (fresh)
    INFO(SYMM_TUNER, "%s %zu bytes (<= 2^%d), %d ranks, type %d, op %d%s: %s (%s)",
         symmCollName(in->coll), in->bytes, log2Ceil(in->bytes), in->nranks, (int)in->datatype,
         (int)in->op, in->registered ? ", registered" : "", symmAlgoName(algo), why);
}

enum symmAlgo symmTunerPick(const struct symmTuneInput* in) {
  if (in->coll != SYMM_COLL_ALLREDUCE) return SYMM_ALGO_NCCL;
  const unsigned avail = symmTunerAvailable(in);
  const int forced = symmAlgoParse(symmParamAllReduceAlgo());
  if (forced >= 0) {
    if (avail & (1u << forced)) {
      logOnce(in, (enum symmAlgo)forced, "SYMMCOLL_ALLREDUCE_ALGO");
      return (enum symmAlgo)forced;
    }
    logOnce(in, SYMM_ALGO_NCCL, "forced algorithm unavailable here, using the table");
  } else if (forced == -2) {
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("SYMMCOLL_ALLREDUCE_ALGO=%s is not one of oneshot|twoshot|multimem|lamport|nccl|auto; "
           "using auto", symmParamAllReduceAlgo());
  }
  struct symmTuneThresholds t;
  symmTunerThresholds(in, &t);
  enum symmAlgo pick = SYMM_ALGO_NCCL;
  if ((avail & (1u << SYMM_ALGO_LAMPORT)) && in->bytes <= t.lamportMax)
    pick = SYMM_ALGO_LAMPORT;
  else if ((avail & (1u << SYMM_ALGO_ONESHOT)) && in->bytes <= t.oneshotMax)
    pick = SYMM_ALGO_ONESHOT;
  else if ((avail & (1u << SYMM_ALGO_MULTIMEM)) && t.multimemMax != NEVER &&
           in->bytes >= t.multimemMin && in->bytes <= t.multimemMax)
    pick = SYMM_ALGO_MULTIMEM;
  else if ((avail & (1u << SYMM_ALGO_TWOSHOT)) && in->bytes <= t.twoshotMax)
    pick = SYMM_ALGO_TWOSHOT;
  logOnce(in, pick, "table");
  return pick;
}

size_t symmTunerLargestStaged(const struct symmTuneInput* in) {
  struct symmTuneThresholds t;
  symmTunerThresholds(in, &t);
  size_t most = t.oneshotMax;
  if (t.multimemMax != NEVER && t.multimemMax > most) most = t.multimemMax;
  if (t.twoshotMax > most) most = t.twoshotMax;
  return most;
}

static int zeroCopySize(const struct symmTuneInput* in, enum symmAlgo algo) {
  const int64_t max = symmParamZeroCopyMaxBytes();
  return in->coll == SYMM_COLL_ALLREDUCE && algo == SYMM_ALGO_TWOSHOT && max >= 0 &&
         in->bytes <= (size_t)max;
}

int symmTunerZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo) {
  return in->registered && zeroCopySize(in, algo);
}

int symmTunerUserZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo) {
  return !in->registered && zeroCopySize(in, algo);
}
