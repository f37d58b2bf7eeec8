/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator setup (src/setup.c): at creation (blocking), at the outermost ncclGroupEnd of a
 * group that created it, or in a non-blocking communicator's background job (src/init.c). */
#ifndef SYMMCOLL_SETUP_H
#define SYMMCOLL_SETUP_H

#include "comm.h"

/* Sets up freshly created, ready communicators (all ranks of each call it collectively): reads
 * their rank, size and device from the real NCCL, loads our kernels, then symmSetupAgree. */
ncclResult_t symmCommSetupMany(struct symmComm** comms, int n);

/* The setup exchange: decides eligibility (records, peer access, agreed knobs) and has each
 * rank build its private state; staging comes later (symmTransportStage). Collective: every
 * rank of each communicator calls it at the same point; `comms` holds the communicators one
 * thread created together (ncclCommInitAll, a group of inits). Never fails the user's
 * communicator: an ineligible or failed setup leaves comm->transport NULL (forwarding), with one
 * INFO line. Sets comm->arch, comm->link and comm->tuneTable (agreed). */
ncclResult_t symmSetupAgree(struct symmComm** comms, int n);

#endif
