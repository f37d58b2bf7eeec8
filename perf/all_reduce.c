/* SPDX-License-Identifier: Apache-2.0 */
/* all_reduce_perf: buffer layout and bandwidth of all-reduce (as nccl-tests defines them). */
#include "common.h"

static void allReduceCounts(size_t count, int eltSize, int nranks, struct perfCounts* out) {
  (void)eltSize;
  (void)nranks;
  out->sendCount = count;
  out->recvCount = count;
  out->paramCount = count;
  out->sendInplaceOffset = 0;
  out->recvInplaceOffset = 0;
}

/* Each rank sends and receives 2(n-1)/n of the data on its busiest link (reduce-scatter then
 * all-gather), so busbw = algbw * 2(n-1)/n. */
static void allReduceBw(size_t count, int eltSize, double sec, int nranks, double* algBw, double* busBw) {
  double base = (double)count * (double)eltSize / 1.0e9 / sec;
  *algBw = base;
  *busBw = base * (2.0 * (nranks - 1)) / nranks;
}

const struct perfColl perfAllReduce = {
    .name = "AllReduce", .kind = PERF_ALLREDUCE, .hasOp = 1, .getCounts = allReduceCounts, .getBw = allReduceBw};
