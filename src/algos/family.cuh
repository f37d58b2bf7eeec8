/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel families: how a collective's file names its instances once and gets their launch and
 * load for free. A family is a struct with
 *   static constexpr bool kReduces;  // the op picks the instance (all-gather's do not)
 *   template <typename E, int Kind> static KernelFn of(bool emulate);
 * where `of` returns the instance for datatype E, op Kind (kSum where !kReduces) and multimem
 * emulation (families without an emulated variant ignore it), or nullptr where none exists.
 * launchFamily and loadFamily (AlgoKernels' launch and load) do the dispatch over datatype and
 * op that every algorithm would otherwise write out again; familyAlgo makes the table line.
 * Family names are unique across src/algos: the templates below are instantiated per family in
 * several files, and the linker keeps one copy per name. */
#ifndef SYMMCOLL_FAMILY_CUH
#define SYMMCOLL_FAMILY_CUH

#include "launch.h"
#include "primitives.cuh"

namespace symm {

/* The instance of Family for the call's datatype and op; nullptr where none exists. */
template <class Family> KernelFn familyInstance(ncclDataType_t dt, ncclRedOp_t op, bool emulate) {
  KernelFn kernel = nullptr;
  if constexpr (Family::kReduces) {
    SYMM_DISPATCH_DTYPE(dt, SYMM_DISPATCH_OP(op, kernel = (Family::template of<E, Kind>(emulate))));
  } else {
    (void)op;
    SYMM_DISPATCH_DTYPE(dt, kernel = (Family::template of<E, kSum>(emulate)));
  }
  return kernel;
}

template <class Family>
cudaError_t launchFamily(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                         const KernelArgs& args) {
  const KernelFn kernel =
      familyInstance<Family>(call->datatype, call->op, call->emulateMultimem != 0);
  return kernel != nullptr ? launchKernel(kernel, blocks, stream, args) : cudaErrorInvalidValue;
}

/* Loads every instance of Family (both emulation variants) into the current device's context.
 * Loading touches no multicast object. */
template <class Family> cudaError_t loadFamily() {
  cudaError_t err = cudaSuccess;
  cudaFuncAttributes attr;
  for (int dt = 0; dt < (int)ncclNumTypes && err == cudaSuccess; dt++)
    for (int op = 0; op < (Family::kReduces ? (int)ncclNumOps : 1) && err == cudaSuccess; op++) {
      if (op == ncclAvg) continue; /* avg runs the sum instance */
      const KernelFn plain = familyInstance<Family>((ncclDataType_t)dt, (ncclRedOp_t)op, false);
      const KernelFn emulated = familyInstance<Family>((ncclDataType_t)dt, (ncclRedOp_t)op, true);
      if (plain != nullptr) err = cudaFuncGetAttributes(&attr, (const void*)plain);
      if (err == cudaSuccess && emulated != nullptr && emulated != plain)
        err = cudaFuncGetAttributes(&attr, (const void*)emulated);
    }
  return err;
}

/* Families whose kernels take the bound of their loops over ranks as a template constant R:
 * Family<2> for a pair (each loop over ranks two iterations) and Family<SYMM_MAX_RANKS> for any
 * other world (loops to 8, ranks past the world predicated off). The world size picks, the same
 * on every rank. The Lamport kernel has its own launch (lamport.cuh, lamportBound): it has a
 * third bound (4), measured worth its instances at 4 ranks, and its slot follows its bound. */
template <template <int> class Family>
cudaError_t launchByWorld(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                          const KernelArgs& args) {
  if (args.nranks == 2) return launchFamily<Family<2>>(call, blocks, stream, args);
  return launchFamily<Family<SYMM_MAX_RANKS>>(call, blocks, stream, args);
}
template <template <int> class Family> cudaError_t loadByWorld() {
  const cudaError_t err = loadFamily<Family<2>>();
  return err != cudaSuccess ? err : loadFamily<Family<SYMM_MAX_RANKS>>();
}
template <template <int> class Family>
constexpr AlgoKernels worldAlgo(enum symmAlgo algo, bool (*exists)(ncclDataType_t, ncclRedOp_t)) {
  return {algo, launchByWorld<Family>, loadByWorld<Family>, exists};
}

/* A line of a collective's table of algorithms (launch.h, AlgoKernels). */
template <class Family>
constexpr AlgoKernels familyAlgo(enum symmAlgo algo, bool (*exists)(ncclDataType_t, ncclRedOp_t)) {
  return {algo, launchFamily<Family>, loadFamily<Family>, exists};
}

}  // namespace symm

#endif
