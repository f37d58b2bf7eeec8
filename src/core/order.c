/* SPDX-License-Identifier: Apache-2.0 */
/* Cross-stream order of a communicator's operations (see src/include/order.h). */
#include "order.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "cudart.h"
#include "cudriver.h"
#include "param.h"

/* CUDA 13 gave the edge-data forms the plain names; 12.3-12.9 call them _v3/_v2. */
#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#define cudaStreamUpdateCaptureDependencies cudaStreamUpdateCaptureDependencies_v2
#define cudaGraphAddDependencies cudaGraphAddDependencies_v2
#define cudaGraphNodeGetDependencies cudaGraphNodeGetDependencies_v2
#define cudaGraphRemoveDependencies cudaGraphRemoveDependencies_v2
#endif

/* Most nodes a capture's tail keeps; a wider frontier is first joined by one empty node. */
#define TAIL_MAX 8

/* One capture that ran operations of this communicator. The list holds one reference; the
 * capture's graph holds another through a user object, whose destructor marks the entry gone
 * (a destroyed graph's capture has ended), so the list drops it at its next walk. */
struct symmCaptureState {
  struct symmCaptureState* next;
  unsigned long long id;
  int refs;      /* atomic */
  int graphGone; /* atomic */
  cudaGraphNode_t tail[TAIL_MAX]; /* the nodes the capture's next operation of ours depends on */
  size_t ntail;
  cudaGraphNode_t sink; /* the record node of `event` that follows every operation, or NULL */
  int watched;          /* the graph holds a reference (pruning works) */
};

int symmOrderMixingOff(void) {
  /* NCCL reads NCCL_GRAPH_MIXING_SUPPORT as an integer (NCCL_PARAM), default 1; 0 turns mixing
   * off, also where strtoll reads no number ("false", "off"). */
  return symmNcclParam("NCCL_GRAPH_MIXING_SUPPORT", 1) == 0;
}

/* The launch path asks the driver directly where it can: the driver takes these calls (with
 * cudaGetDevice) 0.1-0.45 us faster than the runtime. The runtime answers when the driver's
 * entry point is missing or refuses (no current context, say), and its answer is the one that
 * counts. Dependencies come with their edge data, so annotated edges (programmatic launches)
 * never make the query fail. */
static cudaError_t captureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* status,
                               unsigned long long* id, cudaGraph_t* graph,
                               const cudaGraphNode_t** deps, size_t* ndeps) {
  CUstreamCaptureStatus cuStatus;
  cuuint64_t cuId = 0;
  CUgraph cuGraph = NULL;
  const CUgraphNode* cuDeps = NULL;
  const CUgraphEdgeData* cuEdges = NULL;
  size_t count = 0;
  if (symmCu.p_cuStreamGetCaptureInfo != NULL &&
      symmCu.p_cuStreamGetCaptureInfo((CUstream)stream, &cuStatus, &cuId, &cuGraph, &cuDeps,
                                      &cuEdges, &count) == CUDA_SUCCESS) {
    *status = (enum cudaStreamCaptureStatus)cuStatus; /* the same values */
    *id = cuId;
    *graph = (cudaGraph_t)cuGraph;
    *deps = (const cudaGraphNode_t*)cuDeps;
    *ndeps = count;
    return cudaSuccess;
  }
  const cudaGraphEdgeData* edges = NULL;
  return cudaStreamGetCaptureInfo(stream, status, id, graph, deps, &edges, ndeps);
}

static cudaError_t streamId(cudaStream_t stream, unsigned long long* id) {
  if (symmCu.p_cuStreamGetId != NULL && symmCu.p_cuStreamGetId((CUstream)stream, id) == CUDA_SUCCESS)
    return cudaSuccess;
  return cudaStreamGetId(stream, id);
}

static cudaError_t eventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (symmCu.p_cuEventRecord != NULL &&
      symmCu.p_cuEventRecord((CUevent)event, (CUstream)stream) == CUDA_SUCCESS)
    return cudaSuccess;
  return cudaEventRecord(event, stream);
}

ncclResult_t symmCaptureOf(cudaStream_t stream, struct symmCapture* out) {
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  memset(out, 0, sizeof(*out));
  /* The stream's id only matters outside a capture (cudaStreamGetId is refused inside one). */
  cudaError_t e = captureInfo(stream, &status, &out->id, &out->graph, &out->deps, &out->ndeps);
  if (e == cudaSuccess && status == cudaStreamCaptureStatusNone) e = streamId(stream, &out->streamId);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("cannot read the state of stream %p: %s", (void*)stream, cudaGetErrorString(e));
    return ncclUnhandledCudaError;
  }
  if (status == cudaStreamCaptureStatusInvalidated) {
    WARN("the CUDA graph capture of stream %p was invalidated before this call", (void*)stream);
    return ncclUnhandledCudaError;
  }
  out->active = status == cudaStreamCaptureStatusActive;
  if (!out->active) {
    out->id = 0;
    out->graph = NULL;
    out->deps = NULL;
    out->ndeps = 0;
  }
  return ncclSuccess;
}

ncclResult_t symmCaptureAddDependency(cudaStream_t stream, cudaGraphNode_t node) {
  CUDACHECK(cudaStreamUpdateCaptureDependencies(stream, &node, NULL, 1,
                                                cudaStreamAddCaptureDependencies));
  return ncclSuccess;
}

/* ---- the capture list (no CUDA) ----------------------------------------------------------- */

static void releaseState(struct symmCaptureState* c) {
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) free(c);
}

/* Unlinks entries whose graph is gone. */
static void prune(struct symmOrder* o) {
  struct symmCaptureState** link = &o->captures;
  while (*link != NULL) {
    struct symmCaptureState* c = *link;
    if (__atomic_load_n(&c->graphGone, __ATOMIC_ACQUIRE)) {
      *link = c->next;
      releaseState(c);
    } else {
      link = &c->next;
    }
  }
}

static struct symmCaptureState* findCapture(const struct symmOrder* o, unsigned long long id) {
  for (struct symmCaptureState* c = o->captures; c != NULL; c = c->next)
    if (c->id == id && id != 0) return c;
  return NULL;
}

struct symmCaptureState* symmOrderNoteTail(struct symmOrder* o, unsigned long long id,
                                           const cudaGraphNode_t* nodes, size_t count) {
  struct symmCaptureState* c = findCapture(o, id);
  if (c == NULL) {
    prune(o);
    c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->id = id;
    c->refs = 1;
    c->next = o->captures;
    o->captures = c;
  }
  if (count > TAIL_MAX) count = TAIL_MAX; /* callers join wider frontiers first */
  memcpy(c->tail, nodes, count * sizeof(*nodes));
  c->ntail = count;
  o->everCaptured = 1;
  return c;
}

int symmOrderCaptureCount(const struct symmOrder* o) {
  int n = 0;
  for (const struct symmCaptureState* c = o->captures; c != NULL; c = c->next)
    n += !__atomic_load_n(&c->graphGone, __ATOMIC_ACQUIRE);
  return n;
}

/* Every node of the capture's tail is among the stream's current dependencies. */
static int tailCovered(const struct symmCaptureState* c, const struct symmCapture* cap) {
  for (size_t i = 0; i < c->ntail; i++) {
    int found = 0;
    for (size_t k = 0; k < cap->ndeps && !found; k++) found = cap->deps[k] == c->tail[i];
    if (!found) return 0;
  }
  return 1;
}

unsigned symmOrderBeforePlan(const struct symmOrder* o, const struct symmCapture* cap) {
  if (cap->active) {
    const struct symmCaptureState* c = findCapture(o, cap->id);
    if (c == NULL) return o->noMixing ? 0 : SYMM_ORDER_WAIT_EXTERNAL;
    return tailCovered(c, cap) ? 0 : SYMM_ORDER_JOIN_TAIL;
  }
  if (o->everCaptured || (o->issued && o->lastStreamId != cap->streamId)) return SYMM_ORDER_WAIT;
  return 0;
}

unsigned symmOrderAfterPlan(const struct symmOrder* o, const struct symmCapture* cap) {
  if (!cap->active) return SYMM_ORDER_RECORD;
  return SYMM_ORDER_TRACK_TAIL | (o->noMixing ? 0 : SYMM_ORDER_RECORD_SINK);
}

/* ---- carrying the plans out ------------------------------------------------------------- */

static ncclResult_t ensureEvent(struct symmOrder* o) {
  if (o->created) return ncclSuccess;
  CUDACHECK(cudaEventCreateWithFlags(&o->event, cudaEventDisableTiming));
  o->created = 1;
  return ncclSuccess;
}

ncclResult_t symmOrderBefore(struct symmOrder* o, cudaStream_t stream,
                             const struct symmCapture* cap) {
  const unsigned plan = symmOrderBeforePlan(o, cap);
  if (plan == 0) return ncclSuccess;
  if (plan & SYMM_ORDER_JOIN_TAIL) {
    struct symmCaptureState* c = findCapture(o, cap->id);
    CUDACHECK(cudaStreamUpdateCaptureDependencies(stream, c->tail, NULL, c->ntail,
                                                  cudaStreamAddCaptureDependencies));
    return ncclSuccess;
  }
  NCCLCHECK(ensureEvent(o));
  if (plan & SYMM_ORDER_WAIT) CUDACHECK(cudaStreamWaitEvent(stream, o->event, 0));
  if (plan & SYMM_ORDER_WAIT_EXTERNAL)
    CUDACHECK(cudaStreamWaitEvent(stream, o->event, cudaEventWaitExternal));
  return ncclSuccess;
}

static void captureGraphGone(void* arg) {
  struct symmCaptureState* c = arg;
  __atomic_store_n(&c->graphGone, 1, __ATOMIC_RELEASE);
  releaseState(c);
}

/* Ties the entry to its capture's graph, so that the list forgets it once the graph is gone.
 * Without it (an error here) the entry stays until the communicator goes: no harm. */
static void watchGraph(struct symmCaptureState* c, cudaGraph_t graph) {
  if (symmGraphHold(graph, c, &c->refs, captureGraphGone) == ncclSuccess) c->watched = 1;
}

/* Moves the sink behind `tail`: it depends on the new tail only, which follows the earlier
 * tails. Leaving the earlier edges would make every kernel of the graph fork (one dependent in
 * the chain, one the sink), and a graph whose nodes fork cannot run as one chain on one queue:
 * each fork costs a cross-queue signal at every replay. Now only the last operation forks. */
static ncclResult_t moveSink(cudaGraph_t graph, cudaGraphNode_t sink, const cudaGraphNode_t* tail,
                             size_t ntail) {
  size_t count = 0;
  CUDACHECK(cudaGraphNodeGetDependencies(sink, NULL, NULL, &count));
  cudaGraphNode_t* have = count > 0 ? malloc(count * sizeof(*have)) : NULL;
  if (count > 0 && have == NULL) {
    WARN("out of host memory ordering a captured collective");
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  if (count > 0) CUDACHECKGOTO(cudaGraphNodeGetDependencies(sink, have, NULL, &count), res, done);
  /* New edges first, so that the sink never loses its place behind our operations. */
  for (size_t i = 0; i < ntail; i++) {
    int present = 0;
    for (size_t k = 0; k < count && !present; k++) present = have[k] == tail[i];
    if (!present) CUDACHECKGOTO(cudaGraphAddDependencies(graph, &tail[i], &sink, NULL, 1), res, done);
  }
  /* An edge that cannot be removed stays: the order is right either way, only slower. */
  for (size_t k = 0; k < count; k++) {
    int kept = 0;
    for (size_t i = 0; i < ntail && !kept; i++) kept = have[k] == tail[i];
    if (!kept && cudaGraphRemoveDependencies(graph, &have[k], &sink, NULL, 1) != cudaSuccess) {
      static int told;
      if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        INFO(SYMM_COLL, "a captured graph keeps an extra edge to its ordering record: %s",
             cudaGetErrorString(cudaGetLastError()));
      (void)cudaGetLastError();
    }
  }
done:
  free(have);
  return res;
}

/* After a captured operation: its last nodes become the capture's tail, and the capture's record
 * node of the event (created at its first operation) comes after them. */
static ncclResult_t afterCaptured(struct symmOrder* o, cudaStream_t stream,
                                  const struct symmCapture* before) {
  struct symmCapture now;
  NCCLCHECK(symmCaptureOf(stream, &now));
  if (!now.active || now.id != before->id) {
    WARN("the CUDA graph capture of stream %p ended inside a collective call", (void*)stream);
    return ncclInvalidUsage;
  }
  cudaGraphNode_t tail[TAIL_MAX];
  size_t ntail = now.ndeps;
  if (ntail > TAIL_MAX) {
    CUDACHECK(cudaGraphAddEmptyNode(&tail[0], now.graph, now.deps, now.ndeps));
    ntail = 1;
  } else {
    memcpy(tail, now.deps, ntail * sizeof(*tail));
  }
  struct symmCaptureState* c = symmOrderNoteTail(o, now.id, tail, ntail);
  if (c == NULL) {
    WARN("out of host memory ordering a captured collective");
    return ncclSystemError;
  }
  if (!c->watched) watchGraph(c, now.graph);
  if (!(symmOrderAfterPlan(o, before) & SYMM_ORDER_RECORD_SINK) || ntail == 0) return ncclSuccess;
  NCCLCHECK(ensureEvent(o));
  if (c->sink == NULL) {
    /* A node of the graph that nothing in it depends on: off the replay's critical path. */
    CUDACHECK(cudaGraphAddEventRecordNode(&c->sink, now.graph, tail, ntail, o->event));
  } else {
    NCCLCHECK(moveSink(now.graph, c->sink, tail, ntail));
  }
  return ncclSuccess;
}

ncclResult_t symmOrderAfter(struct symmOrder* o, cudaStream_t stream,
                            const struct symmCapture* cap) {
  if (cap->active) return afterCaptured(o, stream, cap);
  NCCLCHECK(ensureEvent(o));
  CUDACHECK(eventRecord(o->event, stream));
  o->lastStreamId = cap->streamId;
  o->issued = 1;
  return ncclSuccess;
}

ncclResult_t symmOrderJoinStreams(struct symmOrder* o, cudaStream_t anchor,
                                  const cudaStream_t* others, int count) {
  if (count == 0) return ncclSuccess;
  if (!o->joinCreated) {
    CUDACHECK(cudaEventCreateWithFlags(&o->joinEvent, cudaEventDisableTiming));
    o->joinCreated = 1;
  }
  /* A wait takes the event's latest record at the time of the call, so one event serves all:
   * the anchor waits for every other stream, then every other stream for the anchor. */
  for (int i = 0; i < count; i++) {
    CUDACHECK(eventRecord(o->joinEvent, others[i]));
    CUDACHECK(cudaStreamWaitEvent(anchor, o->joinEvent, 0));
  }
  CUDACHECK(eventRecord(o->joinEvent, anchor));
  for (int i = 0; i < count; i++) CUDACHECK(cudaStreamWaitEvent(others[i], o->joinEvent, 0));
  return ncclSuccess;
}

cudaEvent_t symmOrderQuiesceEvent(const struct symmOrder* o) {
  return o->created && (o->issued || o->everCaptured) ? o->event : NULL;
}

int symmOrderHandOver(struct symmOrder* o, cudaEvent_t* quiesce,
                      cudaEvent_t events[SYMM_ORDER_EVENTS]) {
  *quiesce = symmOrderQuiesceEvent(o);
  int n = 0;
  if (o->created) events[n++] = o->event;
  if (o->joinCreated) events[n++] = o->joinEvent;
  o->created = o->joinCreated = 0;
  o->issued = o->everCaptured = 0;
  while (o->captures != NULL) {
    struct symmCaptureState* c = o->captures;
    o->captures = c->next;
    releaseState(c);
  }
  return n;
}

void symmOrderDestroy(struct symmOrder* o) {
  if (o->created) (void)cudaEventDestroy(o->event);
  if (o->joinCreated) (void)cudaEventDestroy(o->joinEvent);
  o->created = o->joinCreated = 0;
  while (o->captures != NULL) {
    struct symmCaptureState* c = o->captures;
    o->captures = c->next;
    releaseState(c);
  }
  (void)cudaGetLastError();
}
