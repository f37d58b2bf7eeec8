/* SPDX-License-Identifier: Apache-2.0 */
/* C entry points of the all-reduce kernels in src/algos (launchers and what they support). */
#ifndef SYMMCOLL_ALGOS_H
#define SYMMCOLL_ALGOS_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "nccl_api.h"
#include "symm_peers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Our all-reduce algorithms; SYMM_AR_NCCL means "forward to the real NCCL". */
enum symmArAlgo {
  SYMM_AR_NCCL = 0,
  SYMM_AR_ONESHOT = 1,
  SYMM_AR_TWOSHOT = 2,
  SYMM_AR_MULTIMEM = 3,
  SYMM_AR_LAMPORT = 4, /* one-shot without barriers: data carries its own epoch flags */
  SYMM_AR_NALGOS = 5
};

/* One all-reduce as the launcher sees it. */
struct symmAllReduceCall {
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op; /* built-in ops only (< ncclNumOps) */
  enum symmArAlgo algo;
  int emulateMultimem; /* multimem kernel with loops over peer pointers instead of multicast */
  /* NULL, or every rank's address of sendbuff in a registered symmetric window (zero-copy
   * input for the two-shot kernel; the other kernels ignore it). */
  void* const* inputPeers;
  /* Two-shot, ncclCommRegister zero-copy: this rank's input descriptor (SYMM_USER_REG_DESC, or
   * 0: it goes through staging). Rank-local; the kernel tells every peer which it is. */
  uint64_t inputDesc;
  /* Two-shot: every rank publishes its descriptor and reads the peers' (decided identically on
   * all ranks, by size). Without it inputDesc must be 0. */
  int exchangeDescs;
};

/* 1 when `algo` has a kernel for this datatype/op (multimem: the types and ops that
 * multimem.ld_reduce supports; emulation follows the same list). */
int symmAllReduceKernelExists(enum symmArAlgo algo, ncclDataType_t datatype, ncclRedOp_t op);

/* Loads every all-reduce kernel into `device`'s context now (once per device and process).
 * CUDA loads kernels lazily by default, and a lazy load may wait until the context is idle:
 * if a rank's spinning kernel waits for a rank whose launch is stuck behind such a load, they
 * deadlock (seen with several ranks per process). NCCL preloads its kernels for the same
 * reason. Fails when the kernels have no image for this device. */
ncclResult_t symmAllReduceLoadKernels(int device);

/* Enqueues the all-reduce on `stream` (capturable). Messages larger than half the staging
 * buffer run as several launches. count 0 launches nothing. The call is collective: every
 * rank must issue the same sequence of launches (same algo, count, datatype) on its peers. */
ncclResult_t symmAllReduceLaunch(const struct symmAllReduceCall* call,
                                 const struct symmPeers* peers, cudaStream_t stream);

/* Bytes of one launch (chunk) of the staged algorithms for this staging buffer. */
size_t symmAllReduceChunkBytes(const struct symmPeers* peers);

/* Lamport one-shot: messages up to SYMM_AR_LAMPORT_MAX_BYTES, in a region at the end of the
 * staging buffer (2 parities x 8 writer slots x 2x the message: each 8 bytes travel as
 * 4 data + 4 flag + 4 data + 4 flag), present when bufferBytes >= 4 x that region. */
#define SYMM_AR_LAMPORT_MAX_BYTES ((size_t)256 << 10)
#define SYMM_AR_LAMPORT_REGION_BYTES ((size_t)2 * SYMM_MAX_RANKS * 2 * SYMM_AR_LAMPORT_MAX_BYTES)
int symmAllReduceLamportFits(size_t bytes, size_t bufferBytes);

/* Layout facts shared with tests and the transport (see src/algos/README.md). */
#define SYMM_AR_MAX_BLOCKS 128
#define SYMM_AR_SIGNAL_PURPOSES 3
#define SYMM_AR_SIGNAL_WORDS (SYMM_AR_SIGNAL_PURPOSES * SYMM_AR_MAX_BLOCKS * SYMM_MAX_RANKS)
/* After the signal words: one 64-bit input descriptor per (block, writer rank). */
#define SYMM_AR_DESC_WORDS (SYMM_AR_MAX_BLOCKS * SYMM_MAX_RANKS)
#define SYMM_AR_PAD_BYTES (SYMM_AR_SIGNAL_WORDS * sizeof(uint32_t) + SYMM_AR_DESC_WORDS * sizeof(uint64_t))
#define SYMM_AR_STATE_WORDS 2

/* errorFlag values a kernel writes. */
#define SYMM_AR_ERROR_ABORT 1u
#define SYMM_AR_ERROR_TIMEOUT 2u
#define SYMM_AR_ERROR_BAD_DESC 4u /* a peer published a registered input we have not mapped */

#ifdef __cplusplus
}
#endif

#endif
