/* SPDX-License-Identifier: Apache-2.0 */
/* reduce_scatter_perf: buffer layout and bandwidth of reduce-scatter (as nccl-tests defines them). */
#include "common.h"

/* The sweep size is the total input; each rank keeps a share rounded down to 16 bytes. */
static void reduceScatterCounts(size_t count, int eltSize, int nranks, struct perfCounts* out) {
  size_t perRank = (count / (size_t)nranks) & ~(size_t)(16 / eltSize - 1);
  out->sendCount = perRank * (size_t)nranks;
  out->recvCount = perRank;
  out->paramCount = perRank;
  out->sendInplaceOffset = 0;
  out->recvInplaceOffset = perRank; /* in place: rank r's output is its own slot of the input */
}

/* algbw counts the total input; each rank sends (n-1)/n of it. */
static void reduceScatterBw(size_t count, int eltSize, double sec, int nranks, double* algBw, double* busBw) {
  double base = (double)count * (double)eltSize * nranks / 1.0e9 / sec;
  *algBw = base;
  *busBw = base * (double)(nranks - 1) / nranks;
}

const struct perfColl perfReduceScatter = {.name = "ReduceScatter",
                                           .kind = PERF_REDUCESCATTER,
                                           .hasOp = 1,
                                           .getCounts = reduceScatterCounts,
                                           .getBw = reduceScatterBw};
