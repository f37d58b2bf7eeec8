/* SPDX-License-Identifier: Apache-2.0 */
/* The smallest NCCL application: asks ncclGetVersion and prints the answer. Linked to the
 * recording fake NCCL; test_torch_check.sh runs it under LD_PRELOAD=libsymmcoll as the ranks of
 * test/torch_preload_check.sh's stand-in for PyTorch, so that the library logs which NCCL it
 * forwards to exactly as it does under PyTorch. */
#include <stdio.h>

#include "nccl.h"

int main(void) {
  int version = 0;
  const ncclResult_t res = ncclGetVersion(&version);
  printf("ncclGetVersion: %d (%d)\n", version, (int)res);
  return res == ncclSuccess ? 0 : 1;
}
