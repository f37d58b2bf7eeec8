/* SPDX-License-Identifier: Apache-2.0 */
/* One enqueue path for every collective we may run (NCCL's ncclEnqueueCheck + taskAppend):
 * task -> argument checks -> communicator reference -> failure check -> tuner -> staging on
 * first use -> launch, defer (group) or forward, ordered with every other operation on the
 * communicator. */
#ifndef SYMMCOLL_ENQUEUE_H
#define SYMMCOLL_ENQUEUE_H

#include <cuda_runtime.h>

#include "algos.h"
#include "coll.h"
#include "comm.h"
#include "nccl_api.h"
#include "order.h"

/* One call as the entry points received it (NCCL's ncclInfo). `count` is NCCL's argument:
 * all-reduce count, all-gather sendcount, reduce-scatter recvcount. */
struct symmTask {
  enum symmColl coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op; /* all-gather: ncclSum (ignored) */
  int root;       /* -1: none */
  ncclComm_t comm;
  cudaStream_t stream;
};

/* The argument checks NCCL makes (ArgsCheck, taskAppend) that must happen before we launch:
 * invalid datatype, invalid op (negative), a count whose byte size overflows, fp8 reductions
 * below sm_90 (`arch`, 0 when unknown or mixed) -> ncclInvalidArgument. *ncclDecides = 1 for
 * calls the real NCCL must judge and run (user-defined ops, count 0, NULL buffers). Pure. */
ncclResult_t symmArgsCheck(const struct symmTask* task, int nranks, int arch, int* ncclDecides);

/* Grid bounds and algorithm filter from the communicator's config, the same on all ranks:
 * maxCTAs/minCTAs bound our grids; NCCL_CTA_POLICY_EFFICIENCY asks for our fewest-block
 * variants (SYMM_EFFICIENCY_BLOCKS at most); NCCL_CTA_POLICY_ZERO allows no SM kernel (only
 * the copy-engine all-gather). Pure. */
#define SYMM_EFFICIENCY_BLOCKS 8
void symmGridBounds(const struct symmCommConfig* config, int* maxBlocks, int* minBlocks);
int symmPolicyAllows(int ctaPolicy, enum symmAlgo algo);

/* The whole path for ncclAllReduce, ncclAllGather and ncclReduceScatter. */
ncclResult_t symmEnqueue(const struct symmTask* task);

/* Forwarded calls that take a communicator and a stream (ncclBroadcast, ncclSend, ...): the
 * communicator's failure first (NCCL's ncclCommEnsureReady), then ordering before and after the
 * real call where our kernels run on it. */
struct symmForwardScope {
  struct symmComm* comm; /* NULL: not ours, nothing to do */
  cudaStream_t stream;
  int ordered;
  int savedDev;               /* the caller's device, restored at the end (-1: unchanged) */
  struct symmCapture capture; /* the stream before the real call */
};
ncclResult_t symmForwardBegin(ncclComm_t comm, cudaStream_t stream, struct symmForwardScope* scope);
void symmForwardEnd(struct symmForwardScope* scope, ncclResult_t realResult);

#endif
