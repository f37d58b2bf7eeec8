/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator setup: who takes part, what every rank must agree on (the setup records: knobs,
 * CTA config, tuning table), peer access, link and arch, and the staging size. What it decides
 * the transport builds (src/include/transport.h); staging itself comes at the first call given
 * to our kernels (symmTransportStage). */
#define _GNU_SOURCE
#include "setup.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algos.h"
#include "checks.h"
#include "cudart.h"
#include "eligibility.h"
#include "forward.h"
#include "linkprobe.h"
#include "param.h"
#include "route.h"
#include "transport.h"
#include "tuner.h"

SYMMCOLL_PARAM_FULL(MaxRanks, "MAX_RANKS", 8, INT64_MIN, INT64_MAX, SYMM_PARAM_AGREED,
                    "largest world size that uses symmetric memory (<= 8)")
SYMMCOLL_PARAM_FULL(BufferBytes, "BUFFER_BYTES", 64 << 20, 1 << 20, INT64_MAX, SYMM_PARAM_AGREED,
                    "most staging bytes per rank; what the tuner can use is allocated at the "
                    "first call given to our kernels")
SYMMCOLL_PARAM_FULL(TestKnobSkewRank, "TEST_KNOB_SKEW_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: this rank reports another value of what TEST_SKEW_WHAT names "
                    "(ranks that are threads of one process cannot set knobs differently)")
SYMMCOLL_PARAM_STR_FULL(TestSkewWhat, "TEST_SKEW_WHAT", "knob", SYMM_PARAM_TEST,
                        "tests only: what TEST_KNOB_SKEW_RANK reports differently: knob (the "
                        "first agreed knob), maxCTAs, minCTAs, CTAPolicy, disable, maxRanks")
SYMMCOLL_PARAM_FULL(StageAtCreation, "STAGE_AT_CREATION", 0, 0, 1,
                    SYMM_PARAM_TEST | SYMM_PARAM_AGREED,
                    "tests only: build staging at creation instead of at the first call given to "
                    "our kernels")

static size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

static int maxRanks(void) {
  int64_t m = symmParamMaxRanks();
  return m < 2 ? 2 : m > SYMM_MAX_RANKS ? SYMM_MAX_RANKS : (int)m;
}

/* FNV-1a of the tuning file's bytes (identity only: every rank must read the same table). The
 * knob itself is the tuner's (SYMMCOLL_TUNING_FILE); only its contents are compared here. */
static uint64_t tuningFileHash(void) {
  const char* path = symmTunerFilePath();
  if (path == NULL || path[0] == '\0') return 0;
  uint64_t h = 0xcbf29ce484222325ull;
  /* Non-blocking open: a FIFO must not hold setup. Only regular files are read, and no more of
   * them than the tuner reads (it refuses larger ones on every rank alike). */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return h ^ 1; /* unreadable: differs from any readable file's hash */
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return h ^ 2; /* not a regular file: the tuner refuses it */
  }
  unsigned char buf[4096];
  ssize_t got;
  size_t total = 0;
  while (total <= SYMM_TUNE_MAX_FILE_BYTES && (got = read(fd, buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < got; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
    total += (size_t)got;
  }
  close(fd);
  return h ? h : 1;
}

/* Tests: what SYMMCOLL_TEST_KNOB_SKEW_RANK's record reports differently. */
static void skewForTests(const struct symmComm* c, struct symmPeerRecord* rec) {
  if (c->rank != symmParamTestKnobSkewRank()) return;
  const char* what = symmParamTestSkewWhat();
  if (what == NULL || strcmp(what, "knob") == 0) {
    if (rec->knobCount > 0) rec->knobHashes[0] ^= 1;
  } else if (strcmp(what, "maxCTAs") == 0) {
    rec->maxCTAs = rec->maxCTAs == 1 ? 2 : 1;
  } else if (strcmp(what, "minCTAs") == 0) {
    rec->minCTAs = rec->minCTAs == 1 ? 2 : 1;
  } else if (strcmp(what, "CTAPolicy") == 0) {
    rec->ctaPolicy ^= NCCL_CTA_POLICY_EFFICIENCY;
  } else if (strcmp(what, "disable") == 0) {
    rec->flags |= SYMM_REC_DISABLED;
  } else if (strcmp(what, "maxRanks") == 0) {
    rec->maxRanks = rec->maxRanks > 2 ? rec->maxRanks - 1 : 3;
  }
}

/* This rank's record. Everything that changes which kernel runs or its grid is in it (agreed
 * knobs, the tuning file, SYMMCOLL_DISABLE, SYMMCOLL_MAX_RANKS, the CTA bounds and policy,
 * blocking) and is compared with every other rank's; the knobs are read once per process, the
 * config once per communicator (at creation), so nothing changes behind the agreement. */
static void buildRecord(const struct symmComm* c, struct symmPeerRecord* rec) {
  memset(rec, 0, sizeof(*rec));
  rec->version = SYMM_RECORD_VERSION;
  rec->rank = c->rank;
  rec->hostHash = symmHostHash();
  rec->pid = (int32_t)getpid();
  rec->uid = (uint32_t)getuid();
  rec->cudaDev = c->cudaDev;
  rec->knobCount = (uint32_t)symmParamAgreed(NULL, rec->knobHashes, SYMM_RECORD_KNOBS);
  rec->tuningFileHash = tuningFileHash();
  rec->maxRanks = maxRanks();
  rec->maxCTAs = c->config.maxCTAs;
  rec->minCTAs = c->config.minCTAs;
  rec->ctaPolicy = c->config.ctaPolicy;
  rec->blocking = c->config.blocking != 0;
  if (symmDisabled()) rec->flags |= SYMM_REC_DISABLED;
  skewForTests(c, rec);
  /* Disabled: every rank forwards; nothing of ours (device queries, driver) is touched. */
  if (rec->flags & SYMM_REC_DISABLED) return;
  if (!c->kernelsLoaded) rec->flags |= SYMM_REC_NO_KERNELS;
  if (cudaDeviceGetAttribute(&rec->ccMajor, cudaDevAttrComputeCapabilityMajor, c->cudaDev) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&rec->ccMinor, cudaDevAttrComputeCapabilityMinor, c->cudaDev) !=
          cudaSuccess ||
      cudaDeviceGetPCIBusId(rec->busId, sizeof(rec->busId), c->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    rec->flags |= SYMM_REC_SETUP_FAILED;
  }
  /* Multicast only when asked for (SYMMCOLL_MULTIMEM=1, agreed); read now, once for this
   * communicator. */
  struct symmDeviceCaps caps;
  symmTransportDeviceCaps(c->cudaDev, symmTunerMultimemRequested(), &caps);
  if (caps.vmm) {
    rec->flags |= SYMM_REC_VMM;
    rec->granularity = caps.granularity;
  }
  if (caps.multicast) rec->flags |= SYMM_REC_MULTICAST;
  if (c->rank == 0 && getrandom(rec->secret, sizeof(rec->secret), 0) != (ssize_t)sizeof(rec->secret)) {
    WARN("symmetric memory: getrandom failed; this communicator forwards");
    rec->flags |= SYMM_REC_SETUP_FAILED;
  }
}

/* Stage 2 payload: which peers our device reaches, over which link, and our private state. */
struct accessVote {
  uint32_t reach;   /* bit q: our device can use rank q's memory */
  uint32_t nvlink;  /* bit q: over a link with native peer atomics (NVLink), or the same GPU */
  uint32_t sameGpu; /* bit q: rank q is on our GPU */
  uint32_t privateOk;
};

static void accessOf(const struct symmComm* c, const struct symmPeerRecord* recs,
                     struct accessVote* v) {
  for (int q = 0; q < c->nranks; q++) {
    int theirDev = -1;
    if (q == c->rank) {
      v->reach |= 1u << q;
      v->nvlink |= 1u << q;
      v->sameGpu |= 1u << q;
      continue;
    }
    if (cudaDeviceGetByPCIBusId(&theirDev, recs[q].busId) != cudaSuccess) {
      (void)cudaGetLastError();
      continue; /* not visible in this process */
    }
    int access = 0;
    const enum symmLink link = symmProbeLink(c->cudaDev, theirDev, &access);
    if (access) v->reach |= 1u << q;
    if (link == SYMM_LINK_NVLINK || link == SYMM_LINK_SAME_GPU) v->nvlink |= 1u << q;
    if (link == SYMM_LINK_SAME_GPU) v->sameGpu |= 1u << q;
    (void)cudaGetLastError();
  }
}

/* The weakest pair decides; identical on every rank (from the all-gathered votes). */
static int agreedLink(const struct accessVote* votes, int nranks) {
  int anySame = 0;
  for (int r = 0; r < nranks; r++)
    for (int q = 0; q < nranks; q++) {
      if (q == r) continue;
      if (!(votes[r].nvlink & (1u << q))) return SYMM_LINK_PCIE;
      if (votes[r].sameGpu & (1u << q)) anySame = 1;
    }
  return anySame ? SYMM_LINK_SAME_GPU : SYMM_LINK_NVLINK;
}

static int agreedArch(const struct symmPeerRecord* recs, int nranks) {
  const int arch = recs[0].ccMajor * 10 + recs[0].ccMinor;
  for (int r = 1; r < nranks; r++)
    if (recs[r].ccMajor * 10 + recs[r].ccMinor != arch) return 0;
  return arch;
}

/* Most ranks on one GPU (by PCI bus id), from the all-gathered records: the same on all ranks. */
static int ranksPerDevice(const struct symmPeerRecord* records, int nranks) {
  int most = 1;
  for (int r = 0; r < nranks; r++) {
    int same = 0;
    for (int q = 0; q < nranks; q++)
      same += strncmp(records[r].busId, records[q].busId, sizeof(records[r].busId)) == 0;
    if (same > most) most = same;
  }
  return most;
}

/* Staging bytes per rank: what the route may give to our staged algorithms on a communicator
 * with these (agreed) facts, capped by SYMMCOLL_BUFFER_BYTES, rounded to every rank's
 * granularity. Identical on all ranks. */
static size_t plannedStaging(const struct symmComm* c, int multicastAgreed, size_t granularity) {
  struct symmTuneInput in;
  memset(&in, 0, sizeof(in));
  in.coll = SYMM_COLL_ALLREDUCE;
  in.nranks = c->nranks;
  in.datatype = ncclFloat32;
  in.op = ncclSum;
  in.multicastReady = multicastAgreed; /* as agreed at setup, never the environment now */
  in.arch = c->arch;
  in.link = c->link;
  in.table = c->tuneTable;
  in.stagingBytes = (size_t)symmParamBufferBytes();
  size_t want = symmAlgosStagingBytes(c->nranks, symmRouteLargestStaged(&in, c->config.ctaPolicy));
  const size_t cap = (size_t)symmParamBufferBytes();
  if (want > cap) want = cap;
  return roundUp(want, granularity);
}

/* The tuning table this rank would use on the agreed machine (the tuner's choice: the tuning
 * file when it was measured on this machine, else the built-in table) and its hash. */
static const struct symmTuneFile* selectTable(const struct symmComm* c, uint64_t* hash) {
  struct symmTuneMachine m;
  memset(&m, 0, sizeof(m));
  *hash = 0;
  if (symmTunerProbeMachine(c->cudaDev, &m) != ncclSuccess) {
    *hash = ~0ull; /* differs from every rank that could probe: the communicator forwards */
    return NULL;
  }
  m.link = c->link;
  int version = 0;
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclGetVersion, (&version));
  m.nccl = res == ncclSuccess ? version : 0;
  return symmTunerSelect(&m, hash);
}

static void sayInactive(const struct symmComm* c, const char* why, int warn) {
  if (warn)
    WARN("comm %p rank %d/%d: libsymmcoll kernels inactive (every rank forwards): %s",
         (void*)c->real, c->rank, c->nranks, why);
  else
    INFO(SYMM_INIT, "comm %p rank %d/%d: libsymmcoll kernels inactive (every rank forwards): %s",
         (void*)c->real, c->rank, c->nranks, why);
}

/* Stage 1's knob check: one WARN (rank 0) naming the knob, INFO elsewhere. */
static int knobsAgree(const struct symmComm* c, const struct symmPeerRecord* recs) {
  int rank = -1;
  const int k = symmKnobMismatch(recs, c->nranks, &rank);
  if (k < 0) return 1;
  const char* names[SYMM_RECORD_KNOBS];
  const int count = symmParamAgreed(names, NULL, SYMM_RECORD_KNOBS);
  char why[200];
  if (k < count && recs[rank].knobCount == recs[0].knobCount)
    snprintf(why, sizeof(why), "SYMMCOLL_%s differs between rank 0 and rank %d", names[k], rank);
  else if (recs[rank].knobCount == recs[0].knobCount)
    snprintf(why, sizeof(why), "the tuning file (SYMMCOLL_TUNING_FILE) differs between rank 0 "
             "and rank %d", rank);
  else
    snprintf(why, sizeof(why), "rank %d runs a libsymmcoll with other agreed knobs", rank);
  sayInactive(c, why, c->rank == 0);
  return 0;
}

ncclResult_t symmSetupAgree(struct symmComm** comms, int n) {
  if (n <= 0) return ncclSuccess;
  struct symmPeerRecord(*records)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*records));
  struct symmPeerRecord* myRecords = calloc((size_t)n, sizeof(*myRecords));
  struct accessVote(*votes)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*votes));
  struct accessVote* myVotes = calloc((size_t)n, sizeof(*myVotes));
  struct symmTransport** built = calloc((size_t)n, sizeof(*built));
  struct symmVerdict* verdicts = calloc((size_t)n, sizeof(*verdicts));
  int* inExchange = calloc((size_t)n, sizeof(int));
  const void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  uint64_t* tableHashes = calloc((size_t)n, sizeof(uint64_t));
  uint64_t(*allTableHashes)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*allTableHashes));
  struct symmCudaThread saved;
  symmCudaThreadEnter(&saved);
  if (!records || !myRecords || !votes || !myVotes || !built || !verdicts || !inExchange || !send ||
      !recv || !tableHashes || !allTableHashes) {
    WARN("symmetric memory: out of host memory at setup; communicators forward");
    goto done;
  }

  /* Stage 0: what every rank knows alike without talking (identical decisions): only the
   * world size against this build's limit. Knobs (SYMMCOLL_MAX_RANKS, SYMMCOLL_DISABLE) may
   * differ between ranks, so they are compared after the exchange, which every rank joins. */
  for (int i = 0; i < n; i++) {
    struct symmComm* c = comms[i];
    if (c->nranks < 2 || c->nranks > SYMM_MAX_RANKS) {
      char why[96];
      snprintf(why, sizeof(why), "world size %d outside 2..%d", c->nranks, SYMM_MAX_RANKS);
      sayInactive(c, why, 0);
      continue;
    }
    inExchange[i] = 1;
    (void)cudaSetDevice(c->cudaDev);
    buildRecord(c, &myRecords[i]);
    send[i] = &myRecords[i];
    recv[i] = records[i];
  }

  /* Stage 1: all-gather the records and decide from the table; private state. */
  (void)symmExchange(comms, n, inExchange, send, recv, sizeof(struct symmPeerRecord));
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    if (!symmDecideFromRecords(records[i], c->nranks, &verdicts[i])) {
      /* A setting that differs between ranks: one WARN (rank 0), INFO elsewhere. */
      sayInactive(c, verdicts[i].reason, verdicts[i].mismatch && c->rank == 0);
      inExchange[i] = 0;
      continue;
    }
    if (!knobsAgree(c, records[i])) {
      inExchange[i] = 0;
      continue;
    }
    int privateOk = 0;
    built[i] = symmTransportCreate(c, symmAlgosLocalStateBytes(), &privateOk);
    myVotes[i].privateOk = privateOk;
    (void)cudaSetDevice(c->cudaDev);
    accessOf(c, records[i], &myVotes[i]);
    send[i] = &myVotes[i];
    recv[i] = votes[i];
  }

  /* Stage 2: everyone's peer access and private state, so all agree; then the tuning table
   * each rank would use for the agreed machine facts. */
  (void)symmExchange(comms, n, inExchange, send, recv, sizeof(struct accessVote));
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    uint32_t reach[SYMM_MAX_RANKS];
    int privateOk = 1;
    for (int r = 0; r < c->nranks; r++) {
      reach[r] = votes[i][r].reach;
      privateOk &= votes[i][r].privateOk != 0;
    }
    if (!symmDecideFromAccess(reach, c->nranks, &verdicts[i])) {
      sayInactive(c, verdicts[i].reason, 0);
      inExchange[i] = 0;
      continue;
    }
    if (!privateOk) {
      sayInactive(c, "a rank could not build its private state", 0);
      inExchange[i] = 0;
      continue;
    }
    c->link = agreedLink(votes[i], c->nranks);
    c->arch = agreedArch(records[i], c->nranks);
    c->tuneTable = selectTable(c, &tableHashes[i]);
    send[i] = &tableHashes[i];
    recv[i] = allTableHashes[i];
  }
  (void)symmExchange(comms, n, inExchange, send, recv, sizeof(uint64_t));
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    int sameTable = 1;
    for (int r = 0; r < c->nranks; r++) sameTable &= allTableHashes[i][r] == allTableHashes[i][0];
    if (!sameTable) {
      sayInactive(c, "the tuning tables in use differ between ranks (SYMMCOLL_TUNING_FILE refused "
                  "or missing on some rank)", c->rank == 0);
      continue;
    }
    const struct symmPeerRecord* recs = records[i];
    struct symmTransportPlan plan;
    memset(&plan, 0, sizeof(plan));
    plan.ranksPerDevice = ranksPerDevice(recs, c->nranks);
    plan.uid = recs[0].uid;
    plan.multicastAgreed = verdicts[i].multicast;
    memcpy(plan.secret, recs[0].secret, sizeof(plan.secret));
    plan.granularity = 1;
    for (int r = 0; r < c->nranks; r++) {
      plan.pids[r] = recs[r].pid;
      if (recs[r].granularity > plan.granularity) plan.granularity = recs[r].granularity;
    }
    plan.stagingBytes = plannedStaging(c, plan.multicastAgreed, plan.granularity);
    plan.padBytes = symmAlgosPadBytes();
    plan.releaseWaits = symmCopyEngineRelease;
    symmTransportAttach(c, built[i], &plan);
    memset(plan.secret, 0, sizeof(plan.secret));
    built[i] = NULL;
    INFO(SYMM_INIT, "comm %p rank %d/%d: libsymmcoll kernels active (%s, sm_%d, %zu KiB staging "
         "per rank at the first call given to them)", (void*)c->real, c->rank, c->nranks,
         c->link == SYMM_LINK_NVLINK ? "NVLink" : c->link == SYMM_LINK_SAME_GPU ? "one GPU" : "PCIe",
         c->arch, plan.stagingBytes >> 10);
  }

  if (symmParamStageAtCreation()) (void)symmTransportStage(comms, n);

done:
  for (int i = 0; built && i < n; i++)
    symmTransportDiscard(built[i]);
  if (records) memset(records, 0, (size_t)n * sizeof(*records)); /* the secret */
  if (myRecords) memset(myRecords, 0, (size_t)n * sizeof(*myRecords));
  symmCudaThreadLeave(&saved);
  free(records);
  free(myRecords);
  free(votes);
  free(myVotes);
  free(built);
  free(verdicts);
  free(inExchange);
  free(send);
  free(recv);
  free(tableHashes);
  free(allTableHashes);
  return ncclSuccess;
}

ncclResult_t symmCommSetupMany(struct symmComm** comms, int n) {
  for (int i = 0; i < n; i++) {
    ncclResult_t res = symmCommReadAttrs(comms[i]);
    if (res != ncclSuccess) {
      /* Not ready or failed: leave it forwarding; never fail the user's init. */
      INFO(SYMM_INIT, "comm %p: libsymmcoll kernels inactive: attributes unavailable (%d)",
           (void*)comms[i]->real, (int)res);
      for (int k = 0; k < n; k++) comms[k]->setupDone = 1;
      return ncclSuccess;
    }
  }
  /* Before any of our kernels can spin (see symmAlgosLoadKernels); a rank whose kernels do
   * not load says so in its setup record, and the communicator forwards on every rank. A
   * disabled rank loads nothing: its record says "disabled", and every rank forwards. */
  for (int i = 0; i < n; i++)
    comms[i]->kernelsLoaded =
        !symmDisabled() && symmAlgosLoadKernels(comms[i]->cudaDev) == ncclSuccess;
  ncclResult_t res = symmSetupAgree(comms, n);
  for (int i = 0; i < n; i++) comms[i]->setupDone = 1;
  return res;
}
