/* SPDX-License-Identifier: Apache-2.0 */
/* ncclAllReduce, ncclAllGather, ncclReduceScatter: ours when the tuner says so, else forwarded. */
#include <stdint.h>
#include <stdlib.h>

#include "algos.h"
#include "checks.h"
#include "comm.h"
#include "forward.h"
#include "group.h"
#include "transport.h"
#include "tuner.h"

/* An all-reduce of ours, ready to launch now or at the outermost GroupEnd. */
struct allReduceOp {
  struct symmComm* comm;
  struct symmLaunch call;
  void* windowPeers[SYMM_MAX_RANKS];
  cudaStream_t stream;
};

/* Launches on the communicator's device, restoring the caller's current device. The transport
 * holds its launch lock meanwhile, so an abort or destroy on another thread cannot unmap the
 * memory under us; after an abort the operation goes to the real NCCL, which reports it. */
static ncclResult_t launchAllReduce(struct allReduceOp* op) {
  const struct symmPeers* peers = symmTransportBeginLaunch(op->comm);
  if (peers == NULL) {
    const struct symmLaunch* c = &op->call;
    ncclResult_t res;
    SYMM_CALL_REAL(res, ncclAllReduce, (c->sendbuff, c->recvbuff, c->count, c->datatype, c->op,
                                        op->comm->real, op->stream));
    return res;
  }
  int oldDev = -1;
  ncclResult_t res = ncclSuccess;
  int launched = 0;
  CUDACHECKGOTO(cudaGetDevice(&oldDev), res, end_launch);
  if (oldDev != op->comm->cudaDev) CUDACHECKGOTO(cudaSetDevice(op->comm->cudaDev), res, end_launch);
  if (op->call.windowPeers != NULL) op->call.windowPeers = op->windowPeers; /* after a copy */
  if (op->call.exchangeDescs)
    op->call.inputDesc = symmTransportUserInputDesc(
        op->comm, op->call.sendbuff, op->call.count * symmTypeSize(op->call.datatype));
  res = symmCollLaunch(&op->call, peers, op->stream);
  launched = (res == ncclSuccess);
  if (oldDev != op->comm->cudaDev) CUDACHECKGOTO(cudaSetDevice(oldDev), res, end_launch);
end_launch:
  symmTransportEndLaunch(op->comm, op->stream, launched);
  return res;
}

static ncclResult_t runDeferredAllReduce(void* arg) {
  struct allReduceOp* op = arg;
  ncclResult_t res = launchAllReduce(op);
  free(op);
  return res;
}

/* Our launch when the communicator has peer memory and the tuner picks one of our kernels;
 * *handled = 0 means "forward it". */
static ncclResult_t tryOurAllReduce(struct symmComm* comm, const void* sendbuff, void* recvbuff,
                                    size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                    cudaStream_t stream, int* handled) {
  *handled = 0;
  if (comm->transport == NULL) return ncclSuccess;
  const struct symmPeers* peers = symmTransportPeers(comm);
  /* After an abort, or once one of our kernels gave up (ncclCommGetAsyncError reports it), the
   * device-side epochs may be out of step: nothing of ours runs on this communicator again. */
  if (peers == NULL || *peers->abortFlag != 0 || *peers->errorFlag != 0) return ncclSuccess;
  const size_t bytes = count * symmTypeSize(datatype);

  struct allReduceOp local;
  memset(&local, 0, sizeof(local));
  /* Symmetric windows sit at the same offset on every rank (NCCL's contract for
   * NCCL_WIN_COLL_SYMMETRIC), so "registered" is the same decision on all ranks. */
  const int registered = symmTransportFindWindow(comm, sendbuff, bytes, local.windowPeers) != 0;
  const int multicastReady = symmTransportMulticastReady(comm) != 0;
  struct symmTuneInput in = {.coll = SYMM_COLL_ALLREDUCE, .nranks = comm->nranks, .datatype = datatype, .op = op,
                             .bytes = bytes, .registered = registered,
                             .multicastReady = multicastReady, .arch = 0,
                             .stagingBytes = peers->bufferBytes};
  const enum symmAlgo algo = symmTunerPick(&in);
  TRACE(SYMM_TUNER, "comm %p rank %d: all-reduce of %zu bytes, type %d, op %d: %s",
        (void*)comm->real, comm->rank, bytes, (int)datatype, (int)op, symmAlgoName(algo));
  if (algo == SYMM_ALGO_NCCL) return ncclSuccess;

  /* ncclCommRegister memory: each rank says in the kernel whether its input is read in place. */
  const int exchangeDescs = symmTunerUserZeroCopy(&in, algo);
  local.call = (struct symmLaunch){
      .coll = SYMM_COLL_ALLREDUCE, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count, .datatype = datatype,
      .op = op, .algo = algo, .emulateMultimem = !multicastReady,
      .windowPeers = symmTunerZeroCopy(&in, algo) ? local.windowPeers : NULL,
      .exchangeDescs = exchangeDescs}; /* inputDesc: at launch, under the transport's lock */
  local.comm = comm;
  local.stream = stream;
  *handled = 1;
  if (symmGroupDepth() == 0) return launchAllReduce(&local);

  struct allReduceOp* deferred = malloc(sizeof(*deferred));
  if (deferred == NULL) {
    WARN("out of host memory deferring an all-reduce");
    return ncclSystemError;
  }
  *deferred = local;
  ncclResult_t res = symmGroupDeferOp(runDeferredAllReduce, deferred);
  if (res != ncclSuccess) free(deferred);
  return res;
}

/* A non-blocking communicator's first all-reduce: the real NCCL runs it on every rank alike, then
 * we set up. `ours` NULL: a communicator we never saw (a non-blocking split or shrink whose
 * handle appeared only after that call returned), adopted once the real NCCL accepted the call;
 * anything else unknown (NULL, destroyed, foreign) gets the real NCCL's own error. */
static ncclResult_t forwardThenSetUp(struct symmComm* ours, const void* sendbuff, void* recvbuff,
                                     size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                     ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
  if (res != ncclSuccess && res != ncclInProgress) return res;
  if (ours == NULL && (comm == NULL || symmCommAdd(comm, 0, &ours) != ncclSuccess)) return res;
  (void)symmCommSetupOnFirstUse(ours, stream);
  return res;
}

SYMM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclAllReduce,
                              (sendbuff, recvbuff, count, datatype, op, comm, stream),
                              ncclSystemError);
  struct symmComm* ours = symmCommFind(comm);
  if (ours == NULL)
    return forwardThenSetUp(NULL, sendbuff, recvbuff, count, datatype, op, comm, stream);
  const size_t esize = symmTypeSize(datatype);
  if (esize == 0) {
    WARN("ncclAllReduce: invalid datatype %d", (int)datatype);
    return ncclInvalidArgument;
  }
  if ((int)op < 0) {
    WARN("ncclAllReduce: invalid reduction operation %d", (int)op);
    return ncclInvalidArgument;
  }
  /* ncclRedOpCreatePreMulSum ops (>= ncclNumOps) belong to the real NCCL. */
  if ((int)op >= (int)ncclNumOps) goto forward;
  if (count > SIZE_MAX / esize) {
    WARN("ncclAllReduce: count %zu of %zu-byte elements overflows", count, esize);
    return ncclInvalidArgument;
  }
  /* NULL buffers, count 0 and the rest NCCL checks itself: leave them to it. */
  if (count == 0 || sendbuff == NULL || recvbuff == NULL) goto forward;
  int handled = 0;
  ncclResult_t res = tryOurAllReduce(ours, sendbuff, recvbuff, count, datatype, op, stream,
                                     &handled);
  if (handled || res != ncclSuccess) return res;
  if (!ours->setupDone)
    return forwardThenSetUp(ours, sendbuff, recvbuff, count, datatype, op, comm, stream);
forward:
  SYMM_FORWARD(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream),
               ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclAllReduce,
                     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

SYMM_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream) {
  SYMM_FORWARD(ncclReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),
               ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclReduceScatter,
                     (const void* sendbuff, void* recvbuff, size_t recvcount,
                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                      cudaStream_t stream))

SYMM_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  SYMM_FORWARD(ncclAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream),
               ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclAllGather,
                     (const void* sendbuff, void* recvbuff, size_t sendcount,
                      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream))
