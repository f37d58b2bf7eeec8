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
