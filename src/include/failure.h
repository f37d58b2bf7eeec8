/* SPDX-License-Identifier: Apache-2.0 */
/* A communicator fails as a whole: after any error of ours every later call on it returns the
 * error NCCL would (the asynchronous error), on every rank, until abort or destroy. */
#ifndef SYMMCOLL_FAILURE_H
#define SYMMCOLL_FAILURE_H

#include <stdint.h>

#include "comm.h"

/* The error a communicator failed for SYMM_ERR_* `bits` reports (ncclCommGetAsyncError and
 * every later call): a peer's failure (its failure word, a vanished or late peer, its host that
 * could not launch) is ncclRemoteError; our own launch or ordering failure
 * ncclUnhandledCudaError; an inconsistent registered buffer ncclInternalError; abort
 * ncclInvalidUsage (the communicator is going away). 0 bits: ncclSuccess. */
ncclResult_t symmFailureResult(uint32_t bits);

/* Adds `bits` to the state; the first call with non-zero bits moves it from healthy to failed
 * (its result is then fixed) and returns 1. Thread-safe, lock-free. */
int symmFailureRecord(struct symmFailure* f, uint32_t bits);
/* ncclSuccess while healthy, else the error every call returns. */
ncclResult_t symmFailureGet(const struct symmFailure* f);

/* ncclCommGetAsyncError's answer from the real NCCL's and ours: a real error wins (it is the
 * root cause NCCL saw), then ours, then the real state (ncclSuccess or ncclInProgress). */
ncclResult_t symmFailureCombine(ncclResult_t real, ncclResult_t ours);

/* Fails `comm` for `bits` (no-op if it already failed, bits are still or-ed). With `tellPeers`
 * (a failure our kernels could not report themselves: a launch or ordering failure on this
 * host) SYMM_ERR_LAUNCH is also written into every rank's failure word, so that peers' kernels
 * stop waiting for ours and every rank fails. Caller holds comm->launchLock (with `tellPeers`;
 * without, it only records and logs, lock-free). */
void symmCommFail(struct symmComm* comm, uint32_t bits, int tellPeers);

/* A failure to order our operations or forwarded calls (`res`, ncclSuccess: nothing): once
 * staging exists it fails `comm` on every rank (symmCommFail with tellPeers: peers' kernels may
 * wait for ours). Before that nothing of ours depends on it: the caller's error is the answer,
 * as NCCL's own launch failure would be (failing this rank alone would have it refuse calls its
 * peers still make, and peers hear of failures only through staging's pads). Caller holds
 * comm->launchLock. */
void symmCommFailOrdering(struct symmComm* comm, ncclResult_t res);

/* The per-call check (caller holds comm->launchLock, or transportLock, which also keeps the
 * transport while it reads): our recorded failure, else a kernel's error word, which then fails
 * the communicator. ncclSuccess while healthy. */
ncclResult_t symmCommHealth(struct symmComm* comm);

/* ncclCommGetAsyncError's part: symmCommHealth, plus the failure word of our own signal pad
 * written by a peer while no kernel of ours runs here (read back asynchronously: seen by a
 * later poll). Takes comm->launchLock itself, but never waits for it: while another thread holds
 * it (a launch, which may block behind our kernels), only the kernels' error word is read. */
ncclResult_t symmCommPollHealth(struct symmComm* comm);

#endif
