/* SPDX-License-Identifier: Apache-2.0 */
/* The pull kernel's instances for a pair (R = 2: loops over two ranks), every op
 * (reduce_scatter_pull.cuh; avg runs the sum one). */
#include "reduce_scatter_pull.cuh"

namespace symm {

#define SYMM_PULL_PAIR(E)                                     \
  template KernelFn reduceScatterPullInstance<E, kSum, 2>();  \
  template KernelFn reduceScatterPullInstance<E, kProd, 2>(); \
  template KernelFn reduceScatterPullInstance<E, kMin, 2>();  \
  template KernelFn reduceScatterPullInstance<E, kMax, 2>();
SYMM_DTYPE_TRAITS(SYMM_PULL_PAIR)

}  // namespace symm
