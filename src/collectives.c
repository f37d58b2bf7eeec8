/* SPDX-License-Identifier: Apache-2.0 */
/* ncclAllReduce, ncclAllGather, ncclReduceScatter: a task each, through the one enqueue path
 * (whose route also decides whether the real NCCL runs it untouched). */
#include "enqueue.h"
#include "forward.h" /* SYMM_EXPORT */

SYMM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  const struct symmTask task = {.coll = SYMM_COLL_ALLREDUCE, .sendbuff = sendbuff,
                                .recvbuff = recvbuff, .count = count, .datatype = datatype,
                                .op = op, .root = -1, .comm = comm, .stream = stream};
  return symmEnqueue(&task);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclAllReduce,
                     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

SYMM_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  const struct symmTask task = {.coll = SYMM_COLL_ALLGATHER, .sendbuff = sendbuff,
                                .recvbuff = recvbuff, .count = sendcount, .datatype = datatype,
                                .op = ncclSum, .root = -1, .comm = comm, .stream = stream};
  return symmEnqueue(&task);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclAllGather,
                     (const void* sendbuff, void* recvbuff, size_t sendcount,
                      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream))

SYMM_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream) {
  const struct symmTask task = {.coll = SYMM_COLL_REDUCESCATTER, .sendbuff = sendbuff,
                                .recvbuff = recvbuff, .count = recvcount, .datatype = datatype,
                                .op = op, .root = -1, .comm = comm, .stream = stream};
  return symmEnqueue(&task);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclReduceScatter,
                     (const void* sendbuff, void* recvbuff, size_t recvcount,
                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                      cudaStream_t stream))
