/* SPDX-License-Identifier: Apache-2.0 */
/* The two-shot all-reduce's instances for 3..SYMM_MAX_RANKS ranks, and its entry points. */
#include "all_reduce_twoshot.cuh"

namespace symm {

cudaError_t launchTwoShot(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                          const KernelArgs& args) {
  /* 2 ranks: the instance for 2 (about 110 registers instead of 240; 1-2% faster at
   * 8 MiB-1 GiB on 2x H200), in all_reduce_twoshot_pair.cu. */
  if (args.nranks == 2) return launchTwoShotPair(call, blocks, stream, args);
  return launchFamily<TwoShotFamily<SYMM_MAX_RANKS>>(call, blocks, stream, args);
}

cudaError_t loadTwoShot() {
  cudaError_t err = loadFamily<TwoShotFamily<SYMM_MAX_RANKS>>();
  return err == cudaSuccess ? loadTwoShotPair() : err;
}

}  // namespace symm
