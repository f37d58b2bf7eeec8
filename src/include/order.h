/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL's stream semantics for one communicator: every operation on it (ours and those forwarded
 * to the real NCCL) runs after the previous one, whatever stream or CUDA graph it is issued on,
 * as NCCL orders its own launches through an internal stream and events (strongstream.cc).
 * Active only on communicators where our kernels run: elsewhere the real NCCL orders its own. */
#ifndef SYMMCOLL_ORDER_H
#define SYMMCOLL_ORDER_H

#include <cuda_runtime.h>

#include "comm.h"

/* A stream's identity and capture state, read once per call. */
struct symmCapture {
  unsigned long long streamId; /* cudaStreamGetId: unique for the process's life, unlike handles */
  int active;                  /* the stream is being captured into a CUDA graph */
  unsigned long long id;       /* the capture's unique id (0 when not active) */
  cudaGraph_t graph;
  /* Captured: the nodes the stream's next node will depend on, as the query returned them
   * (valid until the next capture call on the stream). */
  const cudaGraphNode_t* deps;
  size_t ndeps;
};
ncclResult_t symmCaptureOf(cudaStream_t stream, struct symmCapture* out);

/* Captured: the stream's next work also waits for `node`, a node added to the capture's graph
 * directly; its other dependencies stay. How a call runs work beside its stream inside a capture
 * without a second stream: a stream forked into a capture by an event stays in that capture until
 * it ends, so no other call could use that stream meanwhile. Errors are CUDA failures. */
ncclResult_t symmCaptureAddDependency(cudaStream_t stream, cudaGraphNode_t node);

/* What an operation must do before it (bits), decided from the order state alone:
 *  - eager, same stream as the previous operation and no graph ever captured: nothing (the stream
 *    orders it; the common case costs no CUDA call);
 *  - eager on another stream: wait on the event recorded after the previous operation;
 *  - eager after a capture on this communicator: always wait on the event, which a graph replay
 *    may have recorded since;
 *  - captured, first operation of this capture on this communicator: wait on the event as an
 *    external dependency (at each replay: every operation or replay issued before the replay's
 *    launch); one event node per graph, none with NCCL_GRAPH_MIXING_SUPPORT=0;
 *  - captured, a later operation of the same capture: depend on the previous one's last nodes.
 *    When the stream's current dependencies are those nodes (the usual case: one capture stream,
 *    nothing of the user's in between) nothing is added; otherwise they are added to the
 *    stream's dependencies as graph edges (no node). */
enum {
  SYMM_ORDER_WAIT = 1u << 0,
  SYMM_ORDER_WAIT_EXTERNAL = 1u << 1,
  SYMM_ORDER_JOIN_TAIL = 1u << 2,
};
unsigned symmOrderBeforePlan(const struct symmOrder* order, const struct symmCapture* capture);

/* What it must do after it: eager operations record the event (teardown waits on it too);
 * captured ones remember their last nodes (the capture's tail) and, unless mixing is off, make
 * the capture's one record node of the event depend on them, so that the event marks the end
 * of every operation of ours in a replay (one node per graph, not per operation). */
enum {
  SYMM_ORDER_RECORD = 1u << 4,
  SYMM_ORDER_TRACK_TAIL = 1u << 5,
  SYMM_ORDER_RECORD_SINK = 1u << 6,
};
unsigned symmOrderAfterPlan(const struct symmOrder* order, const struct symmCapture* capture);

/* Carry the plans out and update the state. Caller holds the communicator's launchLock; the
 * device current is the communicator's. `capture` is what symmCaptureOf said before the
 * operation (After reads the stream's new dependencies itself). Errors are CUDA failures (the
 * caller fails the communicator). */
ncclResult_t symmOrderBefore(struct symmOrder* order, cudaStream_t stream,
                             const struct symmCapture* capture);
ncclResult_t symmOrderAfter(struct symmOrder* order, cudaStream_t stream,
                            const struct symmCapture* capture);

/* The state of one capture without CUDA (tests and symmOrderAfter): the capture's entry,
 * created if new (NULL without host memory), and its tail set to `nodes`. */
struct symmCaptureState* symmOrderNoteTail(struct symmOrder* order, unsigned long long id,
                                           const cudaGraphNode_t* nodes, size_t count);
/* Captures the communicator still tracks (tests). */
int symmOrderCaptureCount(const struct symmOrder* order);

/* A group whose operations on this communicator use several streams: NCCL runs them as if
 * posted on every one of those streams (each waits for the work issued on all of them before
 * the group, and each stream's later work waits for all of them). The group joins its streams
 * twice, before the real NCCL launches it and after the last operation: here every stream then
 * waits for the work issued on all of them so far (`anchor` waits for each of `others`, then
 * each of them for `anchor`). Eager, or all in one capture (record and wait become graph
 * edges). Caller holds launchLock, device current; errors are CUDA failures. */
ncclResult_t symmOrderJoinStreams(struct symmOrder* order, cudaStream_t anchor,
                                  const cudaStream_t* others, int count);

/* An event whose latest record follows every eager operation issued so far and every graph
 * replay launched after a capture of ours; NULL when nothing was ordered. Caller holds
 * launchLock. */
cudaEvent_t symmOrderQuiesceEvent(const struct symmOrder* order);

/* Events are created at the communicator's first ordered operation; destroyed with its entry,
 * unless handed over first. */
void symmOrderDestroy(struct symmOrder* order);

/* Whether captured operations skip the event nodes that order graph replays against other work
 * (NCCL_GRAPH_MIXING_SUPPORT=0, NCCL's own switch, read as NCCL reads it). */
int symmOrderMixingOff(void);

/* Teardown: graphs of ours may still record and wait on the order's event after the entry is
 * gone (a replay after an abort), so whoever outlives those graphs takes it: the event goes into
 * events[] (at most SYMM_ORDER_EVENTS; the count is returned), *quiesce is
 * symmOrderQuiesceEvent's answer, and the order forgets it and its captures. Caller holds
 * launchLock. */
#define SYMM_ORDER_EVENTS 2
int symmOrderHandOver(struct symmOrder* order, cudaEvent_t* quiesce,
                      cudaEvent_t events[SYMM_ORDER_EVENTS]);

#endif
