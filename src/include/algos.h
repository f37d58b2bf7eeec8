/* SPDX-License-Identifier: Apache-2.0 */
/* C entry points of the kernels in src/algos: what exists, how much memory it needs, launching. */
#ifndef SYMMCOLL_ALGOS_H
#define SYMMCOLL_ALGOS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "nccl_api.h"
#include "symm_peers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A second stream of this rank's transport (non-blocking, same device) and two events to fork
 * work of an eager call onto it and join it back. Never used under capture: a stream forked into
 * a capture stays in it until the capture ends (src/algos/copyengine.c). */
struct symmSideStream {
  cudaStream_t stream;
  cudaEvent_t fork, join;
};

/* One collective call of ours as the launcher sees it. Every field that changes what runs is
 * identical on all ranks (the host decided it from identical inputs). */
struct symmLaunch {
  enum symmColl coll;
  enum symmAlgo algo;
  const void* sendbuff;
  void* recvbuff;
  /* NCCL's count argument: all-reduce count, all-gather sendcount, reduce-scatter recvcount. */
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;        /* built-in ops only (< ncclNumOps); all-gather ignores it */
  int emulateMultimem;   /* multimem kernels with loops over peer pointers instead of multicast */
  /* Grid bounds from the communicator's ncclConfig_t (maxCTAs, minCTAs, CTA policy), the same on
   * all ranks; 0 = the library's default. */
  int maxBlocks, minBlocks;
  /* NULL, or every rank's address of the buffer this algorithm may use in place because it lies
   * in a registered symmetric window on every rank (or was exchanged for a CUDA graph): the
   * output where windowsAreOutputs (all-gather; all-reduce from
   * SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES), else the input. */
  void* const* windowPeers;
  int windowsAreOutputs;
  /* ncclCommRegister zero-copy (all-reduce two-shot): this rank's input descriptor
   * (SYMM_USER_REG_DESC, or 0) and whether descriptors are exchanged in this call (same on all
   * ranks; without it inputDesc must be 0). */
  uint64_t inputDesc;
  int exchangeDescs;
  /* Launch with programmatic stream serialization (src/algos/sync.cuh, kernelEntry): the
   * SYMMCOLL_PDL knob and every rank sm_90 or newer. */
  int pdl;
  /* The transport's side stream (an eager copy-engine all-gather copies our own part there,
   * beside the peer copies). Not a decision: host resources only. */
  struct symmSideStream side;
};

/* 1 when `algo` has kernels for (coll, datatype, op). All-gather ignores op. Multimem: the
 * types and ops multimem.ld_reduce / multimem.st support (emulation follows the same list). */
int symmAlgoExists(enum symmColl coll, enum symmAlgo algo, ncclDataType_t datatype,
                   ncclRedOp_t op);

/* 1 when a call of `bytes` (symmCollBytes) fits `algo` with this staging size and rank count
 * (e.g. the Lamport kernels have a largest message); the launcher refuses what does not fit. */
int symmAlgoFits(enum symmColl coll, enum symmAlgo algo, size_t bytes, int nranks,
                 size_t stagingBytes);

/* Staging bytes per rank that the staged algorithms need to run messages up to
 * `largestMessage` bytes (symmCollBytes) on `nranks` ranks in few launches/rounds. Larger
 * messages still run (in rounds or several launches), only slower. The transport allocates
 * min(this, SYMMCOLL_BUFFER_BYTES). */
size_t symmAlgosStagingBytes(int nranks, size_t largestMessage);

/* Bytes of the signal pad each rank needs (signal words, descriptor words). */
size_t symmAlgosPadBytes(void);
/* Bytes of private per-rank device state (epochs, tickets, userRegTable) each rank needs. */
size_t symmAlgosLocalStateBytes(void);

/* Loads every kernel into `device`'s context now (once per device and process). CUDA loads
 * kernels lazily by default, and a lazy load may wait until the context is idle: a rank whose
 * spinning kernel waits for a rank whose launch is stuck behind such a load deadlocks. NCCL
 * preloads its kernels for the same reason. Fails (one WARN per process) when the kernels have
 * no image for this device and cannot be JIT-compiled. */
ncclResult_t symmAlgosLoadKernels(int device);

/* Enqueues the call on `stream` (capturable, host-only work apart from the launches). count 0
 * launches nothing. Collective: every rank issues the same sequence of launches on its peers.
 * Messages larger than staging allows run in rounds or several launches. */
ncclResult_t symmCollLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                            cudaStream_t stream);

/* A call of exactly one kernel launch, as issued, to be issued again for an identical call
 * (src/enqueue.c): the kernel, its grid, its arguments. The arguments hold only addresses fixed
 * for the communicator's life and the call's own buffers (src/algos/sync.cuh), so they are
 * valid for any later call with the same decision. */
#define SYMM_LAUNCH_ARGS_BYTES 512
struct symmLaunchRecord {
  int valid;
  int pdl; /* launched with programmatic stream serialization */
  unsigned blocks;
  void* kernel;   /* CUkernel */
  void* function; /* CUfunction of `kernel` in the context of the replays; NULL until one */
  uint64_t args[SYMM_LAUNCH_ARGS_BYTES / sizeof(uint64_t)];
};

/* symmCollLaunch, also filling *record (valid only when the call was one kernel launch through
 * the driver, and carries no per-call descriptor). */
ncclResult_t symmCollLaunchRecorded(const struct symmLaunch* call, const struct symmPeers* peers,
                                    cudaStream_t stream, struct symmLaunchRecord* record);

/* Issues a valid record's launch again on `stream`: 1. 0 when the driver refuses it (another
 * current context, say): nothing was launched, and the caller launches the call itself. */
int symmCollReplay(struct symmLaunchRecord* record, cudaStream_t stream);

/* Abort: writes 1 into every copy-engine barrier word of this rank's pad from `stream` (a
 * private one), so a stream stalled in a copy-engine all-gather moves on. Its stream resets a
 * word before waiting on it again: the caller repeats this until the stream has drained. */
void symmCopyEngineRelease(const struct symmPeers* peers, cudaStream_t stream);

/* The Lamport region in every staging buffer (when staging holds 4x it): two parities of one
 * writer slot per rank, each slot twice its writer's payload (flags). */
#define SYMM_LAMPORT_REGION_BYTES ((size_t)8 << 20)

/* Largest payload of one writer of the Lamport kernels (symmCollBytes: the whole message of an
 * all-reduce, one rank's share of the others) in a world of nranks: 1 MiB at 2 ranks, 256 KiB
 * otherwise. */
size_t symmLamportMaxBytes(int nranks);

/* Most thread blocks of any kernel of ours (grids pair block b with block b on every peer). */
#define SYMM_MAX_BLOCKS 128

/* Word of the kernels' signal (purpose, block, writer) in a pad, for host readers (the tests'
 * hang reports); src/algos/sync.cuh owns the layout and checks this against it. */
#define SYMM_PAD_SIGNAL_WORD(purpose, block, writer) \
  (8 + ((purpose) * SYMM_MAX_BLOCKS + (block)) * SYMM_MAX_RANKS + (writer))

/* The copy-engine all-gather's barrier words (src/algos/copyengine.c): in each rank's signal pad,
 * one 64-bit word per (kind, writer) of which the stream memory operations use the low 32 bits
 * (0 or 1). They sit in the rows of the pad's third signal purpose (sync.cuh checks it), which
 * no kernel uses. */
enum symmCeWord { SYMM_CE_ARRIVE = 0, SYMM_CE_READY = 1, SYMM_CE_EXIT = 2, SYMM_CE_KINDS = 3 };
#define SYMM_PAD_CE_BASE SYMM_PAD_SIGNAL_WORD(2, 0, 0)
static inline size_t symmPadCeWord(enum symmCeWord kind, int writer) {
  return (size_t)SYMM_PAD_CE_BASE + (size_t)kind * SYMM_MAX_RANKS + (size_t)writer;
}

/* The two-shot's split-round signals (SYMMCOLL_TWOSHOT_SPLIT): the pad's fourth purpose
 * (start-rest) and, right after it, the fifth (mid-first); sync.cuh checks both. Host readers:
 * the tests that check the split reaches the kernel. */
#define SYMM_PAD_SPLIT_START_REST_BASE SYMM_PAD_SIGNAL_WORD(3, 0, 0)
#define SYMM_PAD_SPLIT_MID_FIRST_BASE SYMM_PAD_SIGNAL_WORD(4, 0, 0)

/* errorFlag / failure-word values a kernel (or the host) writes; several may be or-ed. */
#define SYMM_ERR_ABORT 1u    /* ncclCommAbort / ncclCommRevoke seen */
#define SYMM_ERR_DEADLINE 2u /* SYMMCOLL_SPIN_DEADLINE_MS (debugging, off by default) fired */
#define SYMM_ERR_BAD_DESC 4u /* a peer published a registered input we have not mapped */
#define SYMM_ERR_PEER 8u     /* another rank failed the communicator (its pad's failure word) */
/* A rank's host could not launch or order one of our calls, or finish a setup exchange. */
#define SYMM_ERR_LAUNCH 16u

#ifdef __cplusplus
}
#endif

#endif
