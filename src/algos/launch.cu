/* SPDX-License-Identifier: Apache-2.0 */
/* What the collectives' launchers share (launch.h): arguments, grids, the kernel launch (driver
 * handles, programmatic dependent launch, the recorder), launches in pieces and the launcher
 * all-gather and reduce-scatter share. The C entry points are in entry.cu. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "launch.h"
#include "multimem.cuh"
#include "primitives.cuh"

extern "C" {
#include "cudriver.h"
#include "debug.h"
#include "param.h"
}

SYMMCOLL_PARAM_FULL(SpinDeadlineMs, "SPIN_DEADLINE_MS", 0, 0, 86400000, SYMM_PARAM_AGREED,
                    "debugging only: ms a kernel waits for a peer before failing the whole "
                    "communicator (0 = wait like NCCL, forever)")
/* Measured on 2x H200 (perf/RESULTS.md): the push two-shot moves 1.07-1.17x the bytes with 128
 * blocks as with 64 from 16 MiB up, and 2 KiB per block halves the one-shot/Lamport latency at
 * 16 KiB against 16 KiB per block. */
SYMMCOLL_PARAM_FULL(ArMaxBlocks, "AR_MAX_BLOCKS", 128, 1, SYMM_MAX_BLOCKS, SYMM_PARAM_AGREED,
                    "most thread blocks per kernel of ours (1..128)")
SYMMCOLL_PARAM_FULL(ArRoundBytes, "AR_ROUND_BYTES", 0, 0, INT64_MAX, SYMM_PARAM_AGREED,
                    "two-shot all-reduce, push all-gather, pull reduce-scatter: most message "
                    "bytes per round inside a launch (0: what staging holds)")
SYMMCOLL_PARAM_FULL(ArBytesPerBlock, "AR_BYTES_PER_BLOCK", 2048, 1024, INT64_MAX,
                    SYMM_PARAM_AGREED, "bytes per thread block before another block is added")

namespace symm {

/* Blocks all ranks sharing one GPU may use together (tests only, see gridBlocks). */
static const int kSharedGpuBlocks = 64;

bool hasLamportRegion(size_t bufferBytes) { return bufferBytes >= 4 * SYMM_LAMPORT_REGION_BYTES; }

size_t halfBytesOf(const struct symmPeers* peers) {
  const size_t usable =
      peers->bufferBytes - (hasLamportRegion(peers->bufferBytes) ? SYMM_LAMPORT_REGION_BYTES : 0);
  return (usable / 2) & ~(size_t)15;
}

void fillArgs(const struct symmLaunch* call, const struct symmPeers* peers, KernelArgs* args) {
  memset(args, 0, sizeof(*args));
  for (int r = 0; r < peers->nranks; r++) {
    args->staging[r] = (char*)peers->buffers[r];
    args->signals[r] = peers->signals[r];
  }
  args->localState = peers->localState;
  args->abortFlag = peers->abortFlag;
  args->errorFlag = peers->errorFlag;
  args->multicast = (char*)peers->multicastBuffer;
  args->halfBytes = halfBytesOf(peers);
  args->lamportOffset = 2 * args->halfBytes;
  args->lamportRegion = hasLamportRegion(peers->bufferBytes);
  args->deadlineNs = (uint64_t)symmParamSpinDeadlineMs() * 1000000ull;
  args->rank = peers->rank;
  args->nranks = peers->nranks;
  args->avg = call->coll != SYMM_COLL_ALLGATHER && call->op == ncclAvg;
  args->userRegTable = peers->userRegTable;
  args->pdl = call->pdl != 0;
}

int gridBlocks(size_t moved, const struct symmLaunch* call, const struct symmPeers* peers) {
  int64_t maxBlocks = symmParamArMaxBlocks();
  if (maxBlocks > SYMM_MAX_BLOCKS) maxBlocks = SYMM_MAX_BLOCKS;
  if (call->maxBlocks > 0 && maxBlocks > call->maxBlocks) maxBlocks = call->maxBlocks;
  /* Several ranks on one GPU (tests only): their spinning blocks must all be resident together,
   * beside whatever else runs there; the two-shot's 200+ registers per thread allow only one
   * block per SM, so the ranks share at most 64 blocks (128 on 4 ranks per GPU hung). With
   * programmatic dependent launch each rank may hold two grids at once (the running one and its
   * dependent in its wait, kernelEntry), so each grid gets half of that. */
  if (peers->ranksPerDevice > 1) {
    const int64_t shared = call->pdl ? kSharedGpuBlocks / 2 : kSharedGpuBlocks;
    if (maxBlocks > shared) maxBlocks = shared;
    maxBlocks = maxBlocks / peers->ranksPerDevice > 0 ? maxBlocks / peers->ranksPerDevice : 1;
  }
  const size_t perBlock = (size_t)symmParamArBytesPerBlock();
  int64_t blocks = (int64_t)((moved + perBlock - 1) / perBlock);
  if (call->minBlocks > 0 && blocks < call->minBlocks) blocks = call->minBlocks;
  if (blocks > maxBlocks) blocks = maxBlocks;
  return blocks < 1 ? 1 : (int)blocks;
}

size_t twoShotSliceMax(const struct symmPeers* peers, size_t halfBytes, size_t esize) {
  /* 2(n-1) slices of staging per round, and the round-size knob. */
  const size_t peerCount = peers->nranks > 1 ? (size_t)peers->nranks - 1 : 1;
  size_t sliceMax = halfBytes / (2 * peerCount * esize);
  const int64_t roundBytes = symmParamArRoundBytes();
  if (roundBytes > 0 && (size_t)roundBytes / ((size_t)peers->nranks * esize) < sliceMax)
    sliceMax = (size_t)roundBytes / ((size_t)peers->nranks * esize);
  if (sliceMax < 16 / esize) sliceMax = 16 / esize;
  return sliceMax;
}

size_t gatherScatterSliceMax(const struct symmPeers* peers, size_t halfBytes, size_t esize) {
  /* n-1 slots of staging per round, and the round-size knob (message bytes: n shares). */
  const size_t peerCount = peers->nranks > 1 ? (size_t)peers->nranks - 1 : 1;
  size_t sliceMax = halfBytes / (peerCount * esize);
  const int64_t roundBytes = symmParamArRoundBytes();
  if (roundBytes > 0 && (size_t)roundBytes / ((size_t)peers->nranks * esize) < sliceMax)
    sliceMax = (size_t)roundBytes / ((size_t)peers->nranks * esize);
  if (sliceMax < 16 / esize) sliceMax = 16 / esize;
  return sliceMax;
}

/* Kernel handles (cudaGetKernel: one per kernel, valid in every context), keyed by the kernel's
 * host address in an open-addressed table that readers search without a lock: a slot's key is
 * published after its handle, and slots are never reused. */
static const int kHandleSlots = 4096; /* a power of two, several times our kernel count */
struct HandleSlot {
  KernelFn kernel;
  CUkernel handle;
};
static HandleSlot handleSlots[kHandleSlots];
static pthread_mutex_t handleLock = PTHREAD_MUTEX_INITIALIZER;

static unsigned handleHome(KernelFn kernel) {
  return (unsigned)(((uintptr_t)kernel * 0x9E3779B97F4A7C15ull) >> 52) & (kHandleSlots - 1);
}

/* NULL when the runtime has none for it (then the runtime launches it). */
static CUkernel kernelHandle(KernelFn kernel) {
  const unsigned home = handleHome(kernel);
  for (int i = 0; i < kHandleSlots; i++) {
    const HandleSlot& slot = handleSlots[(home + i) & (kHandleSlots - 1)];
    const KernelFn k = __atomic_load_n(&slot.kernel, __ATOMIC_ACQUIRE);
    if (k == kernel) return slot.handle;
    if (k == NULL) break;
  }
  CUkernel found = NULL;
  pthread_mutex_lock(&handleLock);
  for (int i = 0; i < kHandleSlots; i++) {
    HandleSlot& slot = handleSlots[(home + i) & (kHandleSlots - 1)];
    if (slot.kernel == kernel) {
      found = slot.handle;
      break;
    }
    if (slot.kernel == NULL) {
      cudaKernel_t handle = NULL;
      if (cudaGetKernel(&handle, (const void*)kernel) == cudaSuccess && handle != NULL) {
        slot.handle = (CUkernel)handle;
        __atomic_store_n(&slot.kernel, kernel, __ATOMIC_RELEASE);
        found = slot.handle;
      } else {
        (void)cudaGetLastError();
      }
      break;
    }
  }
  pthread_mutex_unlock(&handleLock);
  return found;
}

static_assert(sizeof(KernelArgs) <= SYMM_LAUNCH_ARGS_BYTES && alignof(KernelArgs) <= 8,
              "a symmLaunchRecord must hold KernelArgs");

/* Set by symmCollLaunchRecorded on its thread (entry.cu): the launches of the call it makes. */
static __thread Recorder* recorder;

void setRecorder(Recorder* r) { recorder = r; }

static void record(CUkernel handle, int blocks, const KernelArgs& args, bool pdl) {
  if (++recorder->launches != 1) return;
  symmLaunchRecord* r = recorder->record;
  r->kernel = (void*)handle;
  r->blocks = (unsigned)blocks;
  r->pdl = pdl;
  memcpy(r->args, &args, sizeof(args));
}

/* cuLaunchKernelEx of a CUfunction (or a CUkernel as one) with programmatic stream serialization. */
CUresult launchDriverPdl(CUfunction function, unsigned blocks, CUstream stream, void** params) {
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof(attr));
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config;
  memset(&config, 0, sizeof(config));
  config.gridDimX = blocks;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = kThreads;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return symmCu.p_cuLaunchKernelEx(&config, function, params, NULL);
}

cudaError_t launchKernel(KernelFn kernel, int blocks, cudaStream_t stream, const KernelArgs& args) {
  void* params[] = {const_cast<KernelArgs*>(&args)};
  const CUkernel handle = symmCu.p_cuLaunchKernel != NULL || symmCu.p_cuLaunchKernelEx != NULL
                              ? kernelHandle(kernel)
                              : NULL;
  cudaError_t err = cudaErrorUnknown;
  bool pdl = args.pdl != 0;
  if (pdl) {
    /* The driver's cuLaunchKernelEx, else the runtime's; a launch both refuse goes plain (the
     * kernel's griddepcontrol.wait then returns at once), so the attribute never fails a call. */
    if (handle != NULL && symmCu.p_cuLaunchKernelEx != NULL &&
        launchDriverPdl((CUfunction)handle, (unsigned)blocks, (CUstream)stream, params) ==
            CUDA_SUCCESS) {
      err = cudaSuccess;
    } else {
      cudaLaunchAttribute attr;
      memset(&attr, 0, sizeof(attr));
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3((unsigned)blocks);
      config.blockDim = dim3(kThreads);
      config.stream = stream;
      config.attrs = &attr;
      config.numAttrs = 1;
      err = cudaLaunchKernelExC(&config, (const void*)kernel, params);
      if (err != cudaSuccess) {
        static int told;
        if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
          INFO(SYMM_COLL, "programmatic dependent launch refused (%s): launching without it",
               cudaGetErrorString(err));
        (void)cudaGetLastError();
      }
    }
    pdl = err == cudaSuccess;
  }
  if (err != cudaSuccess) {
    /* A CUkernel passed as a CUfunction launches in the current context. */
    if (handle != NULL && symmCu.p_cuLaunchKernel != NULL &&
        symmCu.p_cuLaunchKernel((CUfunction)handle, (unsigned)blocks, 1, 1, kThreads, 1, 1, 0,
                                (CUstream)stream, params, NULL) == CUDA_SUCCESS)
      err = cudaSuccess;
    else
      err = cudaLaunchKernel((const void*)kernel, dim3((unsigned)blocks), dim3(kThreads), params,
                             0, stream);
  }
  if (err == cudaSuccess && recorder != NULL) record(handle, blocks, args, pdl);
  return err;
}

bool anyTypeAndOp(ncclDataType_t, ncclRedOp_t) { return true; }

bool multimemHasKernel(ncclDataType_t dt, ncclRedOp_t op) {
  bool ok = false;
  SYMM_DISPATCH_DTYPE(dt, SYMM_DISPATCH_OP(op, ok = (Mm<E, Kind>::kOk)));
  return ok;
}

cudaError_t loadNothing(void) { return cudaSuccess; }

cudaError_t launchNoKernel(const struct symmLaunch*, int, cudaStream_t, const KernelArgs&) {
  return cudaErrorInvalidValue;
}

/* The algorithm's line in its collective's table, or NULL. */
const AlgoKernels* findAlgo(const CollKernels* coll, enum symmAlgo algo) {
  for (int i = 0; coll != NULL && i < coll->nalgos; i++)
    if (coll->algos[i].algo == algo) return &coll->algos[i];
  return NULL;
}

size_t roundsLaunchElems(size_t perRound, size_t vecElems) {
  const size_t most = (size_t)kMaxRounds * perRound / vecElems * vecElems;
  return most > vecElems ? most : vecElems;
}

ncclResult_t launchPieces(const CollKernels* coll, const char* name, const struct symmLaunch* call,
                          const struct symmPeers* peers, cudaStream_t stream, KernelArgs* args,
                          size_t perLaunch) {
  const AlgoKernels* algo = findAlgo(coll, call->algo);
  if (algo == NULL) return ncclInvalidArgument; /* symmCollLaunch checked it exists */
  const size_t esize = symmTypeSize(call->datatype);
  for (size_t done = 0; done < call->count; done += perLaunch) {
    const size_t n = call->count - done < perLaunch ? call->count - done : perLaunch;
    const size_t offset = done * esize;
    args->send = (const char*)call->sendbuff + offset;
    args->recv = (char*)call->recvbuff + offset;
    args->count = n;
    if (args->zeroCopy)
      for (int r = 0; r < peers->nranks; r++)
        args->windows[r] = (char*)call->windowPeers[r] + offset;
    /* Two-shot over a registered input: the piece lies `offset` further in the same region. */
    if (args->inputDesc != 0)
      args->inputDesc = SYMM_USER_REG_DESC(SYMM_USER_REG_DESC_SLOT(call->inputDesc),
                                           SYMM_USER_REG_DESC_OFFSET(call->inputDesc) + offset);
    /* Lamport moves twice the bytes (flags): size its grid by what travels. */
    const size_t moved = (call->algo == SYMM_ALGO_LAMPORT ? 2 : 1) * n * esize;
    const int blocks = gridBlocks(moved, call, peers);
    TRACE(SYMM_COLL, "rank %d: %s %s%s, %zu elements, %d blocks, stream %p", peers->rank, name,
          symmAlgoName(call->algo), args->zeroCopy ? " (zero copy)" : "", n, blocks,
          (void*)stream);
    const cudaError_t err = algo->launch(call, blocks, stream, *args);
    if (err != cudaSuccess) {
      WARN("%s kernel launch failed: %s", name, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

/* Lamport: one launch. Push and pull: one launch in rounds (rounds.cuh) for up to kMaxRounds
 * rounds, zero copy one launch for any size. Multimem: one launch per chunk of every rank's share,
 * the chunk one slot of a staging half holds (a multiple of 16 bytes, so slots stay aligned). */
ncclResult_t gatherScatterLaunch(const CollKernels* coll, const struct symmLaunch* call,
                                 const struct symmPeers* peers, cudaStream_t stream) {
  const char* name = symmCollName(call->coll);
  const bool emulate = call->emulateMultimem != 0;
  const size_t esize = symmTypeSize(call->datatype);
  const size_t vecElems = 16 / esize;
  KernelArgs args;
  fillArgs(call, peers, &args);
  args.sliceStride = call->count;
  if (call->algo == SYMM_ALGO_LAMPORT)
    return launchPieces(coll, name, call, peers, stream, &args, call->count);
  const bool multimem = call->algo == SYMM_ALGO_MULTIMEM;
  if (multimem && !emulate && peers->multicastBuffer == NULL) {
    WARN("%s: multimem requested without a multicast mapping", name);
    return ncclInternalError;
  }
  const size_t halfBytes = halfBytesOf(peers);
  /* Push and pull read or write the registered window in place (the tuner said so by handing
   * its peers' addresses) and use no staging: one launch for any size. */
  args.zeroCopy = call->windowPeers != NULL && !multimem;
  size_t perLaunch = call->count;
  if (multimem) {
    const size_t chunk = halfBytes / ((size_t)peers->nranks * esize) / vecElems * vecElems;
    if (chunk == 0) {
      WARN("%s: staging buffer of %zu bytes is too small", name, peers->bufferBytes);
      return ncclInternalError;
    }
    args.slotStride = chunk;
    perLaunch = chunk;
  } else if (!args.zeroCopy) {
    if (halfBytes < (size_t)peers->nranks * 16) {
      WARN("%s: staging buffer of %zu bytes is too small", name, peers->bufferBytes);
      return ncclInternalError;
    }
    args.sliceMax = gatherScatterSliceMax(peers, halfBytes, esize);
    /* A round covers sliceMax, rounded down to the kernel's unit, of each share (roundPlan). */
    perLaunch = roundsLaunchElems(args.sliceMax / 2, vecElems);
  }
  return launchPieces(coll, name, call, peers, stream, &args, perLaunch);
}

}  // namespace symm
