/* SPDX-License-Identifier: Apache-2.0 */
/* The tuner: what can run a call (availability: kernels that exist and fit, less what the route's
 * rules exclude), which of it runs (overrides, then the table of tune_table.c or a tuning file),
 * and how much staging the table can ask for. */
#include "tuner.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "param.h"
#include "tune_table.h"

/* Every knob here changes which kernels run, so each must be equal on all ranks (agreed). */
SYMMCOLL_PARAM_STR_FULL(
    AllReduceAlgo, "ALLREDUCE_ALGO", "auto", SYMM_PARAM_AGREED,
    "force the all-reduce algorithm: lamport|oneshot|twoshot|multimem|nccl|ncclplain|auto")
SYMMCOLL_PARAM_STR_FULL(AllGatherAlgo, "ALLGATHER_ALGO", "auto", SYMM_PARAM_AGREED,
                        "force the all-gather algorithm: lamport|push|ce|multimem|nccl|ncclplain|"
                        "auto")
SYMMCOLL_PARAM_STR_FULL(ReduceScatterAlgo, "REDUCESCATTER_ALGO", "auto", SYMM_PARAM_AGREED,
                        "force the reduce-scatter algorithm: lamport|pull|multimem|nccl|ncclplain|"
                        "auto")
SYMMCOLL_PARAM_FULL(MultimemEmulate, "MULTIMEM_EMULATE", 0, 0, 1,
                    SYMM_PARAM_AGREED | SYMM_PARAM_TEST,
                    "1: multimem kernels run with peer loads/stores instead of multicast (tests)")
/* 2x H200, bf16, graphs (perf/RESULTS.md): the two-shot reading registered windows in place took
 * 11.8/14.9/21.7 us at 1/2/4 MiB against 12.2/15.1/21.4 through staging, but 64.3 against 60.2 at
 * 16 MiB and 3285 against 3034 at 1 GiB. */
SYMMCOLL_PARAM_FULL(ZeroCopyMaxBytes, "ZERO_COPY_MAX_BYTES", 4 << 20, -1, (int64_t)1 << 40,
                    SYMM_PARAM_AGREED,
                    "all-reduce two-shot reads registered inputs (symmetric windows, "
                    "ncclCommRegister) in place up to this many bytes (-1: never)")

/* 2x H100 and 2x H200, bf16, graphs (perf/RESULTS.md): the all-gather push writing peers'
 * registered outputs and the reduce-scatter pull reading peers' inputs wait for every rank at the
 * start (the peer's buffer must be free), which costs more than the copy through staging saves
 * below 16 MiB: H100 pair at 1 MiB 9.9 (all-gather) and 11.1 us (reduce-scatter) against 7.9 and
 * 7.9 staged, at 8 MiB 20.6 / 22.4 against 19.8 / 22.2, at 16 MiB 32.2 / 35.4 against 33.2 /
 * 39.1, at 1 GiB 1478 / 1606 against 1572 / 1860. */
SYMMCOLL_PARAM_FULL(ZeroCopyMinBytes, "ZERO_COPY_MIN_BYTES", 16 << 20, -1, (int64_t)1 << 40,
                    SYMM_PARAM_AGREED,
                    "all-gather push and reduce-scatter pull use registered outputs / inputs "
                    "(symmetric windows) in place from this many bytes; smaller calls go "
                    "through staging (0: always in place, -1: never)")

/* 2x H100, graphs, symmetric windows in place (perf/RESULTS.md): the two-shot storing its reduced
 * slices straight into the peers' outputs, which drops the local copy of the gathered slices,
 * took 32.7/56.2/104.1/195.4 us at 8/16/32/64 MiB (bf16) against 34.8/59.7/109.2/207.0 through
 * staging; at 4 MiB all three ways took 21.1 us. */
SYMMCOLL_PARAM_FULL(ArWriteOutputsMinBytes, "AR_WRITE_OUTPUTS_MIN_BYTES", 8 << 20, -1,
                    (int64_t)1 << 40, SYMM_PARAM_AGREED,
                    "all-reduce two-shot writes registered outputs (symmetric windows; plain "
                    "buffers exchanged in CUDA graphs) in place from this many bytes, where it "
                    "does not read inputs in place (-1: never)")

/* Off by default: the multimem kernels and the multicast objects behind them are experimental
 * and have never run on hardware. The setup record carries this rank's "asked and allowed"
 * (SYMM_REC_MULTICAST), so the transport maps multicast only where every rank asked. */
SYMMCOLL_PARAM_FULL(Multimem, "MULTIMEM", 0, 0, 1, SYMM_PARAM_AGREED,
                    "1: set up NVLink multicast and allow the multimem kernels (experimental; "
                    "4+ ranks, device support, no multicast off-switch set)")

int symmTunerMultimemRequested(void) { return symmParamMultimem() == 1; }

static const char* overrideText(enum symmColl coll) {
  switch (coll) {
    case SYMM_COLL_ALLREDUCE: return symmParamAllReduceAlgo();
    case SYMM_COLL_ALLGATHER: return symmParamAllGatherAlgo();
    case SYMM_COLL_REDUCESCATTER: return symmParamReduceScatterAlgo();
    default: return NULL;
  }
}

static const char* const overrideNames[SYMM_NCOLLS] = {
    "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO"};

/* Multimem: asked for where multicast is mapped, or emulated (tests). */
static int multimemAllowed(const struct symmTuneInput* in) {
  return (in->multicastReady && symmTunerMultimemRequested()) || symmParamMultimemEmulate() == 1;
}

unsigned symmTunerAvailable(const struct symmTuneInput* in) {
  unsigned set = 1u << SYMM_ALGO_NCCL;
  if ((unsigned)in->coll >= SYMM_NCOLLS) return set;
  /* ncclplain is the real NCCL too (given windows' aliases): wherever NCCL runs the call. */
  if (!(in->excluded >> SYMM_ALGO_NCCLPLAIN & 1u)) set |= 1u << SYMM_ALGO_NCCLPLAIN;
  if (in->nranks < 2 || in->nranks > SYMM_MAX_RANKS) return set;
  for (int a = SYMM_ALGO_NCCL + 1; a < SYMM_NALGOS; a++) {
    if (symmAlgoForwards((enum symmAlgo)a) || (in->excluded >> a & 1u)) continue;
    if (a == SYMM_ALGO_MULTIMEM && !multimemAllowed(in)) continue;
    /* Types and ops without kernels (user-defined ops, say) are no one's here. */
    if (!symmTuneCollHasAlgo(in->coll, (enum symmAlgo)a) ||
        !symmAlgoExists(in->coll, (enum symmAlgo)a, in->datatype, in->op) ||
        !symmAlgoFits(in->coll, (enum symmAlgo)a, in->bytes, in->nranks, in->stagingBytes))
      continue;
    set |= 1u << a;
  }
  return set;
}

/* ---- logging each distinct choice once -------------------------------------------------- */
#define LOGGED_SLOTS 4096
static uint64_t loggedCases[LOGGED_SLOTS];
static pthread_mutex_t loggedLock = PTHREAD_MUTEX_INITIALIZER;

static int log2Ceil(size_t v) {
  int l = 0;
  while (l < 63 && ((size_t)1 << l) < v) l++;
  return l;
}

static void logOnce(const struct symmTuneInput* in, enum symmAlgo algo, const char* why) {
  if (symmLogLevel() < SYMM_LOG_INFO || !(symmLogSubsysMask() & SYMM_TUNER)) return;
  const uint64_t key =
      1u + ((uint64_t)in->nranks | (uint64_t)in->coll << 4 | (uint64_t)in->datatype << 8 |
            (uint64_t)in->op << 16 | (uint64_t)log2Ceil(in->bytes) << 24 |
            (uint64_t)(in->registered != 0) << 32 | (uint64_t)algo << 36 |
            (uint64_t)(in->link & 0xf) << 40 | (uint64_t)(in->arch & 0xffff) << 44);
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
    INFO(SYMM_TUNER,
         "%s %zu bytes (<= 2^%d), %d ranks, type %d, op %d, arch %d, link %d%s: %s (%s)",
         symmCollName(in->coll), in->bytes, log2Ceil(in->bytes), in->nranks, (int)in->datatype,
         (int)in->op, in->arch, in->link, in->registered ? ", registered" : "", symmAlgoName(algo),
         why);
}

/* One WARN per process and knob for each kind of bad override. */
static int warnedBadName[SYMM_NCOLLS], warnedUnavailable[SYMM_NCOLLS];

static int firstTime(int* flag) { return !__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED); }

int symmTunerForced(const struct symmTuneInput* in, unsigned avail) {
  if ((unsigned)in->coll >= SYMM_NCOLLS) return -1;
  const char* text = overrideText(in->coll);
  const int forced = symmAlgoParse(text);
  if (forced >= 0) {
    if (avail >> forced & 1u) {
      logOnce(in, (enum symmAlgo)forced, overrideNames[in->coll]);
      return forced;
    }
    if (firstTime(&warnedUnavailable[in->coll]))
      WARN(
          "%s=%s: that algorithm cannot run this call here (not one of this collective's, or "
          "its type, op, size, ranks, CTA policy or multicast rule it out); the table decides "
          "such calls (one warning per process)",
          overrideNames[in->coll], text);
  } else if (forced == -2) {
    if (firstTime(&warnedBadName[in->coll]))
      WARN(
          "%s=%s is not an algorithm name (nccl ncclplain lamport oneshot twoshot push pull ce "
          "multimem auto); the table decides",
          overrideNames[in->coll], text);
  }
  return -1;
}

enum symmAlgo symmTunerPick(const struct symmTuneInput* in) {
  const unsigned avail = symmTunerAvailable(in);
  if ((unsigned)in->coll >= SYMM_NCOLLS) return SYMM_ALGO_NCCL;
  const int forced = symmTunerForced(in, avail);
  if (forced >= 0) return (enum symmAlgo)forced;
  const struct symmTuneRow* row = symmTuneFindRow(in->table, in);
  const enum symmAlgo pick = symmTuneRowPick(row, in->bytes, avail);
  logOnce(in, pick, row == NULL ? "no row: forward" : in->table ? "tuning file or table" : "table");
  return pick;
}

void symmTunerNote(const struct symmTuneInput* in, enum symmAlgo algo, const char* why) {
  logOnce(in, algo, why);
}

void symmTunerResetForTests(void) {
  symmTuneFileReset();
  memset(warnedBadName, 0, sizeof(warnedBadName));
  memset(warnedUnavailable, 0, sizeof(warnedUnavailable));
  pthread_mutex_lock(&loggedLock);
  memset(loggedCases, 0, sizeof(loggedCases));
  pthread_mutex_unlock(&loggedLock);
}

/* ---- staging ---------------------------------------------------------------------------- */

size_t symmTunerLargestStaged(const struct symmTuneInput* in) {
  size_t most = 0;
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    /* A forced algorithm of ours may run any size. */
    const int forced = symmAlgoParse(overrideText((enum symmColl)c));
    if (forced >= 0 && !symmAlgoForwards((enum symmAlgo)forced) &&
        symmTuneCollHasAlgo((enum symmColl)c, (enum symmAlgo)forced) &&
        !(in->excluded >> forced & 1u) && (forced != SYMM_ALGO_MULTIMEM || multimemAllowed(in)))
      return SIZE_MAX;
    /* Every row this communicator could use, over element sizes and registration. */
    for (int e = 1; e <= 8; e *= 2) {
      for (int reg = 0; reg <= 1; reg++) {
        struct symmTuneInput x = *in;
        x.coll = (enum symmColl)c;
        x.registered = reg;
        x.datatype = e == 1 ? ncclInt8 : e == 2 ? ncclBfloat16 : e == 4 ? ncclFloat32 : ncclFloat64;
        const struct symmTuneRow* row = symmTuneFindRow(in->table, &x);
        for (int s = 0; row != NULL && s < row->nsteps; s++) {
          const enum symmAlgo a = row->steps[s].algo;
          if (symmAlgoForwards(a) || (in->excluded >> a & 1u) ||
              (a == SYMM_ALGO_MULTIMEM && !multimemAllowed(in)))
            continue;
          /* The copy engine with windows copies straight into peers' outputs at every size (its
           * zero copy does not depend on the call's size, unlike push and pull): no staging. */
          if (a == SYMM_ALGO_COPYENGINE && symmTunerZeroCopy(&x, a)) continue;
          if (row->steps[s].upTo > most) most = row->steps[s].upTo;
        }
      }
    }
  }
  return most;
}

/* ---- reading registered buffers in place ------------------------------------------------ */

/* The all-reduce two-shot reads registered inputs in place up to SYMMCOLL_ZERO_COPY_MAX_BYTES
 * (windows: symmTunerZeroCopy; ncclCommRegister buffers: symmTunerUserZeroCopy). */
static int allReduceReadsInputs(size_t bytes) {
  const int64_t max = symmParamZeroCopyMaxBytes();
  return max >= 0 && bytes <= (size_t)max;
}

static int twoShotReadsInputs(const struct symmTuneInput* in, enum symmAlgo algo) {
  return in->coll == SYMM_COLL_ALLREDUCE && algo == SYMM_ALGO_TWOSHOT &&
         allReduceReadsInputs(in->bytes);
}

int symmTunerAllReduceWritesOutputs(size_t bytes) {
  const int64_t min = symmParamArWriteOutputsMinBytes();
  return !allReduceReadsInputs(bytes) && min >= 0 && bytes >= (size_t)min;
}

/* All-gather push and reduce-scatter pull: windows in place from SYMMCOLL_ZERO_COPY_MIN_BYTES. */
static int zeroCopyLargeEnough(const struct symmTuneInput* in) {
  const int64_t min = symmParamZeroCopyMinBytes();
  return min >= 0 && in->bytes >= (size_t)min;
}

int symmTunerZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo) {
  if (!in->registered) return 0;
  switch (in->coll) {
    case SYMM_COLL_ALLREDUCE:
      return twoShotReadsInputs(in, algo) ||
             (algo == SYMM_ALGO_TWOSHOT && symmTunerAllReduceWritesOutputs(in->bytes));
    /* Storing into peers' registered outputs (all-gather push, copy engine) or loading peers'
     * registered inputs (reduce-scatter pull) skips a copy through staging but waits for every
     * peer first: the kernels do so from SYMMCOLL_ZERO_COPY_MIN_BYTES on. The copy engine keeps
     * zero copy at every size (NCCL_CTA_POLICY_ZERO's path; not measured against its staged
     * form). */
    case SYMM_COLL_ALLGATHER:
      return algo == SYMM_ALGO_COPYENGINE || (algo == SYMM_ALGO_PUSH && zeroCopyLargeEnough(in));
    case SYMM_COLL_REDUCESCATTER: return algo == SYMM_ALGO_PULL && zeroCopyLargeEnough(in);
    default: return 0;
  }
}

int symmTunerUserZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo) {
  return !in->registered && twoShotReadsInputs(in, algo);
}
