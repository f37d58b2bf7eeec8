/* SPDX-License-Identifier: Apache-2.0 */
/* Cross-stream order of a communicator's operations (see src/include/order.h). */
#include "order.h"

#include "checks.h"
#include "../transport/cudriver.h"

/* CUDA 13 gave the edge-data form the plain name; 12.3-12.9 call it _v3. */
#if CUDART_VERSION < 13000
#define cudaStreamGetCaptureInfo cudaStreamGetCaptureInfo_v3
#endif

/* The launch path asks the driver directly where it can: the driver takes these calls (with
 * cudaGetDevice) 0.1-0.45 us faster than the runtime (perf/RESULTS.md 0, "replica" rows; our
 * whole call: 0.14 us, median of 11 A/B pairs). The runtime answers when the driver's entry
 * point is missing or refuses (no current context, say), and its answer is the one that counts. */
static cudaError_t captureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* status,
                               unsigned long long* id, cudaGraph_t* graph) {
  CUstreamCaptureStatus cuStatus;
  cuuint64_t cuId = 0;
  CUgraph cuGraph = NULL;
  if (symmCu.p_cuStreamGetCaptureInfo != NULL &&
      symmCu.p_cuStreamGetCaptureInfo((CUstream)stream, &cuStatus, &cuId, &cuGraph, NULL, NULL,
                                      NULL) == CUDA_SUCCESS) {
    *status = (enum cudaStreamCaptureStatus)cuStatus; /* the same values */
    *id = cuId;
    *graph = (cudaGraph_t)cuGraph;
    return cudaSuccess;
  }
  return cudaStreamGetCaptureInfo(stream, status, id, graph, NULL, NULL, NULL);
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
  out->active = 0;
  out->id = 0;
  out->graph = NULL;
  out->streamId = 0;
  /* The stream's id only matters outside a capture (cudaStreamGetId is refused inside one). */
  cudaError_t e = captureInfo(stream, &status, &out->id, &out->graph);
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
  }
  return ncclSuccess;
}

/* The slot of capture `id`, or -1. */
static int captureSlot(const struct symmOrder* o, unsigned long long id) {
  for (int i = 0; i < SYMM_ORDER_CAPTURES; i++)
    if (o->captures[i].id == id && id != 0) return i;
  return -1;
}

unsigned symmOrderBeforePlan(const struct symmOrder* o, const struct symmCapture* cap) {
  if (cap->active) return captureSlot(o, cap->id) >= 0 ? SYMM_ORDER_WAIT_CAPTURE : SYMM_ORDER_WAIT_EXTERNAL;
  if (o->everCaptured || (o->issued && o->lastStreamId != cap->streamId)) return SYMM_ORDER_WAIT;
  return 0;
}

unsigned symmOrderAfterPlan(const struct symmCapture* cap) {
  return cap->active ? SYMM_ORDER_RECORD_EXTERNAL | SYMM_ORDER_RECORD_CAPTURE : SYMM_ORDER_RECORD;
}

static ncclResult_t ensureEvent(struct symmOrder* o) {
  if (o->created) return ncclSuccess;
  CUDACHECK(cudaEventCreateWithFlags(&o->event, cudaEventDisableTiming));
  o->created = 1;
  return ncclSuccess;
}

/* The slot for capture `id`: its own, else the least recently used one (a capture that ended,
 * unless more than SYMM_ORDER_CAPTURES captures on this communicator interleave). */
static ncclResult_t takeCaptureSlot(struct symmOrder* o, unsigned long long id, int* slot) {
  int s = captureSlot(o, id);
  if (s < 0) {
    s = 0;
    for (int i = 1; i < SYMM_ORDER_CAPTURES; i++)
      if (o->captures[i].lastUse < o->captures[s].lastUse) s = i;
    if (o->captures[s].capEvent == NULL)
      CUDACHECK(cudaEventCreateWithFlags(&o->captures[s].capEvent, cudaEventDisableTiming));
    o->captures[s].id = id;
  }
  o->captures[s].lastUse = ++o->useClock;
  *slot = s;
  return ncclSuccess;
}

ncclResult_t symmOrderBefore(struct symmOrder* o, cudaStream_t stream,
                             const struct symmCapture* cap) {
  const unsigned plan = symmOrderBeforePlan(o, cap);
  if (plan == 0) return ncclSuccess;
  NCCLCHECK(ensureEvent(o));
  if (plan & SYMM_ORDER_WAIT) CUDACHECK(cudaStreamWaitEvent(stream, o->event, 0));
  if (plan & SYMM_ORDER_WAIT_EXTERNAL)
    CUDACHECK(cudaStreamWaitEvent(stream, o->event, cudaEventWaitExternal));
  if (plan & SYMM_ORDER_WAIT_CAPTURE)
    CUDACHECK(cudaStreamWaitEvent(stream, o->captures[captureSlot(o, cap->id)].capEvent, 0));
  return ncclSuccess;
}

ncclResult_t symmOrderAfter(struct symmOrder* o, cudaStream_t stream,
                            const struct symmCapture* cap) {
  const unsigned plan = symmOrderAfterPlan(cap);
  NCCLCHECK(ensureEvent(o));
  if (plan & SYMM_ORDER_RECORD_EXTERNAL)
    CUDACHECK(cudaEventRecordWithFlags(o->event, stream, cudaEventRecordExternal));
  if (plan & SYMM_ORDER_RECORD_CAPTURE) {
    int slot = 0;
    NCCLCHECK(takeCaptureSlot(o, cap->id, &slot));
    CUDACHECK(cudaEventRecord(o->captures[slot].capEvent, stream));
    o->everCaptured = 1;
  }
  if (plan & SYMM_ORDER_RECORD) {
    CUDACHECK(eventRecord(o->event, stream));
    o->lastStreamId = cap->streamId;
    o->issued = 1;
  }
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
  o->created = 0;
  o->issued = o->everCaptured = 0;
  for (int i = 0; i < SYMM_ORDER_CAPTURES; i++) {
    if (o->captures[i].capEvent != NULL) events[n++] = o->captures[i].capEvent;
    o->captures[i].capEvent = NULL;
    o->captures[i].id = 0;
  }
  return n;
}

void symmOrderDestroy(struct symmOrder* o) {
  if (o->created) (void)cudaEventDestroy(o->event);
  o->created = 0;
  for (int i = 0; i < SYMM_ORDER_CAPTURES; i++) {
    if (o->captures[i].capEvent != NULL) (void)cudaEventDestroy(o->captures[i].capEvent);
    o->captures[i].capEvent = NULL;
  }
  (void)cudaGetLastError();
}
