/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA runtime helpers that every layer shares (the driver's are in cudriver.h). */
#ifndef SYMMCOLL_CUDART_H
#define SYMMCOLL_CUDART_H

#include <cuda_runtime.h>

#include "nccl_api.h"

/* Ties a reference on `object` to `graph`: *refs (atomic) is counted up, and CUDA calls
 * release(object) once the graph and its replays are gone, from its own callback thread (no
 * CUDA call may be made there). release must drop that reference. On failure the reference is
 * dropped again (by release once the user object existed), the CUDA error is cleared, and the
 * result is ncclUnhandledCudaError; the caller decides whether that is worth a WARN. */
ncclResult_t symmGraphHold(cudaGraph_t graph, void* object, int* refs, cudaHostFn_t release);

/* The calling thread's device and stream capture mode while the library works on private
 * streams: symmCudaThreadEnter remembers both and switches to relaxed capture mode, so our CUDA
 * calls neither fail nor invalidate a global-mode capture on another thread;
 * symmCudaThreadLeave puts both back. */
struct symmCudaThread {
  int prevDev; /* -1 when it could not be read: then left as it is */
  enum cudaStreamCaptureMode mode;
};
void symmCudaThreadEnter(struct symmCudaThread* saved);
void symmCudaThreadLeave(struct symmCudaThread* saved);

#endif
