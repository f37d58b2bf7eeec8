/* SPDX-License-Identifier: Apache-2.0 */
/* What the rest of libsymmcoll asks of src/transport. */
#ifndef SYMMCOLL_TRANSPORT_H
#define SYMMCOLL_TRANSPORT_H

#include "comm.h"

/* Decides eligibility and, when eligible, builds the peer-mapped memory of each communicator.
 * Collective: every rank of each communicator calls it at the same point; `comms` holds the
 * communicators one thread created together (ncclCommInitAll, a group of inits). Never fails the
 * user's communicator: an ineligible or failed setup leaves comm->transport NULL (forwarding). */
ncclResult_t symmTransportSetup(struct symmComm** comms, int n);

/* Releases everything symmTransportSetup built, in reverse order. `abort` marks an abort. */
void symmTransportTeardown(struct symmComm* comm, int abort);

#endif
