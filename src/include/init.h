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
/* ncclInProgress while a job runs, else ncclSuccess. */
ncclResult_t symmCommJobState(const struct symmComm* comm);
/* Waits for a running job (a call that came before ncclCommGetAsyncError said ncclSuccess, or
 * teardown). */
void symmCommWaitJob(struct symmComm* comm);

#endif
