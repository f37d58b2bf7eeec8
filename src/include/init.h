/* SPDX-License-Identifier: Apache-2.0 */
/* Setting communicators up (src/init.c): at creation for blocking ones, in a background job for
 * non-blocking ones, whose ncclCommGetAsyncError says ncclInProgress until the job is done. */
#ifndef SYMMCOLL_INIT_H
#define SYMMCOLL_INIT_H

#include "comm.h"

/* Non-blocking communicators: a background job that first waits until the real NCCL has
 * finished what it is doing on the communicator, then runs the creation setup (`staging` = 0)
 * or builds staging (`staging` = 1). Users may not use a communicator before
 * ncclCommGetAsyncError says ncclSuccess, so the job has it to itself; nothing blocks the
 * caller. */
void symmCommStartJob(struct symmComm* comm, int staging);
struct symmWindowReg;
/* A non-blocking communicator's window registration that the real NCCL left in progress: a job
 * waits until it is complete (a barrier over every rank, which one thread driving several ranks
 * reaches only after this call returns), then maps the peers' windows (collective). 1 when
 * started; 0 when not (another job runs, or none could start): the caller then waits itself. */
int symmCommStartWindowJob(struct symmComm* comm, const struct symmWindowReg* reg);
/* ncclInProgress while a job runs, else ncclSuccess. */
ncclResult_t symmCommJobState(const struct symmComm* comm);
/* Waits for a running job (a call that came before ncclCommGetAsyncError said ncclSuccess, or
 * teardown). */
void symmCommWaitJob(struct symmComm* comm);

#endif
