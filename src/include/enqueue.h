/* SPDX-License-Identifier: Apache-2.0 */
/* One enqueue path for every collective we may run (NCCL's ncclEnqueueCheck + taskAppend): the
 * call's route (src/route.c) is asked until it decides, with the facts it asks for gathered in
 * the order it asks, and then carried out: refuse, forward (ordered with every other operation
 * on the communicator), or launch now, at the outermost group end, or once staging is built. */
#ifndef SYMMCOLL_ENQUEUE_H
#define SYMMCOLL_ENQUEUE_H

#include <cuda_runtime.h>

#include "algos.h"
#include "coll.h"
#include "comm.h"
#include "forwarded.h"
#include "nccl_api.h"
#include "order.h"
#include "route.h"

/* The whole path for ncclAllReduce, ncclAllGather and ncclReduceScatter. */
ncclResult_t symmEnqueue(const struct symmTask* task);

#endif
