/* SPDX-License-Identifier: Apache-2.0 */
/* Our per-communicator state, in a thread-safe side table keyed by the real NCCL handle. */
#ifndef SYMMCOLL_COMM_H
#define SYMMCOLL_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "nccl_api.h"

struct symmTransport; /* src/transport: peer memory, signals, abort flag */

struct symmComm {
  ncclComm_t real; /* the handle the application holds */
  int rank, nranks, cudaDev;
  int blocking;    /* config.blocking; non-blocking comms are set up lazily */
  int attrsKnown;  /* rank/nranks/cudaDev read from the real NCCL */
  int setupDone;   /* symmetric-memory setup attempted (successfully or not) */
  int kernelsLoaded; /* our kernels are loaded in this device's context (symmCommSetupMany) */
  struct symmTransport* transport; /* non-NULL when eligible and set up */
  /* Readers: launches in flight (symmTransportBeginLaunch..End). Writer: teardown, which detaches
   * `transport` so an abort from another thread never frees memory under a launch. */
  pthread_rwlock_t transportLock;
  struct symmComm* next;           /* hash chain, guarded by the table lock */
};

/* Registers a communicator that the real NCCL just created (or is creating, non-blocking). */
ncclResult_t symmCommAdd(ncclComm_t real, int blocking, struct symmComm** out);
/* The entry for `real`, or NULL. The pointer stays valid until symmCommRemove(real). */
struct symmComm* symmCommFind(ncclComm_t real);
/* Unlinks and frees the entry (after its transport was torn down). */
void symmCommRemove(ncclComm_t real);
/* Number of live entries (tests). */
int symmCommCount(void);

/* A non-blocking communicator may still be launching its last operation (ncclInProgress):
 * polls the real NCCL until that is done, at most timeoutMs. ncclSuccess when idle (at once for
 * blocking communicators); ncclInProgress on timeout; else the communicator's error. */
ncclResult_t symmCommWaitIdle(const struct symmComm* comm, int64_t timeoutMs);

/* Whether the real NCCL will make this communicator blocking, decided as NCCL does: the
 * NCCL_COMM_BLOCKING environment variable (0 or 1) wins, then config->blocking, then
 * `inherited` when there is no config (a split's parent; 1 for new communicators), else 1.
 * Identical on every rank given the same configs and environment. */
int symmConfigBlocking(const ncclConfig_t* config, int inherited);

/* Reads rank/size/device from the real NCCL once the communicator is ready. */
ncclResult_t symmCommReadAttrs(struct symmComm* comm);

#endif
