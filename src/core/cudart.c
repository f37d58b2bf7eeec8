/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA runtime helpers that every layer shares: references held by CUDA graphs, the calling
 * thread's CUDA state around private-stream work. */
#include "cudart.h"

ncclResult_t symmGraphHold(cudaGraph_t graph, void* object, int* refs, cudaHostFn_t release) {
  cudaUserObject_t user;
  __atomic_add_fetch(refs, 1, __ATOMIC_ACQ_REL);
  if (cudaUserObjectCreate(&user, object, release, 1, cudaUserObjectNoDestructorSync) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    __atomic_sub_fetch(refs, 1, __ATOMIC_ACQ_REL);
    return ncclUnhandledCudaError;
  }
  if (cudaGraphRetainUserObject(graph, user, 1, cudaGraphUserObjectMove) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaUserObjectRelease(user, 1); /* runs release: the reference goes */
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

void symmCudaThreadEnter(struct symmCudaThread* saved) {
  saved->prevDev = -1;
  (void)cudaGetDevice(&saved->prevDev);
  saved->mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&saved->mode);
}

void symmCudaThreadLeave(struct symmCudaThread* saved) {
  (void)cudaThreadExchangeStreamCaptureMode(&saved->mode);
  if (saved->prevDev >= 0) (void)cudaSetDevice(saved->prevDev);
}
