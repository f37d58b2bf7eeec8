/* SPDX-License-Identifier: Apache-2.0 */
/* The NCCL ABI as libsymmcoll sees it: nccl.h plus C declarations of the device-API host functions. */
#ifndef SYMMCOLL_NCCL_API_H
#define SYMMCOLL_NCCL_API_H

#include <nccl.h>
#include <stdbool.h>
#include <stdint.h>

/* nccl.h declares these without prototypes; give them one. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
void ncclResetDebugInit(void);
/* Exported by NCCL (and so by us) but declared in none of its headers. */
void ncclResetDebugInitInternal(void);

/* nccl_device/core.h is C++ only; these C twins match its layouts for the host entry points. */
typedef struct symmNcclTeam { int nRanks, rank, stride; } symmNcclTeam_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

/* Every NCCL entry point we export, once.  X(ret, name, params, args, fail):
 * fail is what the call returns when no real NCCL can be loaded.
 * FORWARDED ones get a generated body in api.c; INTERCEPTED ones are written by hand
 * (collectives.c, init.c, ...). Both lists drive the dlsym table, and the version script
 * exports nccl* / pncl* wildcards, so adding a symbol is one line here.
 * FORWARDED_COMM ones are operations on a communicator and a stream (their parameters are named
 * `comm` and `stream`): their generated bodies first return the communicator's failure, as NCCL's
 * ncclCommEnsureReady does, and order the call with our own kernels on that communicator. */
#define SYMM_FAIL_RESULT ncclSystemError

#define SYMMCOLL_FORWARDED_FUNCS(X) SYMMCOLL_FORWARDED_PLAIN_FUNCS(X) SYMMCOLL_FORWARDED_COMM_FUNCS(X)

#define SYMMCOLL_FORWARDED_PLAIN_FUNCS(X)                                                            \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId), (uniqueId), SYMM_FAIL_RESULT)           \
  X(const char*, ncclGetLastError, (ncclComm_t comm), (comm), "libsymmcoll: no real NCCL loaded")     \
  X(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count), (comm, count), SYMM_FAIL_RESULT) \
  X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device),              \
    SYMM_FAIL_RESULT)                                                                                \
  X(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank), SYMM_FAIL_RESULT) \
  X(ncclResult_t, ncclRedOpCreatePreMulSum,                                                          \
    (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,        \
     ncclComm_t comm),                                                                               \
    (op, scalar, datatype, residence, comm), SYMM_FAIL_RESULT)                                       \
  X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm), SYMM_FAIL_RESULT) \
  X(ncclResult_t, ncclDevCommCreate,                                                                 \
    (ncclComm_t comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* outDevComm),             \
    (comm, reqs, outDevComm), SYMM_FAIL_RESULT)                                                      \
  X(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const ncclDevComm_t* devComm),               \
    (comm, devComm), SYMM_FAIL_RESULT)                                                               \
  X(symmNcclTeam_t, ncclTeamWorld, (ncclComm_t comm), (comm), ((symmNcclTeam_t){0, -1, 0}))          \
  X(symmNcclTeam_t, ncclTeamLsa, (ncclComm_t comm), (comm), ((symmNcclTeam_t){0, -1, 0}))            \
  X(symmNcclTeam_t, ncclTeamRail, (ncclComm_t comm), (comm), ((symmNcclTeam_t){0, -1, 0}))           \
  X(int, ncclTeamRankToWorld, (ncclComm_t comm, symmNcclTeam_t team, int rank), (comm, team, rank), -1) \
  X(int, ncclTeamRankToLsa, (ncclComm_t comm, symmNcclTeam_t team, int rank), (comm, team, rank), -1) \
  X(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize), -1)               \
  X(ncclResult_t, ncclLLA2ACreateRequirement,                                                        \
    (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),  \
    (nBlocks, nSlots, outHandle, outReq), SYMM_FAIL_RESULT)                                          \
  X(ncclResult_t, ncclLsaBarrierCreateRequirement,                                                   \
    (symmNcclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,                          \
     ncclDevResourceRequirements_t* outReq),                                                         \
    (team, nBarriers, outHandle, outReq), SYMM_FAIL_RESULT)                                          \
  X(ncclResult_t, ncclGinBarrierCreateRequirement,                                                   \
    (ncclComm_t comm, symmNcclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,         \
     ncclDevResourceRequirements_t* outReq),                                                         \
    (comm, team, nBarriers, outHandle, outReq), SYMM_FAIL_RESULT)

#define SYMMCOLL_FORWARDED_COMM_FUNCS(X)                                                             \
  X(ncclResult_t, ncclReduce,                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,    \
     int root, ncclComm_t comm, cudaStream_t stream),                                                \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream), SYMM_FAIL_RESULT)                 \
  X(ncclResult_t, ncclBcast,                                                                         \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,                   \
     cudaStream_t stream),                                                                           \
    (buff, count, datatype, root, comm, stream), SYMM_FAIL_RESULT)                                   \
  X(ncclResult_t, ncclBroadcast,                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,          \
     ncclComm_t comm, cudaStream_t stream),                                                          \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), SYMM_FAIL_RESULT)                     \
  X(ncclResult_t, ncclAlltoAll,                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,   \
     cudaStream_t stream),                                                                           \
    (sendbuff, recvbuff, count, datatype, comm, stream), SYMM_FAIL_RESULT)                           \
  X(ncclResult_t, ncclGather,                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,          \
     ncclComm_t comm, cudaStream_t stream),                                                          \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), SYMM_FAIL_RESULT)                     \
  X(ncclResult_t, ncclScatter,                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,          \
     ncclComm_t comm, cudaStream_t stream),                                                          \
    (sendbuff, recvbuff, count, datatype, root, comm, stream), SYMM_FAIL_RESULT)                     \
  X(ncclResult_t, ncclSend,                                                                          \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,         \
     cudaStream_t stream),                                                                           \
    (sendbuff, count, datatype, peer, comm, stream), SYMM_FAIL_RESULT)                               \
  X(ncclResult_t, ncclRecv,                                                                          \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,               \
     cudaStream_t stream),                                                                           \
    (recvbuff, count, datatype, peer, comm, stream), SYMM_FAIL_RESULT)

/* Entry points with a hand-written body. */
#define SYMMCOLL_INTERCEPTED_FUNCS(X)                                                                \
  X(ncclResult_t, ncclGetVersion, (int* version), (version), SYMM_FAIL_RESULT)                       \
  X(const char*, ncclGetErrorString, (ncclResult_t result), (result), "unknown result code")         \
  X(void, ncclResetDebugInit, (void), (), )                                                          \
  X(void, ncclResetDebugInitInternal, (void), (), )                                                  \
  X(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size), (ptr, size), SYMM_FAIL_RESULT)            \
  X(ncclResult_t, ncclMemFree, (void* ptr), (ptr), SYMM_FAIL_RESULT)                                 \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError),                  \
    (comm, asyncError), SYMM_FAIL_RESULT)                                                            \
  X(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags),             \
    SYMM_FAIL_RESULT)                                                                                \
  X(ncclResult_t, ncclCommInitRank,                                                                  \
    (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank), (comm, nranks, commId, rank),     \
    SYMM_FAIL_RESULT)                                                                                \
  X(ncclResult_t, ncclCommInitRankConfig,                                                            \
    (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),             \
    (comm, nranks, commId, rank, config), SYMM_FAIL_RESULT)                                          \
  X(ncclResult_t, ncclCommInitRankScalable,                                                          \
    (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,                    \
     ncclConfig_t* config),                                                                          \
    (newcomm, nranks, myrank, nId, commIds, config), SYMM_FAIL_RESULT)                               \
  X(ncclResult_t, ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist),                 \
    (comm, ndev, devlist), SYMM_FAIL_RESULT)                                                         \
  X(ncclResult_t, ncclCommSplit,                                                                     \
    (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),                \
    (comm, color, key, newcomm, config), SYMM_FAIL_RESULT)                                           \
  X(ncclResult_t, ncclCommShrink,                                                                    \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,             \
     ncclConfig_t* config, int shrinkFlags),                                                         \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags), SYMM_FAIL_RESULT)     \
  X(ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm), SYMM_FAIL_RESULT)                     \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm), SYMM_FAIL_RESULT)                      \
  X(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm), SYMM_FAIL_RESULT)                        \
  X(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle), \
    (comm, buff, size, handle), SYMM_FAIL_RESULT)                                                    \
  X(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle),         \
    SYMM_FAIL_RESULT)                                                                                \
  X(ncclResult_t, ncclCommWindowRegister,                                                            \
    (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags),                     \
    (comm, buff, size, win, winFlags), SYMM_FAIL_RESULT)                                             \
  X(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win),        \
    SYMM_FAIL_RESULT)                                                                                \
  X(ncclResult_t, ncclAllReduce,                                                                     \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,    \
     ncclComm_t comm, cudaStream_t stream),                                                          \
    (sendbuff, recvbuff, count, datatype, op, comm, stream), SYMM_FAIL_RESULT)                       \
  X(ncclResult_t, ncclReduceScatter,                                                                 \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,                \
     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),                                          \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), SYMM_FAIL_RESULT)                   \
  X(ncclResult_t, ncclAllGather,                                                                     \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,                \
     ncclComm_t comm, cudaStream_t stream),                                                          \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream), SYMM_FAIL_RESULT)                       \
  X(ncclResult_t, ncclGroupStart, (void), (), SYMM_FAIL_RESULT)                                      \
  X(ncclResult_t, ncclGroupEnd, (void), (), SYMM_FAIL_RESULT)                                        \
  X(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo), (simInfo), SYMM_FAIL_RESULT)

#define SYMMCOLL_ALL_FUNCS(X) SYMMCOLL_FORWARDED_FUNCS(X) SYMMCOLL_INTERCEPTED_FUNCS(X)

/* Bytes per element of an NCCL datatype; 0 for a value that is not one (NCCL's
 * ncclInvalidArgument case). One definition for the entry points, the tuner and the kernels. */
static inline size_t symmTypeSize(ncclDataType_t datatype) {
  switch (datatype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

/* Exported with default visibility; pncclX is an alias of ncclX, as in NCCL's NCCL_API. */
#define SYMM_EXPORT __attribute__((visibility("default")))
#define SYMM_PROFILING_ALIAS(ret, name, params) \
  SYMM_EXPORT ret p##name params __attribute__((alias(#name)));

#endif
