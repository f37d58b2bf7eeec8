/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator creation and destruction: forward to the real NCCL, then keep our side table. */
#include <stdlib.h>

#include "checks.h"
#include "comm.h"
#include "forward.h"
#include "group.h"
#include "transport.h"

static int configBlocking(const ncclConfig_t* config) { return symmConfigBlocking(config, 1); }

/* ncclCommSplit/Shrink without a config inherit the parent's. */
static int childBlocking(ncclComm_t parent, const ncclConfig_t* config) {
  const struct symmComm* p = symmCommFind(parent);
  return symmConfigBlocking(config, p != NULL ? p->blocking : 1);
}

/* Records a communicator the real NCCL returned; sets it up now or at the outermost GroupEnd.
 * A non-blocking one is set up after its first all-reduce instead (symmCommSetupOnFirstUse):
 * its ranks may see it ready at different calls, but they all issue the same operations.
 * Our failures never fail the user's call: the communicator then simply forwards. */
static void commCreated(ncclResult_t res, ncclComm_t real, int blocking) {
  if ((res != ncclSuccess && res != ncclInProgress) || real == NULL) return;
  struct symmComm* comm = NULL;
  if (symmCommAdd(real, blocking, &comm) != ncclSuccess) return;
  if (!blocking) return;
  if (symmGroupDepth() > 0) {
    if (symmGroupDeferSetup(comm) != ncclSuccess) comm->setupDone = 1;
    return;
  }
  if (res == ncclSuccess) (void)symmCommSetupMany(&comm, 1);
}

#define LOAD_OR_FAIL()                                          \
  do {                                                          \
    if (symmRealLoad() != ncclSuccess) return ncclSystemError;  \
  } while (0)

SYMM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                          int rank) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRank, (comm, nranks, commId, rank), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommInitRank, (comm, nranks, commId, rank));
  if (comm != NULL) commCreated(res, *comm, 1);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRank,
                     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))

SYMM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                int rank, ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRankConfig, (comm, nranks, commId, rank, config),
                              ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommInitRankConfig, (comm, nranks, commId, rank, config));
  if (comm != NULL) commCreated(res, *comm, configBlocking(config));
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankConfig,
                     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                      ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId* commIds,
                                                  ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitRankScalable,
                              (newcomm, nranks, myrank, nId, commIds, config), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommInitRankScalable, (newcomm, nranks, myrank, nId, commIds, config));
  if (newcomm != NULL) commCreated(res, *newcomm, configBlocking(config));
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                     (ncclComm_t * newcomm, int nranks, int myrank, int nId,
                      ncclUniqueId* commIds, ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommInitAll, (comms, ndev, devlist), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommInitAll, (comms, ndev, devlist));
  if (res != ncclSuccess || comms == NULL || ndev <= 0) return res;
  /* One thread owns every rank: set them up together, as one deferred group. */
  struct symmComm** entries = calloc((size_t)ndev, sizeof(*entries));
  if (entries == NULL) return res;
  int n = 0;
  for (int i = 0; i < ndev; i++)
    if (comms[i] != NULL && symmCommAdd(comms[i], 1, &entries[n]) == ncclSuccess) n++;
  if (symmGroupDepth() > 0) {
    for (int i = 0; i < n; i++) (void)symmGroupDeferSetup(entries[i]);
  } else if (n == ndev) {
    (void)symmCommSetupMany(entries, n);
  }
  free(entries);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

SYMM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommSplit, (comm, color, key, newcomm, config), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  const int blocking = childBlocking(comm, config);
  SYMM_CALL_REAL(res, ncclCommSplit, (comm, color, key, newcomm, config));
  if (newcomm != NULL) commCreated(res, *newcomm, blocking);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommSplit,
                     (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

SYMM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommShrink,
                              (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
                              ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  const int blocking = childBlocking(comm, config);
  SYMM_CALL_REAL(res, ncclCommShrink,
                 (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  if (newcomm != NULL) commCreated(res, *newcomm, blocking);
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommShrink,
                     (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                      ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags))

/* Our resources go first (they may still need the real communicator), then the real one's. */
static void commGone(ncclComm_t real, int abort) {
  struct symmComm* comm = symmCommFind(real);
  if (comm == NULL) return;
  symmTransportTeardown(comm, abort);
  symmCommRemove(real);
}

/* After finalize no collective may run: our memory goes now (the entry stays until destroy). */
SYMM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (symmRealDepth == 0) symmTransportTeardown(symmCommFind(comm), 0);
  SYMM_FORWARD(ncclCommFinalize, (comm), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

SYMM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (symmRealDepth == 0) commGone(comm, 0);
  SYMM_FORWARD(ncclCommDestroy, (comm), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

SYMM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (symmRealDepth == 0) commGone(comm, 1);
  SYMM_FORWARD(ncclCommAbort, (comm), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

/* Revoke stops our spinning kernels too (the communicator stays until destroy/abort). */
SYMM_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (symmRealDepth == 0) symmTransportSetAbort(symmCommFind(comm));
  SYMM_FORWARD(ncclCommRevoke, (comm, revokeFlags), ncclSystemError);
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

/* The real NCCL's answer, overridden by ours when one of our kernels gave up. */
SYMM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  SYMM_FORWARD_IF_PASSTHROUGH(ncclCommGetAsyncError, (comm, asyncError), ncclSystemError);
  LOAD_OR_FAIL();
  ncclResult_t res;
  SYMM_CALL_REAL(res, ncclCommGetAsyncError, (comm, asyncError));
  if (res == ncclSuccess && asyncError != NULL &&
      (*asyncError == ncclSuccess || *asyncError == ncclInProgress)) {
    ncclResult_t ours = symmTransportAsyncError(symmCommFind(comm));
    if (ours != ncclSuccess) *asyncError = ours;
  }
  return res;
}
SYMM_PROFILING_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
