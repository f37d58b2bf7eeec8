/* SPDX-License-Identifier: Apache-2.0 */
/* all_gather_perf: buffer layout and bandwidth of all-gather (as nccl-tests defines them). */
#include "common.h"

/* The sweep size is the gathered total; each rank contributes a share rounded down to 16 bytes. */
static void allGatherCounts(size_t count, int eltSize, int nranks, struct perfCounts* out) {
  size_t perRank = (count / (size_t)nranks) & ~(size_t)(16 / eltSize - 1);
  out->sendCount = perRank;
  out->recvCount = perRank * (size_t)nranks;
  out->paramCount = perRank;
  out->sendInplaceOffset = perRank; /* rank r's input sits in its own slot of the output */
  out->recvInplaceOffset = 0;
}

/* algbw counts the gathered total; each rank receives (n-1)/n of it. */
static void allGatherBw(size_t count, int eltSize, double sec, int nranks, double* algBw, double* busBw) {
  double base = (double)count * (double)eltSize * nranks / 1.0e9 / sec;
  *algBw = base;
  *busBw = base * (double)(nranks - 1) / nranks;
}

const struct perfColl perfAllGather = {
    .name = "AllGather", .kind = PERF_ALLGATHER, .hasOp = 0, .getCounts = allGatherCounts, .getBw = allGatherBw};
