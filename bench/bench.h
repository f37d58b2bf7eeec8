/* SPDX-License-Identifier: Apache-2.0 */
/* What the instruments share (C and CUDA C++): a CUDA runtime check that exits, a monotonic
 * clock in microseconds, and the comparison qsort needs for medians of doubles. */
#ifndef SYMMCOLL_BENCH_H
#define SYMMCOLL_BENCH_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* An instrument has nothing to clean up: a failed call prints where and why, and exits.
 * BENCH_CHECK serves any API whose calls return a status with a string for it. */
#define BENCH_CHECK(type, x, ok, describe)                                            \
  do {                                                                                \
    type s_ = (x);                                                                    \
    if (s_ != (ok)) {                                                                 \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, describe(s_));        \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)
#define CK(x) BENCH_CHECK(cudaError_t, x, cudaSuccess, cudaGetErrorString)

static inline double benchNowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static inline int benchCmpDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

#endif
