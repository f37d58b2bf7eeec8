/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test of the pure decisions of the host path: stream order plans, the stream queries'
 * driver-then-runtime order, the failure state machine, argument checks, grid bounds and CTA
 * policy, config reading, knob agreement, socket names. No GPU, no NCCL. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algos.h"
#include "cudriver.h"
#include "comm.h"
#include "debug.h"
#include "eligibility.h"
#include "enqueue.h"
#include "failure.h"
#include "fdpass.h"
#include "harness.h"
#include "order.h"
#include "param.h"

static struct symmCapture eager(unsigned long long streamId) {
  return (struct symmCapture){.streamId = streamId};
}
/* A captured stream whose next node depends on `ndeps` of the nodes at `deps`. */
static struct symmCapture captured(unsigned long long id, const cudaGraphNode_t* deps, size_t ndeps) {
  return (struct symmCapture){.active = 1, .id = id, .deps = deps, .ndeps = ndeps};
}
/* Stand-ins for graph nodes: the plans only compare them. */
static cudaGraphNode_t fakeNode(int i) { return (cudaGraphNode_t)(uintptr_t)(0x1000 + 16 * i); }

/* What symmOrderAfter does to the state, without CUDA; `tail`: the stream's dependencies after
 * a captured operation. */
static void after(struct symmOrder* o, const struct symmCapture* cap, cudaGraphNode_t tail) {
  const unsigned plan = symmOrderAfterPlan(o, cap);
  if (plan & SYMM_ORDER_TRACK_TAIL) CHECK(symmOrderNoteTail(o, cap->id, &tail, 1) != NULL);
  if (plan & SYMM_ORDER_RECORD) {
    o->lastStreamId = cap->streamId;
    o->issued = 1;
  }
}

static void testOrder(void) {
  struct symmOrder o;
  memset(&o, 0, sizeof(o));
  struct symmCapture a = eager(11), b = eager(12);
  /* First operation: nothing to wait for; every eager one records afterwards. */
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &a), 0);
  CHECK_EQ_INT(symmOrderAfterPlan(&o, &a), SYMM_ORDER_RECORD);
  after(&o, &a, NULL);
  /* Same stream, never captured: no CUDA call at all before the launch. */
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &a), 0);
  /* Another stream waits for the previous operation. */
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &b), SYMM_ORDER_WAIT);
  after(&o, &b, NULL);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &b), 0);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &a), SYMM_ORDER_WAIT);
  /* A stream handle reused after cudaStreamDestroy has another id: it waits. */
  struct symmCapture reused = eager(13);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &reused), SYMM_ORDER_WAIT);

  /* Captures: the first operation of a capture waits externally (at each replay: whatever was
   * issued before the replay), and the capture gets one record node at its end. */
  const cudaGraphNode_t k1 = fakeNode(1), k2 = fakeNode(2), user = fakeNode(3);
  struct symmCapture g1 = captured(100, NULL, 0);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &g1), SYMM_ORDER_WAIT_EXTERNAL);
  CHECK_EQ_INT(symmOrderAfterPlan(&o, &g1), SYMM_ORDER_TRACK_TAIL | SYMM_ORDER_RECORD_SINK);
  after(&o, &g1, k1);
  /* The next one on the capture stream right behind it: nothing, no node and no edge. */
  struct symmCapture g1Next = captured(100, &k1, 1);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &g1Next), 0);
  after(&o, &g1Next, k2);
  /* Behind work of the user's, or on another stream of the same capture: an edge to our tail. */
  struct symmCapture g1User = captured(100, &user, 1), g1Forked = captured(100, NULL, 0);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &g1User), SYMM_ORDER_JOIN_TAIL);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &g1Forked), SYMM_ORDER_JOIN_TAIL);
  const cudaGraphNode_t both[2] = {user, k2};
  struct symmCapture g1Joined = captured(100, both, 2);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &g1Joined), 0);
  /* After any capture an eager operation always waits (a replay may have run since), even on
   * the stream of the previous eager one. */
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &b), SYMM_ORDER_WAIT);
  after(&o, &b, NULL);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &b), SYMM_ORDER_WAIT);

  /* Six captures interleaved: each keeps its own tail (none falls back to an external wait). */
  enum { NCAP = 6 };
  for (int round = 0; round < 3; round++) {
    for (int c = 0; c < NCAP; c++) {
      const unsigned long long id = 200 + (unsigned long long)c;
      const cudaGraphNode_t prev = fakeNode(100 + 10 * c + round - 1), next = fakeNode(100 + 10 * c + round);
      struct symmCapture g = captured(id, round == 0 ? NULL : &prev, round == 0 ? 0 : 1);
      CHECK_EQ_INT(symmOrderBeforePlan(&o, &g), round == 0 ? SYMM_ORDER_WAIT_EXTERNAL : 0);
      /* A tail of another capture is never this one's. */
      const cudaGraphNode_t other = fakeNode(100 + 10 * ((c + 1) % NCAP) + round - 1);
      struct symmCapture wrong = captured(id, &other, 1);
      if (round > 0) CHECK_EQ_INT(symmOrderBeforePlan(&o, &wrong), SYMM_ORDER_JOIN_TAIL);
      after(&o, &g, next);
    }
  }
  CHECK_EQ_INT(symmOrderCaptureCount(&o), 1 + NCAP);
  symmOrderDestroy(&o);
  CHECK_EQ_INT(symmOrderCaptureCount(&o), 0);

  /* NCCL_GRAPH_MIXING_SUPPORT=0: graphs get no event node at all, order inside them stays. */
  memset(&o, 0, sizeof(o));
  o.noMixing = 1;
  struct symmCapture m = captured(300, NULL, 0);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &m), 0);
  CHECK_EQ_INT(symmOrderAfterPlan(&o, &m), SYMM_ORDER_TRACK_TAIL);
  after(&o, &m, k1);
  struct symmCapture mUser = captured(300, &user, 1);
  CHECK_EQ_INT(symmOrderBeforePlan(&o, &mUser), SYMM_ORDER_JOIN_TAIL);
  symmOrderDestroy(&o);

  /* The knob as NCCL reads it. */
  unsetenv("NCCL_GRAPH_MIXING_SUPPORT");
  CHECK_EQ_INT(symmOrderMixingOff(), 0);
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 1);
  CHECK_EQ_INT(symmOrderMixingOff(), 1);
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "1", 1);
  CHECK_EQ_INT(symmOrderMixingOff(), 0);
  /* As NCCL_PARAM reads it: no number is 0 (off), text after a number is ignored. */
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "false", 1);
  CHECK_EQ_INT(symmOrderMixingOff(), 1);
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "0x1 on", 1);
  CHECK_EQ_INT(symmOrderMixingOff(), 0);
  unsetenv("NCCL_GRAPH_MIXING_SUPPORT");
}

static struct symmFailure shared;
static int firstMoves;
static void* racer(void* arg) {
  const uint32_t bits = (uint32_t)(uintptr_t)arg;
  if (symmFailureRecord(&shared, bits)) __atomic_add_fetch(&firstMoves, 1, __ATOMIC_RELAXED);
  return NULL;
}

static void testFailure(void) {
  CHECK_EQ_INT(symmFailureResult(0), ncclSuccess);
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_PEER), ncclRemoteError);
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_DEADLINE), ncclRemoteError);
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_LAUNCH), ncclUnhandledCudaError);
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_BAD_DESC), ncclInternalError);
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_ABORT), ncclInvalidUsage);
  /* A peer's failure is what every rank reports, whatever else happened here. */
  CHECK_EQ_INT(symmFailureResult(SYMM_ERR_PEER | SYMM_ERR_LAUNCH), ncclRemoteError);

  struct symmFailure f;
  memset(&f, 0, sizeof(f));
  CHECK_EQ_INT(symmFailureGet(&f), ncclSuccess);
  CHECK_EQ_INT(symmFailureRecord(&f, 0), 0);
  CHECK_EQ_INT(symmFailureGet(&f), ncclSuccess);
  CHECK_EQ_INT(symmFailureRecord(&f, SYMM_ERR_LAUNCH), 1);
  CHECK_EQ_INT(symmFailureGet(&f), ncclUnhandledCudaError);
  /* Failed stays failed with its first result; later reasons are only or-ed in. */
  CHECK_EQ_INT(symmFailureRecord(&f, SYMM_ERR_PEER), 0);
  CHECK_EQ_INT(symmFailureGet(&f), ncclUnhandledCudaError);
  CHECK_EQ_INT(f.bits, SYMM_ERR_LAUNCH | SYMM_ERR_PEER);

  /* Exactly one of many threads moves it. */
  pthread_t threads[8];
  for (int i = 0; i < 8; i++)
    pthread_create(&threads[i], NULL, racer, (void*)(uintptr_t)(i & 1 ? SYMM_ERR_PEER : SYMM_ERR_LAUNCH));
  for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
  CHECK_EQ_INT(firstMoves, 1);
  CHECK(symmFailureGet(&shared) == ncclRemoteError || symmFailureGet(&shared) == ncclUnhandledCudaError);

  /* ncclCommGetAsyncError: a real error wins, then ours, then the real state. */
  CHECK_EQ_INT(symmFailureCombine(ncclSystemError, ncclRemoteError), ncclSystemError);
  CHECK_EQ_INT(symmFailureCombine(ncclSuccess, ncclRemoteError), ncclRemoteError);
  CHECK_EQ_INT(symmFailureCombine(ncclInProgress, ncclRemoteError), ncclRemoteError);
  CHECK_EQ_INT(symmFailureCombine(ncclInProgress, ncclSuccess), ncclInProgress);
  CHECK_EQ_INT(symmFailureCombine(ncclSuccess, ncclInProgress), ncclInProgress);
  CHECK_EQ_INT(symmFailureCombine(ncclSuccess, ncclSuccess), ncclSuccess);
}

static ncclResult_t args(enum symmColl coll, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         int nranks, int arch, int* ncclDecides) {
  static float buf[4];
  const struct symmTask t = {.coll = coll, .sendbuff = buf, .recvbuff = buf, .count = count,
                             .datatype = dt, .op = op, .root = -1};
  return symmArgsCheck(&t, nranks, arch, ncclDecides);
}

/* NCCL refuses it itself: forwarded untouched (SYMM_NCCL_REFUSES), with a reason for our log. */
static void expectNcclRefuses(enum symmColl coll, ncclDataType_t dt, ncclRedOp_t op, int arch) {
  int nccl = -1;
  CHECK_EQ_INT(args(coll, 4, dt, op, 2, arch, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_NCCL_REFUSES);
  const struct symmTask t = {.coll = coll, .count = 4, .datatype = dt, .op = op, .root = -1};
  CHECK(symmArgsProblem(&t, arch) != NULL);
}

static void testArgs(void) {
  int nccl = -1;
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 4, ncclFloat32, ncclSum, 2, 90, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_OURS_MAY_RUN);
  expectNcclRefuses(SYMM_COLL_ALLREDUCE, (ncclDataType_t)ncclNumTypes, ncclSum, 90);
  expectNcclRefuses(SYMM_COLL_ALLREDUCE, (ncclDataType_t)-1, ncclSum, 90);
  expectNcclRefuses(SYMM_COLL_REDUCESCATTER, ncclFloat32, (ncclRedOp_t)-1, 90);
  expectNcclRefuses(SYMM_COLL_ALLGATHER, (ncclDataType_t)99, ncclSum, 90);
  /* All-gather ignores the op. */
  CHECK_EQ_INT(args(SYMM_COLL_ALLGATHER, 4, ncclFloat32, (ncclRedOp_t)-1, 2, 90, &nccl), ncclSuccess);
  /* Byte sizes that overflow: count*esize, and nranks*count*esize for all-gather/reduce-scatter. */
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, SIZE_MAX / 2, ncclFloat32, ncclSum, 2, 90, &nccl),
               ncclInvalidArgument);
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, SIZE_MAX, ncclInt8, ncclSum, 2, 90, &nccl), ncclSuccess);
  CHECK_EQ_INT(args(SYMM_COLL_ALLGATHER, SIZE_MAX / 4, ncclInt8, ncclSum, 8, 90, &nccl),
               ncclInvalidArgument);
  CHECK_EQ_INT(args(SYMM_COLL_REDUCESCATTER, SIZE_MAX / 16, ncclInt8, ncclSum, 8, 90, &nccl),
               ncclSuccess);
  /* fp8 reductions need sm_90 (unknown arch: left to NCCL); an fp8 all-gather is fine. */
  expectNcclRefuses(SYMM_COLL_ALLREDUCE, ncclFloat8e4m3, ncclSum, 80);
  expectNcclRefuses(SYMM_COLL_REDUCESCATTER, ncclFloat8e5m2, ncclMax, 86);
  CHECK_EQ_INT(args(SYMM_COLL_ALLGATHER, 4, ncclFloat8e4m3, ncclSum, 2, 80, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_OURS_MAY_RUN);
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 4, ncclFloat8e4m3, ncclSum, 2, 0, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_OURS_MAY_RUN);
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 4, ncclFloat8e4m3, ncclSum, 2, 90, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_OURS_MAY_RUN);
  /* Count 0 of fp8 below sm_90 is no error (NCCL drops empty calls first): NCCL runs it. */
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 0, ncclFloat8e4m3, ncclSum, 2, 80, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_NCCL_RUNS);
  /* User-defined ops and empty calls are the real NCCL's to judge. */
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 4, ncclFloat32, (ncclRedOp_t)ncclNumOps, 2, 90, &nccl),
               ncclSuccess);
  CHECK_EQ_INT(nccl, SYMM_NCCL_RUNS);
  CHECK_EQ_INT(args(SYMM_COLL_ALLREDUCE, 0, ncclFloat32, ncclSum, 2, 90, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, 1);
  const struct symmTask nullBuf = {.coll = SYMM_COLL_ALLREDUCE, .count = 4, .datatype = ncclFloat32,
                                   .op = ncclSum};
  CHECK_EQ_INT(symmArgsCheck(&nullBuf, 2, 90, &nccl), ncclSuccess);
  CHECK_EQ_INT(nccl, 1);
}

static void testGridAndPolicy(void) {
  struct symmCommConfig c = {.blocking = 1, .ctaPolicy = NCCL_CTA_POLICY_DEFAULT};
  int maxB = -1, minB = -1;
  symmGridBounds(&c, &maxB, &minB);
  CHECK_EQ_INT(maxB, 0);
  CHECK_EQ_INT(minB, 0);
  c.maxCTAs = 16;
  c.minCTAs = 4;
  symmGridBounds(&c, &maxB, &minB);
  CHECK_EQ_INT(maxB, 16);
  CHECK_EQ_INT(minB, 4);
  c.ctaPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  symmGridBounds(&c, &maxB, &minB);
  CHECK_EQ_INT(maxB, SYMM_EFFICIENCY_BLOCKS);
  CHECK_EQ_INT(minB, 4);
  c.maxCTAs = 2;
  symmGridBounds(&c, &maxB, &minB);
  CHECK_EQ_INT(maxB, 2);
  CHECK_EQ_INT(minB, 2);
  for (int a = 0; a < SYMM_NALGOS; a++) {
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_DEFAULT, (enum symmAlgo)a), 1);
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_EFFICIENCY, (enum symmAlgo)a), 1);
    CHECK_EQ_INT(symmPolicyAllows(NCCL_CTA_POLICY_ZERO, (enum symmAlgo)a),
                 a == SYMM_ALGO_NCCL || a == SYMM_ALGO_NCCLPLAIN || a == SYMM_ALGO_COPYENGINE);
  }
}

static void testConfig(void) {
  unsetenv("NCCL_COMM_BLOCKING");
  unsetenv("NCCL_MAX_CTAS");
  unsetenv("NCCL_MIN_CTAS");
  unsetenv("NCCL_CTA_POLICY");
  struct symmCommConfig out;
  symmConfigRead(NULL, NULL, &out);
  CHECK_EQ_INT(out.blocking, 1);
  CHECK_EQ_INT(out.maxCTAs, 0);
  CHECK_EQ_INT(out.ctaPolicy, NCCL_CTA_POLICY_DEFAULT);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.maxCTAs = 24;
  config.minCTAs = 2;
  config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  symmConfigRead(&config, NULL, &out);
  CHECK_EQ_INT(out.blocking, 0);
  CHECK_EQ_INT(out.maxCTAs, 24);
  CHECK_EQ_INT(out.minCTAs, 2);
  CHECK_EQ_INT(out.ctaPolicy, NCCL_CTA_POLICY_ZERO);
  /* A split without a config inherits its parent's. */
  struct symmCommConfig child;
  symmConfigRead(NULL, &out, &child);
  CHECK_EQ_INT(child.blocking, 0);
  CHECK_EQ_INT(child.maxCTAs, 24);
  CHECK_EQ_INT(child.ctaPolicy, NCCL_CTA_POLICY_ZERO);
  /* A struct from an older NCCL has no CTAPolicy: the default. */
  config.version = NCCL_VERSION(2, 20, 0);
  symmConfigRead(&config, NULL, &out);
  CHECK_EQ_INT(out.ctaPolicy, NCCL_CTA_POLICY_DEFAULT);
  CHECK_EQ_INT(out.maxCTAs, 24);
  config.version = NCCL_VERSION(2, 28, 0);
  /* NCCL's environment overrides win, with its clamps. */
  setenv("NCCL_MAX_CTAS", "100", 1);
  setenv("NCCL_MIN_CTAS", "80", 1);
  setenv("NCCL_CTA_POLICY", "1", 1);
  symmConfigRead(&config, NULL, &out);
  CHECK_EQ_INT(out.maxCTAs, 64);
  CHECK_EQ_INT(out.minCTAs, 64);
  CHECK_EQ_INT(out.ctaPolicy, NCCL_CTA_POLICY_EFFICIENCY);
  setenv("NCCL_CTA_POLICY", "7", 1); /* invalid: the default, as NCCL does */
  symmConfigRead(&config, NULL, &out);
  CHECK_EQ_INT(out.ctaPolicy, NCCL_CTA_POLICY_DEFAULT);
  unsetenv("NCCL_MAX_CTAS");
  unsetenv("NCCL_MIN_CTAS");
  unsetenv("NCCL_CTA_POLICY");
}

static void testKnobs(void) {
  struct symmPeerRecord recs[4];
  memset(recs, 0, sizeof(recs));
  for (int r = 0; r < 4; r++) {
    recs[r].knobCount = 3;
    for (int k = 0; k < 3; k++) recs[r].knobHashes[k] = 0x1000u + (uint64_t)k;
    recs[r].tuningFileHash = 77;
  }
  int rank = 99;
  CHECK_EQ_INT(symmKnobMismatch(recs, 4, &rank), -1);
  recs[2].knobHashes[1] ^= 1;
  CHECK_EQ_INT(symmKnobMismatch(recs, 4, &rank), 1);
  CHECK_EQ_INT(rank, 2);
  recs[2].knobHashes[1] ^= 1;
  recs[3].tuningFileHash = 78;
  CHECK_EQ_INT(symmKnobMismatch(recs, 4, &rank), 3);
  CHECK_EQ_INT(rank, 3);
  recs[3].tuningFileHash = 77;
  recs[1].knobCount = 2; /* another build */
  CHECK_EQ_INT(symmKnobMismatch(recs, 4, &rank), 3);
  CHECK_EQ_INT(rank, 1);
}

static void testSocketNames(void) {
  /* SipHash-2-4 reference vector (key 00..0f, message 00..0e). */
  uint8_t key[16], msg[15];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
  CHECK(symmSipHash24(key, msg, sizeof(msg)) == 0xa129ca6149be45e5ull);
  CHECK(symmSipHash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);

  struct symmFdRendezvous rv;
  memset(&rv, 0, sizeof(rv));
  for (int i = 0; i < SYMM_SECRET_BYTES; i++) rv.secret[i] = (uint8_t)(i * 37 + 11);
  char a[108], b[108], c[108], d[108];
  rv.tag = 0;
  symmFdSocketName(&rv, 0, a, sizeof(a));
  symmFdSocketName(&rv, 1, b, sizeof(b));
  rv.tag = 1;
  symmFdSocketName(&rv, 0, c, sizeof(c));
  /* Stable, distinct per (tag, rank), and not sharing a visible prefix beyond our own. */
  rv.tag = 0;
  symmFdSocketName(&rv, 0, d, sizeof(d));
  CHECK_EQ_STR(a, d);
  CHECK(strcmp(a, b) != 0 && strcmp(a, c) != 0 && strcmp(b, c) != 0);
  CHECK_EQ_INT(strncmp(a, "symmcoll-", 9), 0);
  CHECK(memcmp(a + 9, b + 9, 8) != 0 && memcmp(a + 9, c + 9, 8) != 0);
  /* No byte of the secret appears in the name. */
  char hexByte[3];
  snprintf(hexByte, sizeof(hexByte), "%02x", rv.secret[0]);
  char secretHex[2 * 8 + 1];
  for (int i = 0; i < 8; i++) snprintf(secretHex + 2 * i, 3, "%02x", rv.secret[i]);
  CHECK(strstr(a, secretHex) == NULL);
  /* The second half (the authenticator) does not change the name; the first half does. */
  rv.secret[SYMM_SECRET_BYTES - 1] ^= 0x5a;
  symmFdSocketName(&rv, 0, d, sizeof(d));
  CHECK_EQ_STR(a, d);
  rv.secret[0] ^= 0x5a;
  symmFdSocketName(&rv, 0, d, sizeof(d));
  CHECK(strcmp(a, d) != 0);
}


/* ---- stream queries: the driver first, the runtime when the driver refuses ------------------ */

static int driverCalls;
static CUstreamCaptureStatus stubStatus;
static CUresult stubResult;

static CUresult stubCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                CUgraph* graph, const CUgraphNode** deps,
                                const CUgraphEdgeData** edges, size_t* ndeps) {
  (void)s; (void)deps; (void)edges; (void)ndeps;
  driverCalls++;
  if (stubResult != CUDA_SUCCESS) return stubResult;
  *status = stubStatus;
  *id = stubStatus == CU_STREAM_CAPTURE_STATUS_ACTIVE ? 42 : 0;
  *graph = stubStatus == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (CUgraph)0x1000 : NULL;
  return CUDA_SUCCESS;
}

static CUresult stubStreamId(CUstream s, unsigned long long* id) {
  (void)s;
  driverCalls++;
  *id = 7;
  return CUDA_SUCCESS;
}

static void testStreamQueries(void) {
  const struct symmCuDriver saved = symmCu;
  symmCu.p_cuStreamGetCaptureInfo = stubCaptureInfo;
  symmCu.p_cuStreamGetId = stubStreamId;
  struct symmCapture cap;
  /* Capturing: the driver's answer, and no stream id (refused inside a capture). */
  stubResult = CUDA_SUCCESS;
  stubStatus = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  driverCalls = 0;
  CHECK_EQ_INT(symmCaptureOf(NULL, &cap), ncclSuccess);
  CHECK_EQ_INT(cap.active, 1);
  CHECK(cap.id == 42 && cap.graph == (cudaGraph_t)0x1000 && cap.streamId == 0);
  CHECK_EQ_INT(driverCalls, 1);
  /* Not capturing: the stream id, from the driver too. */
  stubStatus = CU_STREAM_CAPTURE_STATUS_NONE;
  driverCalls = 0;
  CHECK_EQ_INT(symmCaptureOf(NULL, &cap), ncclSuccess);
  CHECK(cap.active == 0 && cap.id == 0 && cap.graph == NULL && cap.streamId == 7);
  CHECK_EQ_INT(driverCalls, 2);
  /* An invalidated capture is refused. */
  stubStatus = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  CHECK_EQ_INT(symmCaptureOf(NULL, &cap), ncclUnhandledCudaError);
  /* The driver refuses: the runtime answers (with a GPU, the legacy stream is not capturing and
   * the stream id comes from the driver again; without one, an error), never the driver's
   * error. */
  stubResult = CUDA_ERROR_INVALID_CONTEXT;
  driverCalls = 0;
  int devices = 0;
  const int gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  const ncclResult_t res = symmCaptureOf(NULL, &cap);
  CHECK_EQ_INT(driverCalls, gpu ? 2 : 1);
  CHECK_EQ_INT(res, gpu ? ncclSuccess : ncclUnhandledCudaError);
  if (gpu) CHECK(cap.active == 0 && cap.streamId == 7);
  symmCu = saved;
}

/* NCCL's configuration file, loaded before our first read of an NCCL_* variable (main() names
 * it before anything reads one): NAME=VALUE lines, '#' lines and lines without '=' skipped,
 * variables already set kept, values read as NCCL_PARAM reads them. */
static char confPath[64];
static void writeConfFile(void) {
  snprintf(confPath, sizeof(confPath), "/tmp/symmcoll_conf_XXXXXX");
  const int fd = mkstemp(confPath);
  CHECK(fd >= 0);
  if (fd < 0) return;
  static const char text[] =
      "NCCL_SYMMCOLL_TEST_CONF=7\n"
      "#NCCL_SYMMCOLL_TEST_COMMENT=1\n"
      "NCCL_SYMMCOLL_TEST_NOVALUE\n"
      "NCCL_SYMMCOLL_TEST_KEEP=2\n"
      "NCCL_SYMMCOLL_TEST_HEX=0x10 and text\n"
      "NCCL_SYMMCOLL_TEST_LAST=3";
  CHECK_EQ_INT((int)write(fd, text, sizeof(text) - 1), (int)sizeof(text) - 1);
  close(fd);
  setenv("NCCL_CONF_FILE", confPath, 1);
  setenv("NCCL_SYMMCOLL_TEST_KEEP", "5", 1);
}
static void testConfFile(void) {
  CHECK_EQ_INT((int)symmNcclParam("NCCL_SYMMCOLL_TEST_CONF", -1), 7);
  CHECK(symmNcclGetEnv("NCCL_SYMMCOLL_TEST_COMMENT") == NULL);
  CHECK(symmNcclGetEnv("NCCL_SYMMCOLL_TEST_NOVALUE") == NULL);
  CHECK_EQ_INT((int)symmNcclParam("NCCL_SYMMCOLL_TEST_KEEP", -1), 5);
  CHECK_EQ_INT((int)symmNcclParam("NCCL_SYMMCOLL_TEST_HEX", -1), 16);
  CHECK_EQ_INT((int)symmNcclParam("NCCL_SYMMCOLL_TEST_LAST", -1), 3);
  CHECK_EQ_INT((int)symmNcclParam("NCCL_SYMMCOLL_TEST_UNSET", -1), -1);
  unlink(confPath);
  /* Names fold case in ASCII only, whatever the locale. */
  CHECK_EQ_INT(symmAsciiCaseEqual("NCCLPLAIN", "ncclplain"), 1);
  CHECK_EQ_INT(symmAsciiCaseEqual("MultiMem", "multimem"), 1);
  CHECK_EQ_INT(symmAsciiCaseEqual("ncclplai", "ncclplain"), 0);
  CHECK_EQ_INT(symmAsciiCaseEqual("ncclplain", "ncclplai"), 0);
  CHECK_EQ_INT(symmAsciiCaseEqual("", ""), 1);
  CHECK_EQ_INT(symmAsciiCaseEqual("\xc4\xb0", "\xc4\xb1"), 0); /* not ASCII: compared as is */
  CHECK_EQ_INT(symmAlgoParse("NCCLPLAIN"), SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_INT(symmAlgoParse("AUTO"), -1);
}

int main(void) {
  writeConfFile();
  (void)symmLogLevel();
  testConfFile();
  testOrder();
  testStreamQueries();
  testFailure();
  testArgs();
  testGridAndPolicy();
  testConfig();
  testKnobs();
  testSocketNames();
  return harnessReport("core_decisions");
}
