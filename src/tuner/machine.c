/* SPDX-License-Identifier: Apache-2.0 */
/* The machine facts a tuning file is keyed on, read from the CUDA runtime. One implementation for
 * the library (communicator setup) and the tuning command, so that both write the same values. */
#include <cuda_runtime.h>
#include <string.h>

#include "debug.h"
#include "tuner.h"

ncclResult_t symmTunerProbeMachine(int cudaDev, struct symmTuneMachine* m) {
  struct cudaDeviceProp prop;
  int count = 0, driver = 0;
  cudaError_t err = cudaGetDeviceProperties(&prop, cudaDev);
  if (err == cudaSuccess) err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess) err = cudaDriverGetVersion(&driver);
  if (err != cudaSuccess) {
    INFO(SYMM_TUNER, "machine facts of device %d: %s", cudaDev, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return ncclUnhandledCudaError;
  }
  const size_t n = strnlen(prop.name, sizeof(m->gpu) - 1); /* names are ~20 characters */
  memcpy(m->gpu, prop.name, n);
  m->gpu[n] = '\0';
  m->arch = prop.major * 10 + prop.minor;
  m->gpus = count;
  m->driver = driver;
  return ncclSuccess;
}

enum symmLink symmTunerProbeLink(int devA, int devB) {
  if (devA == devB) return SYMM_LINK_SAME_GPU;
  int access = 0, atomics = 0;
  if (cudaDeviceCanAccessPeer(&access, devA, devB) != cudaSuccess || !access ||
      cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, devA, devB) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return SYMM_LINK_UNKNOWN;
  }
  /* CUDA offers native peer atomics over NVLink (and C2C) only, never over PCIe. */
  return atomics ? SYMM_LINK_NVLINK : SYMM_LINK_PCIE;
}
