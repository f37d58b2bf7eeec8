/* SPDX-License-Identifier: Apache-2.0 */
/* A transport's creation, for communicator setup (src/setup.c): what this rank's device offers,
 * the private state each rank builds before the agreement, and attaching what was agreed. */
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "internal.h"
#include "multicast.h"
#include "param.h"

/* An int of milliseconds (poll's unit); 0 or less would fail every fetch at once. */
SYMMCOLL_PARAM_FULL(SetupTimeoutMs, "SETUP_TIMEOUT_MS", 30000, 1, INT32_MAX, 0u,
                    "how long one setup fetch of a peer's handle waits before giving up "
                    "(the communicator then forwards on every rank)")

int64_t symmTransportSetupTimeoutMs(void) { return symmParamSetupTimeoutMs(); }

void symmTransportDeviceCaps(int cudaDev, int askMulticast, struct symmDeviceCaps* caps) {
  memset(caps, 0, sizeof(*caps));
  if (symmCuLoad() != ncclSuccess) return;
  CUdevice dev;
  int vmm = 0, posix = 0;
  size_t gran = 0;
  if (CU_CALL(SYMM_LOG_INFO, cuDeviceGet, (&dev, cudaDev)) == CUDA_SUCCESS &&
      CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
              (&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev)) == CUDA_SUCCESS &&
      CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
              (&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev)) ==
          CUDA_SUCCESS &&
      vmm && posix && symmVmmGranularity(cudaDev, &gran) == ncclSuccess && gran > 0) {
    caps->vmm = 1;
    caps->granularity = gran;
  }
  /* The environment guard is checked first inside: no device query when multicast is off. */
  caps->multicast = askMulticast && symmMulticastUsable(cudaDev);
}

/* Private state: epochs (device, zeroed on a private stream), the host-mapped words, the
 * read-back event. Nothing here waits for other streams. */
static ncclResult_t buildPrivate(const struct symmComm* c, struct symmTransport* t,
                                 size_t localStateBytes) {
  CUDACHECK(cudaSetDevice(c->cudaDev));
  CUDACHECK(cudaStreamCreateWithFlags(&t->ctl, cudaStreamNonBlocking));
  CUDACHECK(cudaEventCreateWithFlags(&t->readback, cudaEventDisableTiming));
  CUDACHECK(cudaStreamCreateWithFlags(&t->side.stream, cudaStreamNonBlocking));
  CUDACHECK(cudaEventCreateWithFlags(&t->side.fork, cudaEventDisableTiming));
  CUDACHECK(cudaEventCreateWithFlags(&t->side.join, cudaEventDisableTiming));
  NCCLCHECK(symmHostSlotAlloc(&t->flags));
  t->peers.abortFlag = (volatile uint32_t*)t->flags.dev + SYMM_HOST_ABORT;
  t->peers.errorFlag = (volatile uint32_t*)t->flags.dev + SYMM_HOST_ERROR;
  t->peers.localStateBytes = localStateBytes;
  CUDACHECK(cudaMallocAsync(&t->localState, t->peers.localStateBytes, t->ctl));
  CUDACHECK(cudaMemsetAsync(t->localState, 0, t->peers.localStateBytes, t->ctl));
  t->peers.localState = t->localState;
  /* The private stream holds nothing that depends on a peer: waiting for it is bounded. */
  CUDACHECK(cudaStreamSynchronize(t->ctl));
  return ncclSuccess;
}

struct symmTransport* symmTransportCreate(const struct symmComm* comm, size_t localStateBytes,
                                          int* ok) {
  *ok = 0;
  struct symmTransport* t = calloc(1, sizeof(*t));
  if (t == NULL) {
    WARN("symmetric memory: out of host memory for a transport");
    return NULL;
  }
  pthread_mutex_init(&t->lock, NULL);
  t->refs = 1;
  t->cudaDev = comm->cudaDev;
  *ok = buildPrivate(comm, t, localStateBytes) == ncclSuccess;
  (void)cudaGetLastError();
  return t;
}

void symmTransportDiscard(struct symmTransport* t) {
  if (t != NULL) symmTransportFree(t);
}

void symmTransportAttach(struct symmComm* comm, struct symmTransport* t,
                         const struct symmTransportPlan* plan) {
  t->peers.rank = comm->rank;
  t->peers.nranks = comm->nranks;
  t->peers.ranksPerDevice = plan->ranksPerDevice;
  t->uid = plan->uid;
  t->timeoutMs = (int)symmParamSetupTimeoutMs();
  t->multicastAgreed = plan->multicastAgreed;
  memcpy(t->secret, plan->secret, sizeof(t->secret));
  t->granularity = plan->granularity;
  memcpy(t->pids, plan->pids, sizeof(t->pids));
  t->plannedBuffer = plan->stagingBytes;
  t->padBytes = plan->padBytes;
  t->releaseWaits = plan->releaseWaits;
  pthread_mutex_lock(&comm->launchLock);
  (void)symmTransportSwap(comm, t);
  pthread_mutex_unlock(&comm->launchLock);
}
