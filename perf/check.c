/* SPDX-License-Identifier: Apache-2.0 */
/* Host versions of the input fill and the wrong-element count (the kernels do the same per
 * element with the same pattern.h functions; the CPU tests exercise them here). */
#include "common.h"

void perfFillHost(void* buf, size_t count, int kind, int type, int op, int nranks, int rank, uint64_t seed) {
  /* All-gather data is copied, not combined: one contribution per element. */
  int contributions = kind == PERF_ALLGATHER ? 1 : nranks;
  int fillOp = kind == PERF_ALLGATHER ? PERF_SUM : op;
  for (size_t i = 0; i < count; i++) {
    int64_t v = perfInputValue(type, fillOp, contributions, rank, seed, i);
    perfStoreBits(buf, type, i, perfEncode(type, (double)v));
  }
}

int64_t perfCountWrongHost(const void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                           uint64_t seed, size_t blockCount) {
  int64_t wrong = 0;
  for (size_t j = 0; j < count; j++) {
    double want = perfExpected(kind, type, op, nranks, rank, seed, j, blockCount);
    if (!perfElementOk(type, op, nranks, perfLoadBits(buf, type, j), want)) wrong++;
  }
  return wrong;
}
