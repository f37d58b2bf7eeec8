/* SPDX-License-Identifier: Apache-2.0 */
/* The contract between src/transport (which builds peer-mapped memory) and src/algos (whose
 * kernels use it). Plain C, also included by .cu files; passed to kernels by value, so it holds
 * only addresses that stay fixed for the communicator's life (safe to bake into CUDA graphs). */
#ifndef SYMMCOLL_SYMM_PEERS_H
#define SYMMCOLL_SYMM_PEERS_H

#include <stddef.h>
#include <stdint.h>

/* Compile-time bound on ranks of a symmetric communicator; SYMMCOLL_MAX_RANKS narrows it. */
#define SYMM_MAX_RANKS 8

/* ncclCommRegister zero-copy (src/transport/userreg.c): each rank numbers its registered regions
 * in SYMM_USER_REG_SLOTS slots. An all-reduce input descriptor is 0 ("my input went through
 * staging") or SYMM_USER_REG_DESC(slot, byte offset of the input in that region's allocation). */
#define SYMM_USER_REG_SLOTS 32
#define SYMM_USER_REG_DESC(slot, offset) ((((uint64_t)(slot) + 1u) << 48) | (uint64_t)(offset))
#define SYMM_USER_REG_DESC_SLOT(desc) ((int)((desc) >> 48) - 1)
#define SYMM_USER_REG_DESC_OFFSET(desc) ((desc) & ((((uint64_t)1) << 48) - 1u))

/* Word 0 of every rank's signal pad is the communicator's failure word: 0 while healthy, else
 * SYMM_ERR_* bits. A kernel (or host) of any rank that fails the communicator writes its reason
 * into every rank's pad (system-scope release store); every spin loop of every rank polls its own
 * pad's word beside the abort flag, reports SYMM_ERR_PEER through errorFlag and leaves without
 * touching user memory. Never cleared: a failed communicator stays failed until abort/destroy. */
#define SYMM_PAD_FAIL_WORD 0

/* Word 1 of every rank's signal pad holds the constant 1 (its low 32 bits), written at allocation
 * before any peer maps the pad and never changed: the copy-engine barriers (src/algos) copy it
 * into peers' words with the copy engines, which cannot write an immediate value. */
#define SYMM_PAD_ONE_WORD 1

/* localState (below), this rank's private 64-bit words of the kernels (src/algos/sync.cuh):
 *   SYMM_STATE_EPOCH           the last epoch used on this communicator;
 *   SYMM_STATE_GAVE_UP         0, or the SYMM_ERR_* reasons for which a kernel of ours (or the
 *                              tests' injected failure) gave up on this rank: sticky, every later
 *                              kernel of ours here leaves before it stores anything;
 *   SYMM_STATE_LAMPORT_CURSORS two words, the Lamport refresh cursors (one per parity);
 *   SYMM_STATE_TICKET          blocks of the running call that have read the epoch.
 * The epoch and the gave-up word are one 16-byte aligned pair, read with one load. The words
 * past SYMM_STATE_KERNEL_WORDS are not the kernels': the transport keeps its table of registered
 * inputs there (src/transport/userreg.c, at 4 KiB). */
#define SYMM_STATE_EPOCH 0
#define SYMM_STATE_GAVE_UP 1
#define SYMM_STATE_LAMPORT_CURSORS 2
#define SYMM_STATE_TICKET 4
#define SYMM_STATE_KERNEL_WORDS 5

struct symmPeers {
  int rank, nranks;
  /* Most ranks of this communicator that share one GPU (1 in production; more only in tests that
   * run several ranks per GPU). Identical on all ranks: kernels use it to keep their grids small
   * enough that every rank's blocks on a GPU can be resident at once. 0 reads as 1. */
  int ranksPerDevice;
  /* Each rank's staging buffer, mapped in this process (buffers[rank] is our own), zeroed at
   * allocation (the Lamport region too: a zero line never matches an epoch, which starts at 1). */
  void* buffers[SYMM_MAX_RANKS];
  size_t bufferBytes;
  /* Each rank's signal pad: aligned 64-bit words, zeroed at allocation but for the constant,
   * mapped here. Word SYMM_PAD_FAIL_WORD is the failure word above and SYMM_PAD_ONE_WORD the
   * constant 1; src/algos owns the rest of the layout. */
  uint64_t* signals[SYMM_MAX_RANKS];
  size_t signalBytes;
  /* This rank's private device memory for epochs and kernel state (not peer-mapped), zeroed,
   * 16-byte aligned (SYMM_STATE_* words above). */
  uint64_t* localState;
  size_t localStateBytes;
  /* Host-mapped flag set by ncclCommAbort/Revoke; every spin loop polls it. */
  volatile uint32_t* abortFlag;
  /* Host-mapped word where this rank's kernels report why they stopped (SYMM_ERR_* bits); the
   * host reads it for ncclCommGetAsyncError and fails the communicator. */
  volatile uint32_t* errorFlag;
  /* Device table in this rank's private memory, [writer rank][slot]: the address here of the
   * allocation that rank registered in that slot, 0 where not mapped here. Written by the host
   * before it acknowledges the mapping to the writer, so a kernel that sees a writer's descriptor
   * finds the entry filled. */
  const uint64_t* userRegTable;
  /* Multicast address of the staging buffers, or NULL (never set where multicast is off). */
  void* multicastBuffer;
};

#endif
