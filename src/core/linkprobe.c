/* SPDX-License-Identifier: Apache-2.0 */
/* The NVLink probe (src/include/linkprobe.h). */
#include "linkprobe.h"

#include <cuda_runtime.h>

enum symmLink symmProbeLink(int devA, int devB, int* access) {
  if (access != NULL) *access = 1;
  if (devA == devB) return SYMM_LINK_SAME_GPU;
  int can = 0, atomics = 0;
  if (cudaDeviceCanAccessPeer(&can, devA, devB) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    if (access != NULL) *access = 0;
    return SYMM_LINK_UNKNOWN;
  }
  if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, devA, devB) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return SYMM_LINK_UNKNOWN;
  }
  return atomics ? SYMM_LINK_NVLINK : SYMM_LINK_PCIE;
}
