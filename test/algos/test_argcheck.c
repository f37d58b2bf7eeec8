/* SPDX-License-Identifier: Apache-2.0 */
/* ncclAllReduce argument checks: what NCCL refuses reaches the real NCCL untouched, what it
 * does not check (overflow) is refused here, nothing launched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm.h"
#include "debug.h"
#include "harness.h"
#include "nccl_api.h"
#include "param.h"

int main(int argc, char** argv) {
  /* Logging first: src/core/knobs.c logs under its lock, which deadlocks if the first param read
   * (with the variable set) also has to initialise logging. */
  (void)symmLogLevel();
  void* fake = harnessUseFakeNccl(argc, argv, "test_argcheck /path/fake_nccl.so");
  if (fake == NULL) return harnessReport("test_argcheck");
  int* calls = dlsym(fake, "fakeAllReduceCalls");
  CHECK(calls != NULL);
  if (calls == NULL) return harnessReport("test_argcheck");

  /* A communicator we know (no symmetric memory: its transport is NULL). */
  ncclComm_t handle = (ncclComm_t)(uintptr_t)0x1000;
  struct symmComm* comm = NULL;
  CHECK_EQ_INT(symmCommAdd(handle, 1, &comm), ncclSuccess);
  comm->rank = 0;
  comm->nranks = 2;
  comm->cudaDev = 0;
  comm->attrsKnown = comm->setupDone = 1;
  float buf[4];

  /* Bad datatype and op: NCCL's own checks refuse them, so the real NCCL gets them untouched and
   * its answer comes back (the fake answers every call with ncclInvalidUsage): its error code,
   * its group failed, its sticky error on a non-blocking communicator, as without us. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)ncclNumTypes, ncclSum, handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)-1, ncclSum, handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)-1, handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(*calls, 3);
  /* count * size overflows size_t: ours to refuse (NCCL does not check it), nothing forwarded. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat32, ncclSum, handle, NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, (SIZE_MAX / 8) + 1, ncclInt64, ncclSum, handle, NULL),
               ncclInvalidArgument);
  CHECK_EQ_INT(*calls, 3);

  /* Largest count that does not overflow, for 1-byte types, is fine (forwarded here). */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, SIZE_MAX, ncclInt8, ncclSum, handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(*calls, 4);
  /* PreMulSum ops (>= ncclNumOps) and count 0 go to the real NCCL. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 1), handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 0, ncclFloat32, ncclSum, handle, NULL), ncclInvalidUsage);
  /* NULL buffers: NCCL decides. */
  CHECK_EQ_INT(ncclAllReduce(NULL, buf, 4, ncclFloat32, ncclSum, handle, NULL), ncclInvalidUsage);
  /* Valid call on a communicator without symmetric memory: forwarded. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclAvg, handle, NULL), ncclInvalidUsage);
  CHECK_EQ_INT(*calls, 8);
  /* NULL and unknown communicators: the real NCCL's answer comes back, even with bad args. */
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidUsage);
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum,
                             (ncclComm_t)(uintptr_t)0x2000, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(*calls, 10);
  /* SYMMCOLL_DISABLE=1: everything forwards, even bad datatypes on known communicators. */
  setenv("SYMMCOLL_DISABLE", "1", 1);
  symmParamResetAll();
  CHECK_EQ_INT(ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, handle, NULL),
               ncclInvalidUsage);
  CHECK_EQ_INT(*calls, 11);
  unsetenv("SYMMCOLL_DISABLE");
  symmParamResetAll();
  /* ReduceScatter and AllGather always forward (the fake has none: ncclSystemError). */
  CHECK_EQ_INT(ncclAllGather(buf, buf, 1, ncclFloat32, handle, NULL), ncclSystemError);

  symmCommRemove(handle);
  return harnessReport("test_argcheck");
}
