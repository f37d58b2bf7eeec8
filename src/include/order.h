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
};
ncclResult_t symmCaptureOf(cudaStream_t stream, struct symmCapture* out);

/* What an operation must do before it (bits), decided from the order state alone:
 *  - eager, same stream as the previous operation and no graph ever captured: nothing (the stream
 *    orders it; the common case costs no CUDA call);
 *  - eager on another stream: wait on the event recorded after the previous operation;
 *  - eager after a capture on this communicator: always wait on the event, which a graph replay
 *    may have recorded since;
 *  - captured, first operation of this capture: wait on the event as an external dependency (at
 *    each replay: whatever operation or replay was issued before the replay's launch);
 *  - captured, later operation of the same capture: depend on the previous one in the graph. */
enum {
  SYMM_ORDER_WAIT = 1u << 0,
  SYMM_ORDER_WAIT_EXTERNAL = 1u << 1,
  SYMM_ORDER_WAIT_CAPTURE = 1u << 2,
};
unsigned symmOrderBeforePlan(const struct symmOrder* order, const struct symmCapture* capture);

/* What it must do after it: eager operations record the event (teardown waits on it too);
 * captured ones add an external record node (later replays and eager operations wait for it)
 * and mark their place in the capture. */
enum {
  SYMM_ORDER_RECORD = 1u << 4,
  SYMM_ORDER_RECORD_EXTERNAL = 1u << 5,
  SYMM_ORDER_RECORD_CAPTURE = 1u << 6,
};
unsigned symmOrderAfterPlan(const struct symmCapture* capture);

/* Carry the plans out and update the state. Caller holds the communicator's launchLock; the
 * device current is the communicator's. Errors are CUDA failures (the caller fails the
 * communicator). */
ncclResult_t symmOrderBefore(struct symmOrder* order, cudaStream_t stream,
                             const struct symmCapture* capture);
ncclResult_t symmOrderAfter(struct symmOrder* order, cudaStream_t stream,
                            const struct symmCapture* capture);

/* An event whose latest record follows every eager operation issued so far and every graph
 * replay launched after a capture of ours; NULL when nothing was ordered. Caller holds
 * launchLock. */
cudaEvent_t symmOrderQuiesceEvent(const struct symmOrder* order);

/* Events are created at the communicator's first ordered operation; destroyed with its entry,
 * unless handed over first. */
void symmOrderDestroy(struct symmOrder* order);

/* Teardown: graphs of ours may still record and wait on the order's events after the entry is
 * gone (a replay after an abort), so whoever outlives those graphs takes them: every event the
 * order holds goes into events[] (at most SYMM_ORDER_EVENTS; the count is returned), *quiesce
 * is symmOrderQuiesceEvent's answer, and the order forgets them. Caller holds launchLock. */
#define SYMM_ORDER_EVENTS (1 + SYMM_ORDER_CAPTURES)
int symmOrderHandOver(struct symmOrder* order, cudaEvent_t* quiesce,
                      cudaEvent_t events[SYMM_ORDER_EVENTS]);

#endif
