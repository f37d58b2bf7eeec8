/* SPDX-License-Identifier: Apache-2.0 */
/* The two-shot all-reduce's instances for exactly 2 ranks (see all_reduce_twoshot.cuh). */
#include "all_reduce_twoshot.cuh"

namespace symm {

cudaError_t launchTwoShotPair(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                              const KernelArgs& args) {
  return launchFamily<TwoShotFamily<2>>(call, blocks, stream, args);
}

cudaError_t loadTwoShotPair() { return loadFamily<TwoShotFamily<2>>(); }

}  // namespace symm
