/* SPDX-License-Identifier: Apache-2.0 */
/* The pull kernel's sum and product instances (reduce_scatter_pull.cuh; avg runs the sum one). */
#include "reduce_scatter_pull.cuh"

namespace symm {

#define SYMM_PULL_SUM(E) template KernelFn reduceScatterPullInstance<E, kSum, SYMM_MAX_RANKS>();
#define SYMM_PULL_PROD(E) template KernelFn reduceScatterPullInstance<E, kProd, SYMM_MAX_RANKS>();
SYMM_DTYPE_TRAITS(SYMM_PULL_SUM)
SYMM_DTYPE_TRAITS(SYMM_PULL_PROD)

}  // namespace symm
