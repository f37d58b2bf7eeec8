/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in libnccl for CPU tests: records forwarded calls and returns a recognisable code. */
#include <stddef.h>

#include <nccl.h>

__attribute__((visibility("default"))) int fakeAllReduceCalls;

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}

/* ncclInvalidUsage marks "the real NCCL answered". */
__attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void* s, void* r,
                                                                  size_t count, ncclDataType_t dt,
                                                                  ncclRedOp_t op, ncclComm_t comm,
                                                                  cudaStream_t stream) {
  (void)s; (void)r; (void)count; (void)dt; (void)op; (void)comm; (void)stream;
  fakeAllReduceCalls++;
  return ncclInvalidUsage;
}
