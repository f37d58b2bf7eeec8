/* SPDX-License-Identifier: Apache-2.0 */
/* Cross-GPU signalling for the kernels: system-scope release/acquire flags, 64-bit device-side
 * epochs, abort- and failure-aware spinning (rules and layout: README.md). */
#ifndef SYMMCOLL_SYNC_CUH
#define SYMMCOLL_SYNC_CUH

#include <stdint.h>
#include <stdio.h>

#include "algos.h"
#include "symm_peers.h"

namespace symm {

/* Everything a kernel needs; passed by value, holds only addresses fixed for the communicator's
 * life plus this call's buffers, so a captured graph replays it correctly. Never a flag value. */
struct KernelArgs {
  const void* send;
  void* recv;
  size_t count;
  char* staging[SYMM_MAX_RANKS];      /* each rank's staging buffer (both halves) */
  /* zeroCopy: each rank's address, as mapped here, of this call's buffer in a registered
   * window (or exchanged for a graph): its recvbuff for all-gather and where windowsOut, else
   * its sendbuff; else unused. */
  char* windows[SYMM_MAX_RANKS];
  uint64_t* signals[SYMM_MAX_RANKS];  /* each rank's signal pad (word 0: failure word) */
  uint64_t* localState;               /* SYMM_STATE_* words (symm_peers.h): epoch, gave-up word,
                                       * Lamport cursors, ticket */
  volatile uint32_t* abortFlag;
  volatile uint32_t* errorFlag;
  char* multicast;                    /* multicast address of the staging buffers, or NULL */
  size_t halfBytes;                   /* bytes of one staging half (multiple of 16) */
  /* Kernels in rounds (two-shot, all-gather push, reduce-scatter pull): most elements of one
   * rank's slice (share) per round, from staging and SYMMCOLL_AR_ROUND_BYTES; >= 16 bytes. */
  size_t sliceMax;
  size_t lamportOffset;               /* start of the Lamport region in each staging buffer */
  int lamportRegion;                  /* the staging buffers have a Lamport region */
  /* All-gather: elements between the ranks' parts of the output; reduce-scatter: between the
   * slices of the input. */
  size_t sliceStride;
  size_t slotStride;                  /* multimem all-gather and reduce-scatter: elements between
                                       * the ranks' slots in a staging half */
  uint64_t deadlineNs;                /* 0 = wait like NCCL: forever (abort still honoured) */
  int rank, nranks;
  int avg;                            /* ncclAvg: Arith::avgPre on inputs, avgPost on the sum */
  int zeroCopy;                       /* windows[] valid */
  int windowsOut;                     /* all-reduce: windows[] are the outputs (written in place) */
  /* ncclCommRegister zero-copy (two-shot): our input's descriptor, whether descriptors are
   * exchanged in this call, and the table that resolves peers' descriptors here. */
  uint64_t inputDesc;
  int exchangeDescs;
  const uint64_t* userRegTable;
  /* Two-shot split rounds (SYMMCOLL_TWOSHOT_SPLIT; the same on every rank): 0 off, 1 each
   * round's pushes in two pieces with a start signal each, 2 also a middle signal per piece. */
  int splitRounds;
  /* Host side only (the kernels never read it): launchKernel launches with programmatic stream
   * serialization (symmLaunch.pdl; kernelEntry says why that is safe). */
  int pdl;
};

/* Signal purposes: one word per (purpose, block, writer) in the reader's pad. The third
 * purpose's rows belong to the copy-engine all-gather (stream memory operations, no kernel); the
 * last two are the two-shot's split rounds: the start signal of a round's second piece, and the
 * middle signal of its first piece. */
enum { kSigStart = 0, kSigMid = 1, kSigCopyEngine = 2, kSigStartRest = 3, kSigMidFirst = 4 };

/* Pad layout (64-bit words): [0] failure word, [1] the copy-engine barriers' constant 1,
 * [2..7] unused, then the signal words, then one input descriptor per (block, writer). */
constexpr int kPadSignalBase = 8;
constexpr int kPadPurposes = 5;
constexpr int kPadSignalWords = kPadPurposes * SYMM_MAX_BLOCKS * SYMM_MAX_RANKS;
/* Bytes of the whole pad layout (symmAlgosPadBytes). */
constexpr size_t kPadBytes =
    (size_t)(kPadSignalBase + kPadSignalWords + SYMM_MAX_BLOCKS * SYMM_MAX_RANKS) * sizeof(uint64_t);

__host__ __device__ constexpr int signalIndex(int purpose, int block, int writer) {
  return kPadSignalBase + (purpose * SYMM_MAX_BLOCKS + block) * SYMM_MAX_RANKS + writer;
}
static_assert(SYMM_PAD_SIGNAL_WORD(kSigMid, 5, 3) == signalIndex(kSigMid, 5, 3),
              "the host's view of the signal words (algos.h) must match this layout");
static_assert(SYMM_PAD_CE_BASE == signalIndex(kSigCopyEngine, 0, 0) &&
                  SYMM_PAD_CE_BASE + SYMM_CE_KINDS * SYMM_MAX_RANKS <=
                      signalIndex(kSigCopyEngine + 1, 0, 0),
              "the copy-engine words (algos.h) must lie in their purpose's rows");
static_assert(SYMM_PAD_SPLIT_START_REST_BASE == signalIndex(kSigStartRest, 0, 0) &&
                  SYMM_PAD_SPLIT_MID_FIRST_BASE == signalIndex(kSigMidFirst, 0, 0) &&
                  kSigMidFirst == kSigStartRest + 1,
              "the host's view of the split-round rows (algos.h) must match this layout");

/* The descriptor writer `writer`'s block `block` left in a pad. */
__device__ __forceinline__ uint64_t* descSlot(uint64_t* pad, int block, int writer) {
  return pad + kPadSignalBase + kPadSignalWords + block * SYMM_MAX_RANKS + writer;
}

__device__ __forceinline__ uint64_t loadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void storeReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t loadRelaxedSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* The world size seen by a kernel whose loops over ranks are bounded by the template constant R
 * (family.cuh, launchByWorld; lamport.cuh): the pair's instances (R == 2) run only where the
 * world is 2 ranks, so there it is a constant the compiler folds into each loop. */
template <int R> __device__ __forceinline__ int worldRanks(const KernelArgs& a) {
  return R == 2 ? 2 : a.nranks;
}

/* What every block that gives up does, besides leaving: `reason` into this rank's error word (the
 * host fails the communicator) and into the sticky gave-up word of localState, which every later
 * kernel of ours on this rank reads in beginCall and leaves on before it stores anything: this
 * call publishes no epoch (endCall), so those kernels would reuse its epoch, and a peer that
 * did not give up may have signalled it. Device scope suffices: later kernels of ours on this
 * rank start after this one has completed (stream order, and our order events across streams). */
__device__ __forceinline__ void giveUp(const KernelArgs& a, uint32_t reason) {
  atomicOr((unsigned int*)a.errorFlag, reason);
  atomicOr((unsigned long long*)(a.localState + SYMM_STATE_GAVE_UP), (unsigned long long)reason);
}

/* Fails the communicator on every rank: `reason` into every rank's failure word. */
__device__ __forceinline__ void failEverywhere(const KernelArgs& a, uint32_t reason) {
  for (int r = 0; r < a.nranks; r++)
    atomicOr((unsigned long long*)(a.signals[r] + SYMM_PAD_FAIL_WORD), (unsigned long long)reason);
  __threadfence_system();
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Called every 2048 polls of any spin loop: 0 to keep waiting, else why it gave up (SYMM_ERR_*
 * bits; giveUp done). Abort is this rank's own decision; a non-zero failure word means some rank
 * failed the communicator; the deadline (a debugging knob, off by default) fails it everywhere.
 * *start holds the time of the first check (0 before). */
__device__ __forceinline__ uint32_t shouldGiveUp(const KernelArgs& a, uint64_t* start) {
  if (*a.abortFlag != 0) {
    giveUp(a, SYMM_ERR_ABORT);
    return SYMM_ERR_ABORT;
  }
  if (loadRelaxedSys(a.signals[a.rank] + SYMM_PAD_FAIL_WORD) != 0) {
    giveUp(a, SYMM_ERR_PEER);
    return SYMM_ERR_PEER;
  }
  if (a.deadlineNs != 0) {
    const uint64_t now = globalTimerNs();
    if (*start == 0) {
      *start = now;
    } else if (now - *start > a.deadlineNs) {
      giveUp(a, SYMM_ERR_DEADLINE);
      failEverywhere(a, SYMM_ERR_DEADLINE);
      return SYMM_ERR_DEADLINE;
    }
  }
  return 0;
}

/* Spins until *word reaches `want` (64-bit epochs never wrap). Returns 0 when it did, else the
 * reason it gave up (see shouldGiveUp); *seen = last value read. */
__device__ __forceinline__ uint32_t spinUntil(const KernelArgs& a, const uint64_t* word,
                                              uint64_t want, uint64_t* seen) {
  uint64_t start = 0;
  for (uint32_t polls = 1;; polls++) {
    const uint64_t got = loadAcquireSys(word);
    *seen = got;
    if (got >= want) return 0;
    if ((polls & 2047u) == 0) {
      const uint32_t why = shouldGiveUp(a, &start);
      if (why != 0) return why;
    }
  }
}

/* Prints why a block gave up waiting at the debugging deadline (only on the way out). Scalars
 * only: a reference to the kernel arguments would force them into local memory. */
static __device__ __noinline__ void reportDeadline(int rank, unsigned long long ms, int peer, int purpose,
                                            unsigned long long want, unsigned long long seen) {
  printf("libsymmcoll: rank %d block %d/%d gave up after %llu ms waiting for rank %d "
         "(signal %d, epoch %llu, seen %llu)\n",
         rank, (int)blockIdx.x, (int)gridDim.x, ms, peer, purpose, want, seen);
}

/* Block-level barrier with block blockIdx.x of every rank (itself included), in two halves so a
 * block can work between them (the two-shot does).
 * Arrive: __syncthreads orders this block's prior writes before thread t's system-scope release
 * store of `epoch` into rank t's pad. */
__device__ __forceinline__ void blockArrive(const KernelArgs& a, int purpose, uint64_t epoch) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < a.nranks) storeReleaseSys(a.signals[t] + signalIndex(purpose, blockIdx.x, a.rank), epoch);
}

struct NoHook {
  __device__ void operator()(int) const {}
};

/* Wait: thread t acquires rank t's word in our pad (then runs afterAcquire(t): what rank t wrote
 * before its signal is visible to it), then __syncthreads publishes that to the whole block.
 * `failed` is block-shared. */
template <typename Hook = NoHook>
__device__ __forceinline__ bool blockWait(const KernelArgs& a, int purpose, uint64_t epoch,
                                          volatile int* failed, Hook afterAcquire = Hook()) {
  const int t = threadIdx.x;
  uint32_t why = 0;
  uint64_t seen = 0;
  if (t < a.nranks) {
    why = spinUntil(a, a.signals[a.rank] + signalIndex(purpose, blockIdx.x, t), epoch, &seen);
    if (why != 0) *failed = 1;
    else afterAcquire(t);
  }
  __syncthreads();
  if (*failed == 0) return true;
  if (why == SYMM_ERR_DEADLINE)
    reportDeadline(a.rank, (unsigned long long)(a.deadlineNs / 1000000u), t, purpose,
                   (unsigned long long)epoch, (unsigned long long)seen);
  return false;
}

__device__ __forceinline__ bool blockBarrier(const KernelArgs& a, int purpose, uint64_t epoch,
                                             volatile int* failed) {
  blockArrive(a, purpose, epoch);
  return blockWait(a, purpose, epoch, failed);
}

/* The first statement of every kernel of ours: programmatic dependent launch (PDL, sm_90+).
 * launchKernel launches with programmatic stream serialization where SYMMCOLL_PDL allows (every
 * rank sm_90+), which lets this grid start before the kernel before it on the stream has finished:
 * as soon as every block of that kernel has executed griddepcontrol.launch_dependents or exited.
 *  - griddepcontrol.wait blocks until that kernel has completed and its memory operations are
 *    performed and visible, as at a plain kernel boundary. Nothing in this kernel touches memory
 *    before it: not localState (the epoch and ticket the previous kernel's endCall wrote, the
 *    gave-up word of a kernel that gave up), staging, signal pads, the Lamport region or user
 *    buffers. So every kernel sees memory exactly as when launched in plain stream order; without
 *    a programmatic dependency the wait returns at once.
 *  - launch_dependents then lets the next kernel of ours on the stream be scheduled while this one
 *    runs (its launch latency hides behind our work). The dependent starts only once every block
 *    of this grid has executed it, i.e. this grid is fully resident: a dependent block that sits
 *    in its wait never holds an SM a block of ours still needs, so our spinning blocks cannot
 *    starve. Triggering after the wait, not before, keeps at most two grids of one stream resident
 *    (the dependent's own dependent waits until the dependent has passed its wait, i.e. until we
 *    completed); gridBlocks halves the shared-GPU budget of the tests for that.
 *  - Kernels launched without the attribute (the application's, NCCL's, ours with SYMMCOLL_PDL=0)
 *    start after we complete, as always: the trigger only concerns launches that ask for it. An
 *    application kernel launched with it must run griddepcontrol.wait before reading our output,
 *    as CUDA requires of every dependent.
 * Below sm_90 (no such instructions) this is empty and nothing is launched with the attribute. */
__device__ __forceinline__ void kernelEntry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Start of every kernel (openCall's first step, primitives.cuh): this call's epoch (calls
 * completed + 1, advanced on the device), and the block's ticket, held by its last thread: the
 * block counts itself in once its epoch is read, so the block that draws the last ticket knows
 * every block has read it and may publish the next one (endCall). Counting here rather than at
 * the end lets the atomic's round trip overlap the call's work instead of delaying the block's
 * exit. Thread 0 reads the epoch and the gave-up word in one 16-byte load (SYMM_STATE_EPOCH and
 * SYMM_STATE_GAVE_UP are one aligned pair): false, with `failed` set and no ticket drawn, where
 * an earlier kernel of ours on this rank gave up (giveUp). That kernel published no epoch, so
 * this one would reuse its epoch, and a peer that did not give up may have signalled it already:
 * the first wait could pass at once and meet a call that never met ours. So the kernel leaves
 * before it stores anything (staging, signals, Lamport lines, user memory, localState). The
 * host-mapped abort/error flags are not read here (a PCIe round trip on every call): a kernel
 * queued after an abort where none of ours gave up (nothing of ours was running) notices the
 * abort flag in its first wait that does not pass at once. */
__device__ __forceinline__ bool beginCall(const KernelArgs& a, uint64_t* epochOut,
                                          volatile int* failed, uint32_t* ticket) {
  static_assert(SYMM_STATE_GAVE_UP == SYMM_STATE_EPOCH + 1 && SYMM_STATE_EPOCH % 2 == 0,
                "the epoch and the gave-up word must be one 16-byte aligned pair");
  __shared__ uint64_t epoch;
  if (threadIdx.x == 0) {
    const ulonglong2 state = *(const ulonglong2*)(a.localState + SYMM_STATE_EPOCH);
    epoch = state.x + 1u;
    *failed = state.y != 0;
  }
  __syncthreads(); /* our read of the epoch is done before our ticket is drawn */
  const bool ok = *failed == 0;
  /* By the block's last thread: thread 0 carries the only line of the smallest calls. */
  if (ok && threadIdx.x == blockDim.x - 1)
    *ticket = (uint32_t)atomicAdd((unsigned long long*)&a.localState[SYMM_STATE_TICKET], 1ull);
  *epochOut = epoch;
  return ok;
}

/* Lamport region layout: two parity halves of kLamportParityBytes; in each, writer w's slot
 * starts w x lamportSlotOf(writers) bytes in: 2 MiB for a pair (writers = 2), 512 KiB for any other
 * world (writers = SYMM_MAX_RANKS). Slots are fixed per class, not sized by world size, because
 * the Lamport kernels take the slot as a template constant (lamport.cuh): as a runtime value its
 * address arithmetic in the poll loop cost every small call 0.05-0.3 us on an H100 pair. */
constexpr size_t kLamportParityBytes = SYMM_LAMPORT_REGION_BYTES / 2;
__host__ __device__ constexpr int lamportWriters(int nranks) {
  return nranks == 2 ? 2 : SYMM_MAX_RANKS;
}
__host__ __device__ constexpr size_t lamportSlotOf(int writers) {
  return kLamportParityBytes / (size_t)writers;
}

/* Lamport lines carry only the low 32 bits of their epoch, so a line left untouched for 2^32 epochs
 * could look current. Every kernel keeps each line of its own writer slots young: block 0's last
 * thread rewrites one line of the slot of this call's parity, in every rank's region, with this
 * call's flag (and zero data), walking the slot with a cursor in localState
 * (SYMM_STATE_LAMPORT_CURSORS, one per parity: the next line, wrapping at the slot's end). A slot
 * has at most 2^17 lines (2 MiB at 2 ranks, lamportSlotOf), so every line is rewritten at least
 * once per 2^17 calls of that parity, 2^18 calls in all; a call uses one epoch per round of the
 * two-shot, all-gather push or reduce-scatter pull (at most kMaxRounds = 2^12 per launch, whose
 * launchers split longer messages, launch.h), so a line is at most 2^30 epochs old, below 2^31.
 * A call's parity is that of its first epoch, and a call of an even number of epochs (two-shot,
 * push or pull of 2, 4, ... rounds) leaves the next call on the same parity: such a call also
 * refreshes a line of the other parity, after its first wait (every peer has then started this
 * call, so finished every earlier one: no reader of that slot is left, and a peer's later Lamport
 * call, whose flag differs, finds our real line after this one in stream order). So every parity
 * is refreshed at least once per two calls, whatever their sizes. Safe for readers: the slot of
 * this parity was last read in call k-2, which every rank finished before this call could start;
 * and a Lamport call skips the lines it writes itself. */
__device__ __forceinline__ void refreshLamportLine(const KernelArgs& a, uint64_t epoch,
                                                   size_t linesWritten) {
  /* Not thread 0: its cursor load would delay the only line of the smallest calls. */
  if (!a.lamportRegion || blockIdx.x != 0 || threadIdx.x != blockDim.x - 1) return;
  const size_t slot = lamportSlotOf(lamportWriters(a.nranks));
  const uint64_t slotLines = slot / 16;
  const int parity = (int)(epoch & 1u);
  uint64_t* cursor = a.localState + SYMM_STATE_LAMPORT_CURSORS + parity;
  /* The cursor is the line itself and wraps by comparison: a remainder by the runtime slot size
   * would put a 64-bit division on this warp's path ahead of its data. */
  uint64_t line = *cursor;
  if (line >= slotLines) line = 0;
  *cursor = line + 1 == slotLines ? 0 : line + 1;
  if (line < linesWritten) return;
  const uint32_t flag = (uint32_t)epoch;
  const size_t off = a.lamportOffset + (size_t)parity * kLamportParityBytes +
                     (size_t)a.rank * slot + line * 16;
  for (int r = 0; r < a.nranks; r++)
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(a.staging[r] + off),
                 "r"(0u), "r"(flag), "r"(0u), "r"(flag)
                 : "memory");
}

/* A call of `rounds` epochs from e0, after its first wait: every peer has started this call, so
 * finished the calls before it; an even number of epochs keeps the next call on e0's parity, so
 * refresh a line of the other one now (refreshLamportLine says why that is safe). */
__device__ __forceinline__ void refreshOtherParity(const KernelArgs& a, uint64_t e0,
                                                   uint32_t rounds) {
  if ((rounds & 1u) == 0) refreshLamportLine(a, e0 + 1, 0);
}

/* End of every kernel that completed: the holder of the last ticket publishes the last epoch
 * this call used, for the next launch on this stream (kernel boundaries order it; no spinning,
 * and no block waits for another here). A call with a block that gave up may still get here
 * (another block held the last ticket); the gave-up word stops every later kernel anyway. */
__device__ __forceinline__ void endCall(const KernelArgs& a, uint64_t lastEpoch, uint32_t ticket) {
  if (threadIdx.x == blockDim.x - 1 && ticket == gridDim.x - 1) {
    a.localState[SYMM_STATE_TICKET] = 0;
    a.localState[SYMM_STATE_EPOCH] = lastEpoch;
  }
}

}  // namespace symm

#endif
