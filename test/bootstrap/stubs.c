/* SPDX-License-Identifier: Apache-2.0 */
/* Every other NCCL entry point of the symbol list, as weak stubs that refuse (ncclInvalidUsage). */
#include <stdio.h>

#include "nccl_api.h"

/* The list's `fail` value for ncclResult_t entries is SYMM_FAIL_RESULT: make it "not supported". */
#undef SYMM_FAIL_RESULT
#define SYMM_FAIL_RESULT ncclInvalidUsage

/* bootstrap.c and boot_split.c define the supported calls strongly; the linker keeps those. */
#define BOOT_STUB(ret, name, params, args, fail)                                       \
  SYMM_EXPORT ret name params;                                                         \
  __attribute__((weak)) ret name params {                                              \
    fprintf(stderr, "nccl-bootstrap: %s is not supported by the test bootstrap\n", #name); \
    return fail;                                                                       \
  }
SYMMCOLL_ALL_FUNCS(BOOT_STUB)
#undef BOOT_STUB
