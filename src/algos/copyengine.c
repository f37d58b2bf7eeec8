/* SPDX-License-Identifier: Apache-2.0 */
/* The copy-engine all-gather: the copy engines move the data (cudaMemcpyAsync through peer
 * mappings) and barriers are stream memory operations, so no SM kernel of ours runs (what a
 * communicator with NCCL_CTA_POLICY_ZERO asks for). The design and the argument that its resets
 * cannot race are in README.md ("Copy-engine all-gather").
 *
 * Barrier of kind K (arrive, ready, exit), rank r: copy the constant 1 (our pad's word
 * SYMM_PAD_ONE_WORD, written at allocation) into word (K, r) of every peer's pad; wait until our
 * word (K, q) is 1 for every peer q; reset each to 0. Values are constants, so a captured graph
 * replays them. */
#include "copyengine.h"

#include <stdint.h>
#include <string.h>

#include "cudriver.h"
#include "checks.h"
#include "debug.h"
#include "order.h"
#include "param.h"

SYMMCOLL_PARAM_FULL(CeRoundBytes, "CE_ROUND_BYTES", 0, 0, INT64_MAX, SYMM_PARAM_AGREED,
                    "copy-engine all-gather: most bytes of one rank's share per round (0: what "
                    "staging holds)")

static CUdeviceptr ceWord(const struct symmPeers* peers, int rank, enum symmCeWord kind, int writer) {
  return (CUdeviceptr)(uintptr_t)(peers->signals[rank] + symmPadCeWord(kind, writer));
}

/* One 32-bit stream memory operation: wait until *address == value, or write value there (after
 * a fence ordering the stream's earlier work before it). */
static void memOp(CUstreamBatchMemOpParams* op, int wait, CUdeviceptr address, uint32_t value) {
  memset(op, 0, sizeof(*op));
  if (wait) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op->waitValue.address = address;
    op->waitValue.value = value;
    op->waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  } else {
    op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op->writeValue.address = address;
    op->writeValue.value = value;
    op->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
}

/* Arrive at barrier `kind` on every peer, then wait for every peer's arrival and reset. */
static ncclResult_t ceBarrier(const struct symmPeers* peers, enum symmCeWord kind,
                              cudaStream_t stream) {
  const int me = peers->rank, n = peers->nranks;
  const uint32_t* one = (const uint32_t*)(peers->signals[me] + SYMM_PAD_ONE_WORD);
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    /* Stream order: every copy before this one has completed, so its data is in place before
     * the peer can see the flag. */
    CUDACHECK(cudaMemcpyAsync((void*)(uintptr_t)ceWord(peers, q, kind, me), one, sizeof(*one),
                              cudaMemcpyDeviceToDevice, stream));
  }
  CUstreamBatchMemOpParams ops[2 * SYMM_MAX_RANKS];
  unsigned count = 0;
  for (int q = 0; q < n; q++)
    if (q != me) memOp(&ops[count++], 1, ceWord(peers, me, kind, q), 1);
  /* After every wait (a batch runs in order): a peer writes this word again only after a
   * barrier of another kind, which needs our arrival there, issued after this reset. */
  for (int q = 0; q < n; q++)
    if (q != me) memOp(&ops[count++], 0, ceWord(peers, me, kind, q), 0);
  /* CU_CALL, not CUCHECK: a nested macro would expand the name to its _v2 spelling. */
  if (CU_CALL(SYMM_LOG_WARN, cuStreamBatchMemOp, ((CUstream)stream, count, ops, 0)) != CUDA_SUCCESS)
    return ncclUnhandledCudaError;
  return ncclSuccess;
}

static ncclResult_t copyAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return ncclSuccess;
  CUDACHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  return ncclSuccess;
}

/* Where our own part went: joinOwnPart makes the call's stream wait for it. */
struct ownPart {
  int forked;           /* eager: copied on the side stream */
  cudaGraphNode_t node; /* captured: the copy's node in the capture's graph */
};

/* Our own part (input -> its slot of our output) is copied beside the barriers and peer copies
 * of the call's stream, so another copy engine moves it at the same time. Only our stream order
 * matters for it (no peer reads or writes that slot); the call's stream waits for it before the
 * call returns. Eager: on the side stream, forked from the call's stream by an event (without a
 * side stream, a launcher that gives none, in line). Captured: a memcpy node added to the
 * capture's graph after the stream's current dependencies, never the side stream: a stream
 * forked into a capture stays in it until the capture ends, so another call on this
 * communicator meanwhile (eager on another stream, or in another capture) would put its
 * own-part copy into this capture, or be refused and break it. */
static ncclResult_t forkOwnPart(const struct symmSideStream* side, void* dst, const void* src,
                                size_t bytes, cudaStream_t stream, struct ownPart* own) {
  memset(own, 0, sizeof(*own));
  if (bytes == 0 || dst == src) return ncclSuccess;
  struct symmCapture cap;
  NCCLCHECK(symmCaptureOf(stream, &cap));
  if (cap.active) {
    cudaGraphNode_t node;
    CUDACHECK(cudaGraphAddMemcpyNode1D(&node, cap.graph, cap.deps, cap.ndeps, dst, src, bytes,
                                       cudaMemcpyDeviceToDevice));
    own->node = node;
    return ncclSuccess;
  }
  if (side->stream == NULL) return copyAsync(dst, src, bytes, stream);
  CUDACHECK(cudaEventRecord(side->fork, stream));
  CUDACHECK(cudaStreamWaitEvent(side->stream, side->fork, 0));
  own->forked = 1;
  return copyAsync(dst, src, bytes, side->stream);
}

/* Also after an error, so that the stream's later work still follows the copy. Captured, the
 * node joins the stream's dependencies (the barrier's last node stays there too). */
static ncclResult_t joinOwnPart(const struct symmSideStream* side, const struct ownPart* own,
                                cudaStream_t stream) {
  if (own->node != NULL) return symmCaptureAddDependency(stream, own->node);
  if (!own->forked) return ncclSuccess;
  CUDACHECK(cudaEventRecord(side->join, side->stream));
  CUDACHECK(cudaStreamWaitEvent(stream, side->join, 0));
  return ncclSuccess;
}

/* The peers' parts: arrive, then straight into every peer's registered output (zero copy) or
 * through staging in rounds. */
static ncclResult_t peerParts(const struct symmLaunch* call, const struct symmPeers* peers,
                              size_t stagingArea, cudaStream_t stream) {
  const int me = peers->rank, n = peers->nranks;
  const size_t esize = symmTypeSize(call->datatype);
  const size_t share = call->count * esize; /* bytes of one rank's part */
  const char* send = call->sendbuff;
  char* recv = call->recvbuff;
  /* Arrive: every rank's stream has reached this call, so every earlier kernel or copy of ours
   * on any rank is done with staging, and every rank's output is free to write. */
  NCCLCHECK(ceBarrier(peers, SYMM_CE_ARRIVE, stream));
  if (call->windowPeers != NULL) {
    /* Zero copy: our part straight into slot `me` of every peer's registered output. Exit:
     * every part has landed everywhere and nobody writes ours any more. */
    for (int q = 0; q < n; q++)
      if (q != me)
        NCCLCHECK(copyAsync((char*)call->windowPeers[q] + (size_t)me * share, send, share, stream));
    return ceBarrier(peers, SYMM_CE_EXIT, stream);
  }
  /* Staged: both staging halves as one area of n slots (the same on every rank: staging sizes
   * are agreed), in rounds of at most one slot per rank. */
  const size_t slot = (stagingArea / (size_t)n) & ~(size_t)15;
  size_t round = slot / esize * esize;
  const int64_t cap = symmParamCeRoundBytes();
  if (cap > 0 && (size_t)cap < round) round = (size_t)cap / esize * esize;
  if (round == 0) round = esize;
  for (size_t done = 0; done < share; done += round) {
    const size_t bytes = share - done < round ? share - done : round;
    for (int q = 0; q < n; q++)
      if (q != me)
        NCCLCHECK(copyAsync((char*)peers->buffers[q] + (size_t)me * slot, send + done, bytes, stream));
    NCCLCHECK(ceBarrier(peers, SYMM_CE_READY, stream));
    for (int q = 0; q < n; q++)
      if (q != me)
        NCCLCHECK(copyAsync(recv + (size_t)q * share + done,
                            (const char*)peers->buffers[me] + (size_t)q * slot, bytes, stream));
    /* Exit: every rank has copied its slots out before anybody's next round or call writes
     * staging again. */
    NCCLCHECK(ceBarrier(peers, SYMM_CE_EXIT, stream));
  }
  return ncclSuccess;
}

ncclResult_t symmCopyEngineAllGather(const struct symmLaunch* call, const struct symmPeers* peers,
                                     size_t stagingArea, cudaStream_t stream) {
  NCCLCHECK(symmCuLoad());
  const size_t share = call->count * symmTypeSize(call->datatype);
  /* Ours is recvbuff itself with windows too; in place it already holds the input. */
  struct ownPart own;
  ncclResult_t res = forkOwnPart(&call->side, (char*)call->recvbuff + (size_t)peers->rank * share,
                                 call->sendbuff, share, stream, &own);
  if (res == ncclSuccess) res = peerParts(call, peers, stagingArea, stream);
  const ncclResult_t joined = joinOwnPart(&call->side, &own, stream);
  return res != ncclSuccess ? res : joined;
}

void symmCopyEngineRelease(const struct symmPeers* peers, cudaStream_t stream) {
  if (symmCuLoad() != ncclSuccess) return;
  /* From a thread that may be capturing: private-stream work must not break its capture. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  CUstreamBatchMemOpParams ops[SYMM_CE_KINDS * SYMM_MAX_RANKS];
  unsigned count = 0;
  for (int k = 0; k < SYMM_CE_KINDS; k++)
    for (int q = 0; q < peers->nranks; q++)
      memOp(&ops[count++], 0, ceWord(peers, peers->rank, (enum symmCeWord)k, q), 1);
  (void)CU_CALL(SYMM_LOG_INFO, cuStreamBatchMemOp, ((CUstream)stream, count, ops, 0));
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
}
