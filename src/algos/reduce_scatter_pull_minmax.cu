/* SPDX-License-Identifier: Apache-2.0 */
/* The pull kernel's min and max instances (reduce_scatter_pull.cuh). */
#include "reduce_scatter_pull.cuh"

namespace symm {

#define SYMM_PULL_MIN(E) template KernelFn reduceScatterPullInstance<E, kMin, SYMM_MAX_RANKS>();
#define SYMM_PULL_MAX(E) template KernelFn reduceScatterPullInstance<E, kMax, SYMM_MAX_RANKS>();
SYMM_DTYPE_TRAITS(SYMM_PULL_MIN)
SYMM_DTYPE_TRAITS(SYMM_PULL_MAX)

}  // namespace symm
