/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test of the route of a collective call (src/route.c) over a table of cases: each rule
 * (passthrough, unknown, failed or gone communicators, arguments, parked operations, never-ours
 * communicators, repeats), each CTA policy, fp8 below sm_90, groups, capture, non-blocking
 * staging, windows, and a launch issued later; also which facts each case asks for, in order.
 * No GPU, no NCCL. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "harness.h"
#include "param.h"
#include "route.h"
#include "tune_table.h" /* symmTunerResetForTests */
#include "tuner.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static float buffer[4];

/* What gathering each group of facts finds: a 2-rank sm_90 NVLink communicator, blocking, set
 * up, staging built, healthy, outside groups, nothing registered, nothing remembered. */
static struct symmRouteFacts world(void) {
  struct symmRouteFacts w;
  memset(&w, 0, sizeof(w));
  w.known = 1;
  w.config = (struct symmCommConfig){.blocking = 1, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  w.nranks = 2;
  w.arch = 90;
  w.link = SYMM_LINK_NVLINK;
  w.hasTransport = 1;
  w.stillOurs = 1;
  w.peersLive = 1;
  w.stagingBytes = 64 * MiB;
  return w;
}

static struct symmTask task(enum symmColl coll, size_t count, ncclDataType_t dt, ncclRedOp_t op) {
  return (struct symmTask){.coll = coll, .sendbuff = buffer, .recvbuff = buffer + 1,
                           .count = count, .datatype = dt, .op = op, .root = -1};
}

static struct symmTask allReduce(size_t count) {
  return task(SYMM_COLL_ALLREDUCE, count, ncclBfloat16, ncclSum);
}

static void settled(struct symmRouteFacts* f, const struct symmRouteFacts* w) {
  f->nranks = w->nranks;
  f->arch = w->arch;
  f->link = w->link;
  f->table = w->table;
  f->parked = w->parked;
  f->hasTransport = w->hasTransport;
  f->failure = w->failure;
}

/* What SYMM_NEED_GRAPH_PEERS finds the lock's facts to be after its exchange (NULL: as before). */
static const struct symmRouteFacts* afterExchange;

/* One group of facts, from `w`, as src/enqueue.c gathers it; its letter goes to `asked`. */
static void reveal(struct symmRouteFacts* f, const struct symmRouteFacts* w, unsigned group,
                   char* asked, int* n) {
  f->have |= group;
  if (!f->known && group != SYMM_NEED_COMM) { /* no communicator: nothing else to read */
    asked[(*n)++] = '-';
    return;
  }
  switch (group) {
    case SYMM_NEED_COMM:
      asked[(*n)++] = 'C';
      f->known = w->known;
      f->device = w->device;
      if (!f->issuing) f->gone = w->gone;
      f->jobRunning = w->jobRunning;
      f->config = w->config;
      f->checkPointers = w->checkPointers;
      break;
    case SYMM_NEED_JOB:
      asked[(*n)++] = 'J';
      f->jobRunning = 0;
      settled(f, w); /* what the job settled is read again */
      break;
    case SYMM_NEED_SETTLED:
      asked[(*n)++] = 'S';
      settled(f, w);
      break;
    case SYMM_NEED_PARKED:
      asked[(*n)++] = 'P';
      f->parked = 0;
      f->parkedResult = w->parkedResult;
      break;
    case SYMM_NEED_LOCK:
      asked[(*n)++] = 'L';
      if (f->issuing) f->gone = w->gone;
      f->stillOurs = w->stillOurs;
      f->peersLive = w->peersLive;
      f->needsStaging = w->needsStaging;
      break;
    case SYMM_NEED_HEALTH:
      asked[(*n)++] = 'H';
      f->health = w->health;
      break;
    case SYMM_NEED_REPEAT:
      asked[(*n)++] = 'R';
      f->repeat = w->repeat;
      break;
    case SYMM_NEED_WINDOW:
      asked[(*n)++] = 'W';
      f->registered = w->registered;
      f->multicastReady = w->multicastReady;
      f->stagingBytes = w->stagingBytes;
      f->graphPeersReady = w->graphPeersReady;
      break;
    case SYMM_NEED_CAPTURE:
      asked[(*n)++] = 'K';
      f->captured = w->captured;
      break;
    case SYMM_NEED_POINTERS:
      asked[(*n)++] = 'Q';
      f->pointersRefused = w->pointersRefused;
      break;
    case SYMM_NEED_GROUP_STREAM:
      asked[(*n)++] = 'Y';
      f->groupStream = w->groupStream;
      break;
    case SYMM_NEED_GRAPH_PEERS: {
      /* The exchange waits without the lock: what the lock guards is read again after it. */
      const struct symmRouteFacts* after = afterExchange != NULL ? afterExchange : w;
      asked[(*n)++] = 'G';
      f->graphPeers = w->graphPeers;
      f->gone = after->gone;
      f->stillOurs = after->stillOurs;
      f->peersLive = after->peersLive;
      f->needsStaging = after->needsStaging;
      f->health = after->health;
      break;
    }
    default:
      CHECK(0);
      break;
  }
}

/* Hands the route the facts it asks for, from `w`, as src/enqueue.c gathers them; `asked`
 * spells the groups in order (C comm, J job, S settled, P parked, L lock, H health, R repeat,
 * W window, K capture, G graph peers, Y the group's streams, Q NCCL's pointer check; '-' a group with no communicator to
 * read it from). */
static struct symmRoute drive(const struct symmRouteFacts* w, const struct symmTask* t,
                              char* asked) {
  struct symmRouteFacts f;
  memset(&f, 0, sizeof(f));
  f.passthrough = w->passthrough;
  f.realMissing = w->realMissing;
  f.groupDepth = w->groupDepth;
  f.issuing = w->issuing;
  int n = 0;
  for (int step = 0; step < 16; step++) {
    const struct symmRoute r = symmRoute(&f, t);
    if (r.kind != SYMM_ROUTE_NEED) {
      asked[n] = '\0';
      return r;
    }
    CHECK(r.need != 0);
    CHECK_EQ_INT(f.have & r.need, 0); /* never the same group twice */
    for (unsigned bit = 1; bit <= r.need; bit <<= 1)
      if (r.need & bit) reveal(&f, w, bit, asked, &n);
  }
  CHECK(0); /* the route never settled */
  asked[n] = '\0';
  return (struct symmRoute){.kind = SYMM_ROUTE_NEED};
}

enum { K_REFUSE = SYMM_ROUTE_REFUSE, K_FWD = SYMM_ROUTE_FORWARD, K_FWD_STAGE = SYMM_ROUTE_FORWARD_STAGE,
       K_STAGE = SYMM_ROUTE_STAGE_LAUNCH, K_LAUNCH = SYMM_ROUTE_LAUNCH };

/* One expected outcome; -1 fields are not checked. */
struct expect {
  int kind;
  int result;  /* REFUSE */
  int failGroup;
  int ordered; /* FORWARD */
  int when;    /* LAUNCH, STAGE_LAUNCH, FORWARD_STAGE */
  int remember;
  int algo;
  const char* asked;
};

static void expectRoute(const char* name, const struct symmRouteFacts* w, const struct symmTask* t,
                        struct expect e) {
  char asked[32];
  const struct symmRoute r = drive(w, t, asked);
  /* Pure: the same facts give the same route. */
  char again[32];
  const struct symmRoute r2 = drive(w, t, again);
  CHECK(memcmp(&r, &r2, sizeof(r)) == 0);
  const int before = harnessFailures;
  CHECK_EQ_INT(r.kind, e.kind);
  if (e.result >= 0) CHECK_EQ_INT(r.result, e.result);
  if (e.failGroup >= 0) CHECK_EQ_INT(r.failGroup, e.failGroup);
  if (e.ordered >= 0) CHECK_EQ_INT(r.ordered, e.ordered);
  if (e.when >= 0) CHECK_EQ_INT(r.when, e.when);
  if (e.remember >= 0) CHECK_EQ_INT(r.remember, e.remember);
  if (e.algo >= 0) CHECK_EQ_INT(r.algo, e.algo);
  if (e.asked != NULL) CHECK_EQ_STR(asked, e.asked);
  if (harnessFailures != before) fprintf(stderr, "  in case: %s\n", name);
}

#define X -1
/* kind, result, failGroup, ordered, when, remember, algo, asked */
#define LAUNCH_NOW(a, asked) {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 1, a, asked}
#define FWD_ORDERED(asked) {K_FWD, X, X, 1, X, X, SYMM_ALGO_NCCL, asked}
#define FWD_PLAIN(asked) {K_FWD, X, X, 0, X, 0, X, asked}
#define REFUSED(res, group, asked) {K_REFUSE, res, group, X, X, X, X, asked}

/* Arguments NCCL's own checks refuse: given to it untouched (it answers, fails its group, keeps
 * the error on a non-blocking communicator), with our WARN's note. */
static void expectNcclRefuses(const char* name, const struct symmRouteFacts* w,
                              const struct symmTask* t, const char* asked) {
  expectRoute(name, w, t, (struct expect)FWD_PLAIN(asked));
  char got[32];
  const struct symmRoute r = drive(w, t, got);
  CHECK_EQ_INT(r.untouched, 0);
  CHECK_EQ_INT(r.note, SYMM_NOTE_NCCL_REFUSES);
}

static void testEntryAndCommunicator(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  expectRoute("the common case", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));

  w.passthrough = 1; /* a callback from the real NCCL, or SYMMCOLL_DISABLE */
  char asked[32];
  struct symmRoute r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.kind, SYMM_ROUTE_FORWARD);
  CHECK_EQ_INT(r.untouched, 1);
  CHECK_EQ_STR(asked, "");
  w.realMissing = 1; /* no real NCCL: NCCL's system error, never the group's */
  w.groupDepth = 1;
  expectRoute("no real NCCL", &w, &t, (struct expect)REFUSED(ncclSystemError, 0, ""));

  w = world();
  w.known = 0; /* NULL, destroyed or foreign: the real NCCL's own answer, unordered */
  expectRoute("unknown communicator", &w, &t, (struct expect)FWD_PLAIN("C-"));
  w = world();
  w.device = ncclUnhandledCudaError;
  expectRoute("device", &w, &t, (struct expect)REFUSED(ncclUnhandledCudaError, 0, "CS"));
  w.groupDepth = 2;
  expectRoute("device in a group", &w, &t, (struct expect)REFUSED(ncclUnhandledCudaError, 1, "CS"));
  w = world();
  w.gone = 1;
  w.jobRunning = 1;
  expectRoute("gone", &w, &t, (struct expect)REFUSED(ncclInvalidUsage, 0, "CS"));
  w = world();
  w.jobRunning = 1; /* waited for, then as usual */
  expectRoute("setup job", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSJLHRW"));

  /* Never ours: plain forward, or its failure. */
  w = world();
  w.hasTransport = 0;
  expectRoute("never ours", &w, &t, (struct expect)FWD_PLAIN("CS"));
  w.failure = ncclRemoteError;
  w.groupDepth = 1;
  expectRoute("never ours, failed", &w, &t, (struct expect)REFUSED(ncclRemoteError, 1, "CS"));
  /* Failed since (health, under the lock). */
  w = world();
  w.health = ncclRemoteError;
  expectRoute("failed", &w, &t, (struct expect)REFUSED(ncclRemoteError, 0, "CSLHR"));
  /* Detached by a teardown between the first look and the lock. */
  w = world();
  w.stillOurs = 0;
  w.peersLive = 0;
  expectRoute("detached", &w, &t, (struct expect){K_FWD, X, X, 1, X, 0, SYMM_ALGO_NCCL, "CSLHR"});
}

static void testArguments(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  t.datatype = (ncclDataType_t)ncclNumTypes;
  expectNcclRefuses("datatype", &w, &t, "CSLHR");
  w.groupDepth = 1;
  expectNcclRefuses("datatype in a group", &w, &t, "CSLH");
  w.groupDepth = 0;
  /* NCCL looks at the communicator's state before the arguments. */
  w.health = ncclRemoteError;
  expectRoute("datatype, failed", &w, &t, (struct expect)REFUSED(ncclRemoteError, 0, "CSLHR"));
  w = world();
  w.hasTransport = 0;
  expectNcclRefuses("datatype, never ours", &w, &t, "CS");
  w.failure = ncclSystemError;
  expectRoute("datatype, never ours, failed", &w, &t, (struct expect)REFUSED(ncclSystemError, 0, "CS"));
  w = world();
  /* Operator range: negative invalid; user-defined (PreMulSum) the real NCCL's, ordered. */
  t = task(SYMM_COLL_REDUCESCATTER, 4, ncclFloat32, (ncclRedOp_t)-1);
  expectNcclRefuses("negative op", &w, &t, "CSLHR");
  t = task(SYMM_COLL_ALLREDUCE, 4, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 1));
  expectRoute("user-defined op", &w, &t, (struct expect)FWD_ORDERED("CS"));
  t = task(SYMM_COLL_ALLGATHER, 4, ncclFloat32, (ncclRedOp_t)-1); /* all-gather has no op */
  expectRoute("all-gather op", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));
  /* Empty calls and NULL buffers are NCCL's to judge; an empty one puts nothing on the stream
   * (NCCL discards it after its checks), so it is not ordered either. */
  t = allReduce(0);
  expectRoute("count 0", &w, &t, (struct expect)FWD_PLAIN("CSLHR"));
  t.recvbuff = NULL;
  expectRoute("count 0, NULL buffer", &w, &t, (struct expect)FWD_PLAIN("CSLHR"));
  w.health = ncclRemoteError;
  expectRoute("count 0, failed", &w, &t, (struct expect)REFUSED(ncclRemoteError, 0, "CSLHR"));
  w = world();
  t = allReduce(4);
  t.recvbuff = NULL;
  expectRoute("NULL buffer", &w, &t, (struct expect)FWD_ORDERED("CS"));
  t = task(SYMM_COLL_ALLGATHER, SIZE_MAX / 4, ncclInt8, ncclSum);
  w.nranks = 8;
  expectRoute("overflow", &w, &t, (struct expect)REFUSED(ncclInvalidArgument, 0, "CS"));

  /* fp8 reductions: refused below sm_90, left to NCCL on mixed architectures (0), ours from
   * sm_90; an fp8 all-gather runs anywhere. */
  w = world();
  t = task(SYMM_COLL_ALLREDUCE, 1024, ncclFloat8e4m3, ncclSum);
  w.arch = 80;
  expectNcclRefuses("fp8 sm_80", &w, &t, "CSLHR");
  w.arch = 0;
  expectRoute("fp8 mixed", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, "CSLHRW"});
  w.arch = 90;
  expectRoute("fp8 sm_90", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));
  t = task(SYMM_COLL_REDUCESCATTER, 1024, ncclFloat8e5m2, ncclMax);
  w.arch = 86;
  expectNcclRefuses("fp8 reduce-scatter sm_86", &w, &t, "CSLHR");
  t = task(SYMM_COLL_ALLGATHER, 1024, ncclFloat8e4m3, ncclSum);
  w.arch = 80;
  expectRoute("fp8 all-gather sm_80", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));
  /* An empty fp8 reduction is no error below sm_90 either (NCCL discards it first). */
  t = task(SYMM_COLL_ALLREDUCE, 0, ncclFloat8e4m3, ncclSum);
  expectRoute("fp8 count 0 sm_80", &w, &t, (struct expect)FWD_PLAIN("CSLHR"));
}

static void testParked(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  w.parked = 1; /* run first, then as usual */
  expectRoute("parked ran", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSPLHRW"));
  w.parkedResult = ncclInProgress; /* NCCL's group still launching: this call came too early */
  char asked[32];
  struct symmRoute r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.kind, SYMM_ROUTE_REFUSE);
  CHECK_EQ_INT(r.result, ncclInvalidArgument);
  CHECK_EQ_INT(r.note, SYMM_NOTE_PARKED_BUSY);
  w.parkedResult = ncclUnhandledCudaError;
  w.groupDepth = 1;
  expectRoute("parked failed", &w, &t, (struct expect)REFUSED(ncclUnhandledCudaError, 1, "CSP"));
  /* What ran before (NCCL's state) is reported before arguments NCCL refuses; our own refusal
   * (an overflowing count) comes first. */
  t.datatype = (ncclDataType_t)-1;
  expectRoute("state before arguments", &w, &t, (struct expect)REFUSED(ncclUnhandledCudaError, 1, "CSP"));
  t = task(SYMM_COLL_ALLGATHER, SIZE_MAX / 4, ncclInt8, ncclSum);
  w.nranks = 8;
  expectRoute("overflow first", &w, &t, (struct expect)REFUSED(ncclInvalidArgument, 1, "CS"));
}

/* NCCL_CHECK_POINTERS: NCCL's pointer check asked only when it is on, and only for calls ours
 * could run; a refused buffer goes to NCCL untouched, which refuses it. */
static void testCheckPointers(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  w.checkPointers = 1;
  expectRoute("pointers fine", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSQLHRW"));
  w.pointersRefused = 1;
  expectNcclRefuses("pointer refused", &w, &t, "CSQLHR");
  w.groupDepth = 1;
  expectNcclRefuses("pointer refused in a group", &w, &t, "CSQLH");
  w = world();
  w.pointersRefused = 1; /* never asked while the check is off */
  expectRoute("check off", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));
  w.checkPointers = 1;
  t.recvbuff = NULL; /* NCCL's anyway */
  expectRoute("NULL buffer", &w, &t, (struct expect)FWD_ORDERED("CS"));
}

static void testRepeatsAndGroups(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  char asked[32];
  /* What a call gets is what an identical call gets again, without the tuner. */
  const struct symmRoute first = drive(&w, &t, asked);
  CHECK_EQ_INT(first.remember, 1);
  w.repeat = &first;
  struct symmRoute again = drive(&w, &t, asked);
  CHECK_EQ_STR(asked, "CSLHR");
  CHECK_EQ_INT(again.kind, SYMM_ROUTE_LAUNCH);
  CHECK_EQ_INT(again.repeated, 1);
  CHECK_EQ_INT(again.remember, 0);
  CHECK_EQ_INT(again.algo, first.algo);
  /* A remembered forward (sizes above the table's last step, say) forwards again. */
  const struct symmRoute fwd = {.kind = SYMM_ROUTE_FORWARD, .ordered = 1, .remember = 1};
  w.repeat = &fwd;
  again = drive(&w, &t, asked);
  CHECK_EQ_INT(again.kind, SYMM_ROUTE_FORWARD);
  CHECK_EQ_INT(again.ordered, 1);
  CHECK_EQ_INT(again.repeated, 1);
  /* Inside a group nothing is remembered or repeated; ours run at the outermost end. */
  w.groupDepth = 1;
  expectRoute("group", &w, &t, (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_GROUP_END, 0,
                                               SYMM_ALGO_LAMPORT, "CSLHYW"});
  /* Our kernels cannot run now (aborted, revoked): decided here, issued after the lock. */
  w = world();
  w.peersLive = 0;
  t = allReduce(1024);
  expectRoute("not live", &w, &t, (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_ISSUE, 0,
                                                  SYMM_ALGO_LAMPORT, "CSLHRW"});
  /* Inside a group the real NCCL is given it now: a revoked communicator's call is refused by
   * the call itself (ncclInvalidUsage), and NCCL's group fails with it. */
  w.groupDepth = 1;
  expectRoute("not live, group", &w, &t, (struct expect)FWD_PLAIN("CSLH"));
  /* Forwards outside the table's range are remembered where ours could run. */
  w = world();
  w.nranks = 6;
  t = allReduce(1 << 20);
  expectRoute("untimed row", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, "CSLHRW"});
  w.groupDepth = 1;
  expectRoute("untimed row, group", &w, &t, (struct expect){K_FWD, X, X, 1, X, 0, SYMM_ALGO_NCCL, "CSLHYW"});
}

static void testStaging(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  w.peersLive = 0;
  w.needsStaging = 1;
  expectRoute("first call", &w, &t, (struct expect){K_STAGE, X, X, X, SYMM_WHEN_NOW, 0,
                                                    SYMM_ALGO_LAMPORT, "CSLHRWK"});
  w.groupDepth = 1;
  expectRoute("first call in a group", &w, &t, (struct expect){K_STAGE, X, X, X, SYMM_WHEN_GROUP_END,
                                                               0, SYMM_ALGO_LAMPORT, "CSLHYWK"});
  w.config.blocking = 0; /* non-blocking: forward, staging job afterwards */
  expectRoute("non-blocking in a group", &w, &t, (struct expect){K_FWD_STAGE, X, X, X,
                                                                 SYMM_WHEN_GROUP_END, 0, X, "CSLHYWK"});
  w.groupDepth = 0;
  expectRoute("non-blocking", &w, &t, (struct expect){K_FWD_STAGE, X, X, X, SYMM_WHEN_NOW, 0, X,
                                                      "CSLHRWK"});
  w.captured = 1; /* captured: forwards, staging waits for an uncaptured call */
  char asked[32];
  const struct symmRoute r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.kind, SYMM_ROUTE_FORWARD);
  CHECK_EQ_INT(r.ordered, 1);
  CHECK_EQ_INT(r.remember, 0);
  CHECK_EQ_INT(r.note, SYMM_NOTE_CAPTURED_FIRST);
  w.config.blocking = 1;
  expectRoute("captured", &w, &t, (struct expect){K_FWD, X, X, 1, X, 0, X, "CSLHRWK"});
  /* A call the tuner forwards never builds staging, nor asks about the capture. */
  w.nranks = 6;
  t = allReduce(1 << 20);
  expectRoute("forward before staging", &w, &t, (struct expect){K_FWD, X, X, 1, X, 0, SYMM_ALGO_NCCL,
                                                                 "CSLHRW"});
}

static void testPolicies(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  char asked[32];
  struct symmRoute r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.maxBlocks, 0);
  CHECK_EQ_INT(r.minBlocks, 0);
  /* Efficiency: the same algorithm, fewer blocks. */
  w.config.ctaPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.algo, SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(r.maxBlocks, SYMM_EFFICIENCY_BLOCKS);
  w.config = (struct symmCommConfig){.blocking = 1, .maxCTAs = 16, .minCTAs = 4};
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.maxBlocks, 16);
  CHECK_EQ_INT(r.minBlocks, 4);
  /* Zero: no SM kernel of ours. The copy engines take every all-gather on NVLink (or one GPU),
   * at any size; all-reduce and reduce-scatter forward; so do PCIe peers. */
  w = world();
  w.config.ctaPolicy = NCCL_CTA_POLICY_ZERO;
  for (size_t count = 1; count <= ((size_t)1 << 28); count <<= 9) {
    t = allReduce(count);
    expectRoute("zero all-reduce", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, NULL});
    t = task(SYMM_COLL_REDUCESCATTER, count, ncclBfloat16, ncclSum);
    expectRoute("zero reduce-scatter", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, NULL});
    t = task(SYMM_COLL_ALLGATHER, count, ncclBfloat16, ncclSum);
    expectRoute("zero all-gather", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_COPYENGINE, NULL));
    w.link = SYMM_LINK_SAME_GPU;
    expectRoute("zero all-gather, one GPU", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_COPYENGINE, NULL));
    w.link = SYMM_LINK_PCIE;
    expectRoute("zero all-gather, PCIe", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, NULL});
    w.link = SYMM_LINK_NVLINK;
  }
  /* An override cannot bring an SM kernel back; it can force the copy engine (also on PCIe). */
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "oneshot", 1);
  setenv("SYMMCOLL_ALLGATHER_ALGO", "ce", 1);
  symmParamResetAll();
  symmTunerResetForTests();
  w.config.ctaPolicy = NCCL_CTA_POLICY_ZERO | NCCL_CTA_POLICY_EFFICIENCY;
  t = allReduce(1024);
  expectRoute("zero, forced one-shot", &w, &t, (struct expect){K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCL, NULL});
  w.link = SYMM_LINK_PCIE;
  t = task(SYMM_COLL_ALLGATHER, 1024, ncclBfloat16, ncclSum);
  expectRoute("zero, forced ce on PCIe", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_COPYENGINE, NULL));
  w.config.ctaPolicy = NCCL_CTA_POLICY_DEFAULT; /* forced one-shot without the policy */
  t = allReduce(1024);
  expectRoute("forced one-shot", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_ONESHOT, NULL));
  unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
  unsetenv("SYMMCOLL_ALLGATHER_ALGO");
  symmParamResetAll();
  symmTunerResetForTests();
  /* The policy itself, algorithm by algorithm. */
  for (int a = 0; a < SYMM_NALGOS; a++) {
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_DEFAULT, (enum symmAlgo)a), 1);
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_EFFICIENCY, (enum symmAlgo)a), 1);
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_ZERO, (enum symmAlgo)a),
                 a == SYMM_ALGO_NCCL || a == SYMM_ALGO_NCCLPLAIN || a == SYMM_ALGO_COPYENGINE);
  }
}

static void testLaunchDetails(void) {
  /* Windows: a registered all-gather output that the table (here an override) gives to push is
   * written in place from SYMMCOLL_ZERO_COPY_MIN_BYTES (16 MiB) on; a registered all-reduce
   * input is read in place by the two-shot up to SYMMCOLL_ZERO_COPY_MAX_BYTES; unregistered
   * inputs exchange ncclCommRegister descriptors. */
  struct symmRouteFacts w = world();
  setenv("SYMMCOLL_ALLGATHER_ALGO", "push", 1);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "twoshot", 1);
  symmParamResetAll();
  struct symmTask t = task(SYMM_COLL_ALLGATHER, 4 * MiB, ncclBfloat16, ncclSum); /* 16 MiB */
  char asked[32];
  w.registered = 1;
  struct symmRoute r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.algo, SYMM_ALGO_PUSH);
  CHECK_EQ_INT(r.zeroCopy, 1);
  t.count = 4 * MiB - 1; /* below the bound: the same push, through staging */
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.algo, SYMM_ALGO_PUSH);
  CHECK_EQ_INT(r.zeroCopy, 0);
  t.count = 4 * MiB;
  w.registered = 0;
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.zeroCopy, 0);
  t = allReduce(1 << 20);
  w.registered = 1;
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.algo, SYMM_ALGO_TWOSHOT);
  CHECK_EQ_INT(r.zeroCopy, 1);
  CHECK_EQ_INT(r.exchangeDescs, 0);
  w.registered = 0;
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.zeroCopy, 0);
  CHECK_EQ_INT(r.exchangeDescs, 1);
  t = allReduce(4 << 20); /* 8 MiB of bf16 */
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.exchangeDescs, 0);
  unsetenv("SYMMCOLL_ALLGATHER_ALGO");
  unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
  symmParamResetAll();
  symmTunerResetForTests();
  /* All-gather's op is ncclSum; multimem is emulated unless multicast is mapped; programmatic
   * dependent launch from sm_90 on, unless SYMMCOLL_PDL=0. */
  t = task(SYMM_COLL_ALLGATHER, 1024, ncclBfloat16, ncclMax);
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.op, ncclSum);
  CHECK_EQ_INT(r.emulateMultimem, 1);
  CHECK_EQ_INT(r.pdl, 1);
  w.multicastReady = 1;
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.emulateMultimem, 0);
  w.arch = 80;
  t = allReduce(1024);
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.algo, SYMM_ALGO_LAMPORT); /* the untimed row */
  CHECK_EQ_INT(r.pdl, 0);
  w.arch = 90;
  setenv("SYMMCOLL_PDL", "0", 1);
  symmParamResetAll();
  r = drive(&w, &t, asked);
  CHECK_EQ_INT(r.pdl, 0);
  unsetenv("SYMMCOLL_PDL");
  symmParamResetAll();
}

/* A launch decided earlier, issued at the group's end (or after staging, or parked): it runs,
 * is refused, or forwards plainly; never the group's failure. */
static void testIssued(void) {
  struct symmRouteFacts w = world();
  w.issuing = 1;
  w.groupDepth = 1;
  struct symmTask t = allReduce(1024);
  expectRoute("issued", &w, &t, (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, X, "CLH"});
  w.device = ncclUnhandledCudaError;
  expectRoute("issued, device", &w, &t, (struct expect)REFUSED(ncclUnhandledCudaError, 0, "C"));
  w = world();
  w.issuing = 1;
  w.gone = 1; /* read under the lock */
  expectRoute("issued, gone", &w, &t, (struct expect)REFUSED(ncclInvalidUsage, 0, "CL"));
  w.gone = 0;
  w.health = ncclRemoteError;
  expectRoute("issued, failed", &w, &t, (struct expect)REFUSED(ncclRemoteError, 0, "CLH"));
  w.health = ncclSuccess;
  w.peersLive = 0; /* staging failed, or aborted or revoked since */
  expectRoute("issued, not live", &w, &t, (struct expect)FWD_PLAIN("CLH"));
}

static void testLargestStaged(void) {
  struct symmTuneInput in;
  memset(&in, 0, sizeof(in));
  in.nranks = 2;
  in.arch = 90;
  in.link = SYMM_LINK_NVLINK;
  in.stagingBytes = 64 * MiB;
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_DEFAULT), SIZE_MAX); /* two-shot */
  in.arch = 80;
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_DEFAULT), 32 * KiB);
  /* Zero: the copy-engine all-gather runs any size where it runs at all. */
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_ZERO), SIZE_MAX);
  in.link = SYMM_LINK_SAME_GPU;
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_ZERO), SIZE_MAX);
  in.link = SYMM_LINK_PCIE;
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_ZERO), 0);
  /* A forced SM kernel counts only where the policy allows it. */
  setenv("SYMMCOLL_REDUCESCATTER_ALGO", "pull", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_DEFAULT), SIZE_MAX);
  CHECK_EQ_INT(symmRouteLargestStaged(&in, NCCL_CTA_POLICY_ZERO), 0);
  unsetenv("SYMMCOLL_REDUCESCATTER_ALGO");
  symmParamResetAll();
}

/* Captured all-gather push and reduce-scatter pull on plain buffers exchange them with the
 * peers where the tuner would read a window in place (from SYMMCOLL_ZERO_COPY_MIN_BYTES), and
 * run in place when every rank agreed; such routes are never remembered; nothing else asks. */
static void testGraphZeroCopy(void) {
  struct symmRouteFacts w = world();
  w.graphPeersReady = 1;
  struct symmTask t = task(SYMM_COLL_ALLGATHER, 8 * MiB, ncclBfloat16, ncclSum); /* 32 MiB out */
  char asked[32];
  struct expect eagerLarge = {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_PUSH, "CSLHRWK"};
  expectRoute("eager all-gather, plain, large", &w, &t, eagerLarge);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 0);
  w.captured = 1;
  struct expect captured = {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_PUSH, "CSLHRWKG"};
  expectRoute("captured, the peers said no", &w, &t, captured);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 0);
  w.graphPeers = 1;
  expectRoute("captured, every rank agreed", &w, &t, captured);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 1);
  /* Then the windows' table decides: above 512 MiB it gives the pair's all-gather to the copy
   * engine, in place too. */
  t.count = 512 * MiB;
  struct expect copyEngine = {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_COPYENGINE, "CSLHRWKG"};
  expectRoute("captured, 1 GiB", &w, &t, copyEngine);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 1);
  w.graphPeers = 0;
  expectRoute("captured, 1 GiB, no agreement", &w, &t,
              (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_PUSH, "CSLHRWKG"});
  w.graphPeers = 1;
  t.count = 8 * MiB;
  /* Reduce-scatter pull too (16 MiB of float input). */
  struct symmTask rs = task(SYMM_COLL_REDUCESCATTER, 2 * MiB, ncclFloat, ncclSum);
  struct expect pulled = {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_PULL, "CSLHRWKG"};
  expectRoute("captured reduce-scatter", &w, &rs, pulled);
  CHECK_EQ_INT(drive(&w, &rs, asked).zeroCopy, 1);
  /* Not asked: below the bound, not ready (below). */
  t.count = 4 * MiB - 1;
  expectRoute("below 16 MiB", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_PUSH, "CSLHRW"));
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 0);
  t.count = 8 * MiB;
  /* A rank whose buffers lie in a window is asked too (enqueue.c has it say no), as whether
   * they do is its own fact: a peer with plain buffers is never left waiting for it, nor meets
   * its next call's offer. It then reads its window in place; eager, such routes are not
   * remembered either (an identical captured call must reach the exchange). */
  w.registered = 1;
  w.graphPeers = 0;
  expectRoute("a window, captured", &w, &t, captured);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 1);
  w.captured = 0;
  expectRoute("a window, eager", &w, &t, eagerLarge);
  CHECK_EQ_INT(drive(&w, &t, asked).zeroCopy, 1);
  w.captured = 1;
  w.registered = 0;
  w.graphPeers = 1;
  /* The all-reduce two-shot writing the peers' outputs (from 8 MiB) exchanges them too; reading
   * inputs in place (to 4 MiB) does not ask. */
  struct symmTask ar = allReduce(64 * MiB); /* 128 MiB of bf16 */
  struct expect twoShot = {K_LAUNCH, X, X, X, SYMM_WHEN_NOW, 0, SYMM_ALGO_TWOSHOT, "CSLHRWKG"};
  expectRoute("captured all-reduce", &w, &ar, twoShot);
  CHECK_EQ_INT(drive(&w, &ar, asked).zeroCopy, 1);
  ar.count = 4 * MiB; /* 8 MiB */
  expectRoute("captured all-reduce, 8 MiB", &w, &ar, twoShot);
  CHECK_EQ_INT(drive(&w, &ar, asked).zeroCopy, 1);
  ar.count = 4 * MiB - 1;
  expectRoute("all-reduce below 8 MiB", &w, &ar,
              (struct expect)LAUNCH_NOW(SYMM_ALGO_TWOSHOT, "CSLHRW"));
  CHECK_EQ_INT(drive(&w, &ar, asked).zeroCopy, 0);
  /* Where inputs are read in place (here to 8 MiB), outputs are not written. */
  setenv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "8388608", 1);
  symmParamResetAll();
  ar.count = 4 * MiB;
  expectRoute("all-reduce, inputs read in place to 8 MiB", &w, &ar,
              (struct expect)LAUNCH_NOW(SYMM_ALGO_TWOSHOT, "CSLHRW"));
  unsetenv("SYMMCOLL_ZERO_COPY_MAX_BYTES");
  symmParamResetAll();
  w.graphPeersReady = 0;
  expectRoute("not ready", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_PUSH, "CSLHRW"));
  w.graphPeersReady = 1;
  /* Inside a group it still takes part (the exchange says no there) and launches at the end. */
  w.groupDepth = 1;
  w.graphPeers = 0;
  expectRoute("in a group", &w, &t,
              (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_GROUP_END, 0, SYMM_ALGO_PUSH, "CSLHYWKG"});
  w.groupDepth = 0;
  w.graphPeers = 1;
  /* What changed while the exchange waited without the lock decides. */
  struct symmRouteFacts after = w;
  afterExchange = &after;
  after.health = ncclRemoteError;
  expectRoute("failed meanwhile", &w, &t, (struct expect)REFUSED(ncclRemoteError, 0, "CSLHRWKG"));
  after = w;
  after.gone = 1;
  expectRoute("destroyed meanwhile", &w, &t, (struct expect)REFUSED(ncclInvalidUsage, 0, "CSLHRWKG"));
  after = w;
  after.stillOurs = 0;
  expectRoute("detached meanwhile", &w, &t, (struct expect)FWD_ORDERED("CSLHRWKG"));
  after = w;
  after.peersLive = 0;
  expectRoute("aborted meanwhile", &w, &t,
              (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_ISSUE, 0, SYMM_ALGO_PUSH, "CSLHRWKG"});
  afterExchange = NULL;
}

/* ncclplain: forwarded and ordered like nccl (remembered outside groups), with the algorithm in
 * the route so that the enqueue path gives the real NCCL the windows' aliases. Chosen by the
 * 4-rank windowed rows at large sizes and by each collective's override, under any CTA policy
 * (it is NCCL's) and for fp8 on mixed architectures (only our kernels lack those). */
static void testNcclPlain(void) {
  struct symmRouteFacts w = world();
  w.nranks = 4;
  w.registered = 1;
  struct symmTask t = allReduce(4 * MiB); /* 8 MiB of bf16 */
  const struct expect plain = {K_FWD, X, X, 1, X, 1, SYMM_ALGO_NCCLPLAIN, "CSLHRW"};
  expectRoute("4 ranks, windows, 8 MiB", &w, &t, plain);
  t = allReduce(2 * MiB); /* 4 MiB: NCCL's symmetric kernels tie there */
  expectRoute("4 ranks, windows, 4 MiB", &w, &t, (struct expect)FWD_ORDERED("CSLHRW"));
  t = task(SYMM_COLL_ALLGATHER, 64 * MiB, ncclBfloat16, ncclSum); /* 512 MiB out */
  expectRoute("4 ranks, windowed all-gather, 512 MiB", &w, &t, plain);
  t.count = 32 * MiB; /* 256 MiB: NCCL on the windows */
  expectRoute("4 ranks, windowed all-gather, 256 MiB", &w, &t, (struct expect)FWD_ORDERED("CSLHRW"));
  w.registered = 0;
  t = allReduce(4 * MiB);
  expectRoute("4 ranks, plain buffers, 8 MiB", &w, &t, (struct expect)FWD_ORDERED("CSLHRW"));
  /* Before staging: forwarded as nccl is (not remembered: ours cannot run now), never building
   * staging. */
  w.registered = 1;
  w.peersLive = 0;
  w.needsStaging = 1;
  expectRoute("before staging", &w, &t,
              (struct expect){K_FWD, X, X, 1, X, 0, SYMM_ALGO_NCCLPLAIN, "CSLHRW"});
  w.groupDepth = 1; /* inside a group: nothing remembered */
  expectRoute("in a group", &w, &t, (struct expect){K_FWD, X, X, 1, X, 0, SYMM_ALGO_NCCLPLAIN, "CSLHYW"});
  /* A remembered ncclplain forward is repeated as such (the aliases are looked up again). */
  w = world();
  w.nranks = 4;
  w.registered = 1;
  char asked[32];
  const struct symmRoute first = drive(&w, &t, asked);
  w.repeat = &first;
  const struct symmRoute again = drive(&w, &t, asked);
  CHECK_EQ_STR(asked, "CSLHR");
  CHECK_EQ_INT(again.kind, SYMM_ROUTE_FORWARD);
  CHECK_EQ_INT(again.algo, SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_INT(again.ordered, 1);
  CHECK_EQ_INT(again.repeated, 1);
  /* Forced, on every collective and world; under NCCL_CTA_POLICY_ZERO too. */
  static const char* const knobs[SYMM_NCOLLS] = {
      "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO"};
  for (int c = 0; c < SYMM_NCOLLS; c++) {
    setenv(knobs[c], "ncclplain", 1);
    symmParamResetAll();
    symmTunerResetForTests();
    for (int n = 2; n <= 8; n += 3) {
      w = world();
      w.nranks = n;
      t = task((enum symmColl)c, 1024, ncclBfloat16, ncclSum);
      expectRoute("forced", &w, &t, plain);
      w.config.ctaPolicy = NCCL_CTA_POLICY_ZERO;
      expectRoute("forced, zero CTAs", &w, &t, plain);
      w.config.ctaPolicy = NCCL_CTA_POLICY_DEFAULT;
      w.arch = 0;
      t.datatype = ncclFloat8e4m3;
      expectRoute("forced, fp8 on mixed archs", &w, &t, plain);
    }
    /* Count 0 and NULL buffers are NCCL's as ever. */
    t = task((enum symmColl)c, 0, ncclBfloat16, ncclSum);
    expectRoute("forced, count 0", &w, &t, (struct expect)FWD_PLAIN("CSLHR"));
    t.count = 4;
    t.sendbuff = NULL;
    expectRoute("forced, NULL buffer", &w, &t, (struct expect)FWD_ORDERED("CS"));
    unsetenv(knobs[c]);
    symmParamResetAll();
    symmTunerResetForTests();
  }
}

/* symmPlainBuffers over a fake window table: [base, base + 1 MiB) has an alias at alias + the
 * same offset; [noAlias, noAlias + 1 MiB) is a window without one; everything else is none. */
static char windowMem[2][1 << 20], aliasMem[1 << 20];
static int lookups;

static int fakeAlias(const void* ctx, const void* ptr, size_t bytes, void** alias) {
  CHECK(ctx == (const void*)windowMem);
  lookups++;
  const uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)windowMem[0];
  if (p < base || bytes > sizeof(windowMem[0]) || p - base > sizeof(windowMem[0]) - bytes) return 0;
  *alias = aliasMem + (p - base);
  return 1;
}

static void testPlainBuffers(void) {
  char* win = windowMem[0];
  char* other = windowMem[1]; /* no alias */
  const int n = 4;
  struct symmTask in, out;
  /* All-reduce out of place: each buffer on its own. */
  in = task(SYMM_COLL_ALLREDUCE, 1000, ncclBfloat16, ncclSum);
  in.sendbuff = win + 64;
  in.recvbuff = win + 4096;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 2);
  CHECK(out.sendbuff == aliasMem + 64 && out.recvbuff == aliasMem + 4096);
  CHECK(out.count == in.count && out.coll == in.coll && out.datatype == in.datatype);
  /* One in a window with an alias, one not: only that one. */
  in.recvbuff = other;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 1);
  CHECK(out.sendbuff == aliasMem + 64 && out.recvbuff == other);
  in.sendbuff = other + 8;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 0);
  CHECK(memcmp(&out, &in, sizeof(in)) == 0);
  /* A buffer running past the window's end is not in it. */
  in.sendbuff = win + sizeof(windowMem[0]) - 1000;
  in.recvbuff = win;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 1);
  CHECK(out.sendbuff == in.sendbuff && out.recvbuff == aliasMem);
  /* In place: one lookup, both move together (still in place for NCCL). */
  in.sendbuff = in.recvbuff = win + 512;
  lookups = 0;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 2);
  CHECK_EQ_INT(lookups, 1);
  CHECK(out.sendbuff == out.recvbuff && out.recvbuff == aliasMem + 512);
  /* All-gather in place: the input is rank 2's slice of the output. */
  in = task(SYMM_COLL_ALLGATHER, 1001, ncclBfloat16, ncclSum);
  in.recvbuff = win + 2;
  in.sendbuff = win + 2 + 2 * 1001 * 2;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 2);
  CHECK(out.recvbuff == aliasMem + 2 && out.sendbuff == aliasMem + 2 + 2 * 1001 * 2);
  /* ... whose output runs past the window: neither moves, although the input alone lies in it
   * (NCCL must still see the call in place). */
  in.recvbuff = win + sizeof(windowMem[0]) - 2 * 1001 * 2;
  in.sendbuff = (char*)in.recvbuff + 1001 * 2;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 0);
  CHECK(out.sendbuff == in.sendbuff && out.recvbuff == in.recvbuff);
  /* Out of place: the 4x larger output is the one looked up for its whole size. */
  in.sendbuff = win;
  in.recvbuff = win + sizeof(windowMem[0]) - 4 * 1001 * 2 + 2;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 1);
  CHECK(out.sendbuff == aliasMem && out.recvbuff == in.recvbuff);
  /* Reduce-scatter in place: the output is rank 3's slice of the input. */
  in = task(SYMM_COLL_REDUCESCATTER, 333, ncclFloat32, ncclSum);
  in.sendbuff = win + 4;
  in.recvbuff = win + 4 + 3 * 333 * 4;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 2);
  CHECK(out.sendbuff == aliasMem + 4 && out.recvbuff == aliasMem + 4 + 3 * 333 * 4);
  /* Out of place across the two windows. */
  in.recvbuff = other;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 1);
  CHECK(out.sendbuff == aliasMem + 4 && out.recvbuff == other);
  /* A NULL buffer is never looked up (the route gives such calls to NCCL untranslated). */
  in.recvbuff = NULL;
  lookups = 0;
  CHECK_EQ_INT(symmPlainBuffers(&in, n, fakeAlias, windowMem, &out), 1);
  CHECK_EQ_INT(lookups, 1);
  CHECK(out.recvbuff == NULL);
}

/* NCCL's rule for a group: one communicator's calls use streams all uncaptured or all in one
 * capture (symmGroupUseStream decides; the route refuses what breaks it and fails the group). */
static void testGroupStreams(void) {
  struct symmRouteFacts w = world();
  struct symmTask t = allReduce(1024);
  w.groupDepth = 1;
  expectRoute("group, streams agree", &w, &t,
              (struct expect){K_LAUNCH, X, X, X, SYMM_WHEN_GROUP_END, 0, SYMM_ALGO_LAMPORT, "CSLHYW"});
  w.groupStream = ncclInvalidUsage;
  expectRoute("group, captured and uncaptured", &w, &t,
              (struct expect)REFUSED(ncclInvalidUsage, 1, "CSLHY"));
  w.groupStream = ncclUnhandledCudaError; /* the stream's capture could not be read */
  expectRoute("group, capture unreadable", &w, &t,
              (struct expect)REFUSED(ncclUnhandledCudaError, 1, "CSLHY"));
  /* The communicator's failure comes first, as NCCL reports it first. */
  w.groupStream = ncclInvalidUsage;
  w.health = ncclRemoteError;
  expectRoute("group, failed communicator", &w, &t,
              (struct expect)REFUSED(ncclRemoteError, 1, "CSLH"));
  w.health = ncclSuccess;
  /* A communicator that was never ours: asked all the same (one rule for every call), after
   * its failure. */
  w.groupStream = ncclInvalidUsage;
  w.hasTransport = 0;
  expectRoute("group, never ours", &w, &t, (struct expect)REFUSED(ncclInvalidUsage, 1, "CSY"));
  w.failure = ncclRemoteError;
  expectRoute("group, never ours, failed", &w, &t,
              (struct expect)REFUSED(ncclRemoteError, 1, "CS"));
  w = world();
  w.groupDepth = 1;
  w.groupStream = ncclInvalidUsage;
  /* Empty calls: NCCL drops them before it looks at the stream. */
  t = allReduce(0);
  expectRoute("group, empty call", &w, &t, (struct expect)FWD_PLAIN("CSLH"));
  /* Outside a group: never asked. */
  w.groupDepth = 0;
  t = allReduce(1024);
  expectRoute("no group", &w, &t, (struct expect)LAUNCH_NOW(SYMM_ALGO_LAMPORT, "CSLHRW"));
}

int main(void) {
  for (const char* const* k = (const char* const[]){"SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO",
                                                    "SYMMCOLL_REDUCESCATTER_ALGO", "SYMMCOLL_PDL",
                                                    "SYMMCOLL_MULTIMEM", "SYMMCOLL_MULTIMEM_EMULATE",
                                                    "SYMMCOLL_ZERO_COPY_MAX_BYTES",
                                                    "SYMMCOLL_ZERO_COPY_MIN_BYTES",
                                                    "SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES",
                                                    "SYMMCOLL_TUNING_FILE", NULL};
       *k != NULL; k++)
    unsetenv(*k);
  symmParamResetAll();
  (void)symmLogLevel();
  testEntryAndCommunicator();
  testArguments();
  testParked();
  testCheckPointers();
  testRepeatsAndGroups();
  testStaging();
  testPolicies();
  testLaunchDetails();
  testGraphZeroCopy();
  testIssued();
  testLargestStaged();
  testNcclPlain();
  testPlainBuffers();
  testGroupStreams();
  return harnessReport("core_route");
}
