/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator-wide failure: the state machine, and how a failure reaches every rank. */
#include "failure.h"

#include "algos.h"
#include "debug.h"
#include "transport.h"

ncclResult_t symmFailureResult(uint32_t bits) {
  if (bits == 0) return ncclSuccess;
  if (bits & (SYMM_ERR_PEER | SYMM_ERR_DEADLINE)) return ncclRemoteError;
  if (bits & SYMM_ERR_LAUNCH) return ncclUnhandledCudaError;
  if (bits & SYMM_ERR_BAD_DESC) return ncclInternalError;
  if (bits & SYMM_ERR_ABORT) return ncclInvalidUsage;
  return ncclInternalError;
}

int symmFailureRecord(struct symmFailure* f, uint32_t bits) {
  if (bits == 0) return 0;
  __atomic_or_fetch(&f->bits, bits, __ATOMIC_ACQ_REL);
  int expected = ncclSuccess;
  const int result = (int)symmFailureResult(bits);
  return __atomic_compare_exchange_n(&f->result, &expected, result, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

ncclResult_t symmFailureGet(const struct symmFailure* f) {
  return (ncclResult_t)__atomic_load_n(&f->result, __ATOMIC_ACQUIRE);
}

ncclResult_t symmFailureCombine(ncclResult_t real, ncclResult_t ours) {
  if (real != ncclSuccess && real != ncclInProgress) return real;
  if (ours != ncclSuccess) return ours;
  return real;
}

void symmCommFail(struct symmComm* comm, uint32_t bits, int tellPeers) {
  if (!symmFailureRecord(&comm->failure, bits)) return;
  WARN("comm %p rank %d: communicator failed (reason bits 0x%x: %s); every later call returns "
       "%d until ncclCommAbort or ncclCommDestroy", (void*)comm->real, comm->rank, bits,
       (bits & SYMM_ERR_PEER) ? "another rank failed" :
       (bits & SYMM_ERR_DEADLINE) ? "a kernel waited past SYMMCOLL_SPIN_DEADLINE_MS" :
       (bits & SYMM_ERR_LAUNCH) ? "a launch, ordering or setup exchange failure on this rank's host" :
       (bits & SYMM_ERR_BAD_DESC) ? "a registered input that is not mapped here" : "aborted",
       (int)symmFailureGet(&comm->failure));
  if (tellPeers) symmTransportTellPeers(comm, SYMM_ERR_LAUNCH);
}

void symmCommFailOrdering(struct symmComm* comm, ncclResult_t res) {
  if (res != ncclSuccess && symmTransportLaunchPeers(comm) != NULL)
    symmCommFail(comm, SYMM_ERR_LAUNCH, 1);
}

ncclResult_t symmCommHealth(struct symmComm* comm) {
  const ncclResult_t ours = symmFailureGet(&comm->failure);
  if (ours != ncclSuccess) return ours;
  /* A kernel that stopped for our abort flag is no failure: the flag stays up, so nothing of
   * ours launches here again, and calls are refused (abort) or forwarded (revoke, a shrink's
   * aborted parent) on every rank alike, whether a kernel of ours was in flight there or not. */
  const uint32_t kernel = symmTransportKernelErrors(comm) & ~SYMM_ERR_ABORT;
  if (kernel == 0) return ncclSuccess;
  symmCommFail(comm, kernel, 0);
  return symmFailureGet(&comm->failure);
}

ncclResult_t symmCommPollHealth(struct symmComm* comm) {
  /* A launch holds launchLock and can block there while our kernels wait for a dead peer (a
   * full launch queue): a watchdog polling here must not wait behind it, or it never aborts.
   * Then only symmCommHealth runs (under transportLock); the pad's failure word is read by a
   * later poll that finds the lock free. */
  if (pthread_mutex_trylock(&comm->launchLock) != 0) {
    pthread_mutex_lock(&comm->transportLock);
    const ncclResult_t res = symmCommHealth(comm);
    pthread_mutex_unlock(&comm->transportLock);
    return res;
  }
  ncclResult_t res = symmCommHealth(comm);
  if (res == ncclSuccess) {
    const uint32_t peer = symmTransportPollPadFailure(comm);
    if (peer != 0) {
      symmCommFail(comm, peer | SYMM_ERR_PEER, 0);
      res = symmFailureGet(&comm->failure);
    }
  }
  pthread_mutex_unlock(&comm->launchLock);
  return res;
}
