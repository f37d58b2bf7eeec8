/* SPDX-License-Identifier: Apache-2.0 */
/* The recording fake NCCL's log, as the forwarding tests read it (fake_nccl.c writes it). */
#ifndef SYMMCOLL_TEST_FAKE_NCCL_H
#define SYMMCOLL_TEST_FAKE_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_api.h"

#define FAKE_MAX_ARGS 10
#define FAKE_MAX_OUTPUTS 4
#define FAKE_VALUE_BYTES 128 /* the largest by-value argument: ncclUniqueId */
#define FAKE_LOG_CALLS 512

/* What the fake returns from ncclGetVersion: the real NCCL's plus one, so a test can tell. */
#define FAKE_VERSION (NCCL_VERSION_CODE + 1)
/* Handles the creation calls hand out (one per call kind, so the tests can tell them apart). */
#define FAKE_COMM_INIT_RANK ((ncclComm_t)(uintptr_t)0x1000)
#define FAKE_COMM_INIT_CONFIG ((ncclComm_t)(uintptr_t)0x2000)
#define FAKE_COMM_INIT_SCALABLE ((ncclComm_t)(uintptr_t)0x3000)
#define FAKE_COMM_INIT_ALL(i) ((ncclComm_t)(uintptr_t)(0x4000 + 0x10 * (i)))
#define FAKE_COMM_SPLIT ((ncclComm_t)(uintptr_t)0x5000)
#define FAKE_COMM_SHRINK ((ncclComm_t)(uintptr_t)0x6000)
#define FAKE_COMM_COUNT 7
#define FAKE_COMM_RANK 3
#define FAKE_COMM_DEVICE 5
#define FAKE_ASYNC_ERROR ncclRemoteError
#define FAKE_MEM_ALLOC_PTR ((void*)(uintptr_t)0xa110c000)
#define FAKE_REG_HANDLE ((void*)(uintptr_t)0x4e6d000)
#define FAKE_WINDOW ((ncclWindow_t)(uintptr_t)0x3d0000)
#define FAKE_PREMULSUM_OP ((ncclRedOp_t)7)
#define FAKE_SIM_TIME 42.5f
#define FAKE_LAST_ERROR "fake NCCL: last error"
#define FAKE_TEAM_WORLD ((symmNcclTeam_t){8, 3, 1})
#define FAKE_TEAM_LSA ((symmNcclTeam_t){4, 1, 2})
#define FAKE_TEAM_RAIL ((symmNcclTeam_t){2, 0, 4})
#define FAKE_RANK_TO_WORLD(rank) ((rank) + 1000)
#define FAKE_RANK_TO_LSA(rank) ((rank) + 2000)
#define FAKE_LLA2A_SLOTS(maxElts, maxEltSize) ((maxElts) * 3 + (maxEltSize))
/* The first bytes written into opaque out-structs (handles, requirements, device comms). */
#define FAKE_OPAQUE_WORD 0x0fa4e0fau

struct fakeValue {
  char name[32]; /* the parameter's name in nccl_api.h */
  size_t size;
  unsigned char bytes[FAKE_VALUE_BYTES];
};

/* An out-parameter the fake wrote: where, and what. */
struct fakeOutput {
  char name[32];
  void* addr;
  size_t size;
  unsigned char bytes[FAKE_VALUE_BYTES];
};

struct fakeCall {
  char name[48];
  int nargs, noutputs, hasReturn;
  struct fakeValue args[FAKE_MAX_ARGS];
  struct fakeOutput outputs[FAKE_MAX_OUTPUTS];
  struct fakeValue returned;
};

/* The kind of value an entry point returns (RET_NONE: void). */
enum fakeReturnKind { RET_NONE, RET_RESULT, RET_STRING, RET_INT, RET_TEAM };
#define RETURN_KIND(x)                                                                       \
  _Generic((x), ncclResult_t: RET_RESULT, const char*: RET_STRING, int: RET_INT,             \
           symmNcclTeam_t: RET_TEAM)

/* Exported by the fake (tests look them up with dlsym). */
typedef int (*fakeNcclCallCountFn)(void);             /* calls since load (never wraps) */
typedef const struct fakeCall* (*fakeNcclCallFn)(int index); /* NULL when dropped or not yet made */
typedef void (*fakeNcclSetResultFn)(ncclResult_t result);   /* what ncclResult_t calls return */
/* What the entry point `name` returns, over fakeNcclSetResult (NULL name: forget them all). */
typedef void (*fakeNcclSetResultForFn)(const char* name, ncclResult_t result);
/* What ncclCommGetAsyncError reports (FAKE_ASYNC_ERROR until set); leaving ncclInProgress first
 * stores the children fakeNcclDeferChildren held back. */
typedef void (*fakeNcclSetAsyncErrorFn)(ncclResult_t result);
/* 1: ncclCommSplit/Shrink store NULL and the child handle only when the asynchronous state
 * leaves ncclInProgress, or at ncclCommAbort/Destroy (NCCL 2.28's non-blocking split); 0: at
 * once (default). */
typedef void (*fakeNcclDeferChildrenFn)(int on);
/* Runs fn on a thread of the fake's own and returns its answer, as NCCL's group job calls its
 * exported functions from its own threads (where they land in libsymmcoll's). */
typedef int (*fakeNcclRunOnOwnThreadFn)(int (*fn)(void));

#endif
