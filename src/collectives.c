/* SPDX-License-Identifier: Apache-2.0 */
/* ncclAllReduce, ncclAllGather, ncclReduceScatter: ours when the tuner says so, else forwarded. */
#include "checks.h"
#include "comm.h"
#include "forward.h"

SYMM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
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
