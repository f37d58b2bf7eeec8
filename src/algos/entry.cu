/* SPDX-License-Identifier: Apache-2.0 */
/* The C entry points of src/algos (src/include/algos.h): the one list of collectives with
 * kernels of ours, what exists and fits, memory sizes, kernel loading, symmCollLaunch and the
 * recorded launch. Calls go one way: here -> each collective's file -> launch.cu. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "launch.h"
#include "primitives.cuh" /* kThreads */

extern "C" {
#include "cudriver.h"
#include "debug.h"
}

namespace symm {

/* The collectives with kernels of ours, each defined in its own file: the one list. */
static const CollKernels* const kCollectives[] = {&kAllReduce, &kAllGather, &kReduceScatter};
static const int kNumCollectives = (int)(sizeof(kCollectives) / sizeof(kCollectives[0]));

static const CollKernels* collKernels(enum symmColl coll) {
  for (int i = 0; i < kNumCollectives; i++)
    if (kCollectives[i]->coll == coll) return kCollectives[i];
  return NULL;
}

static const AlgoKernels* algoKernels(enum symmColl coll, enum symmAlgo algo) {
  return findAlgo(collKernels(coll), algo);
}

}  // namespace symm

/* ---- C entry points ------------------------------------------------------------------------ */

extern "C" int symmAlgoExists(enum symmColl coll, enum symmAlgo algo, ncclDataType_t datatype,
                              ncclRedOp_t op) {
  if (symmTypeSize(datatype) == 0) return 0;
  const symm::CollKernels* c = symm::collKernels(coll);
  if (c == NULL) return 0;
  const int builtinOp = (int)op >= 0 && (int)op < (int)ncclNumOps;
  if (c->reduces && !builtinOp) return 0;
  const symm::AlgoKernels* k = symm::algoKernels(coll, algo);
  return k != NULL && k->exists(datatype, op) ? 1 : 0;
}

extern "C" int symmAlgoFits(enum symmColl coll, enum symmAlgo algo, size_t bytes, int nranks,
                            size_t stagingBytes) {
  if (algo != SYMM_ALGO_LAMPORT) return 1;
  /* Lamport: each writer's payload (the whole message, or one rank's share) in a writer slot. */
  const size_t perWriter = coll == SYMM_COLL_ALLREDUCE || nranks < 1 ? bytes : bytes / (size_t)nranks;
  return perWriter <= symmLamportMaxBytes(nranks) && symm::hasLamportRegion(stagingBytes);
}

/* A writer slot (sync.cuh) holds 2x its writer's payload: each 8 bytes travel as 4 data + 4 flag
 * + 4 data + 4 flag. */
extern "C" size_t symmLamportMaxBytes(int nranks) {
  return symm::lamportSlotOf(symm::lamportWriters(nranks)) / 2;
}

extern "C" size_t symmAlgosStagingBytes(int nranks, size_t largestMessage) {
  (void)nranks;
  /* Two halves holding the largest message plus the Lamport region; at least 4x the region. */
  const size_t halves = largestMessage > ((size_t)1 << 40) ? ((size_t)1 << 40) : 2 * largestMessage;
  const size_t want = halves + SYMM_LAMPORT_REGION_BYTES;
  return want < 4 * SYMM_LAMPORT_REGION_BYTES ? 4 * SYMM_LAMPORT_REGION_BYTES : want;
}

extern "C" size_t symmAlgosPadBytes(void) { return symm::kPadBytes; }

/* The kernels' words (SYMM_STATE_*, symm_peers.h: epoch, gave-up word, the two Lamport refresh
 * cursors, ticket) at the start; the userRegTable (src/transport/userreg.c) sits at 4 KiB. */
extern "C" size_t symmAlgosLocalStateBytes(void) { return (size_t)64 << 10; }

/* Devices whose context has every kernel loaded (bit = device ordinal), and its lock. */
static pthread_mutex_t loadLock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t loadedDevices;

extern "C" ncclResult_t symmAlgosLoadKernels(int device) {
  if (device < 0 || device >= 64) return ncclInvalidArgument;
  pthread_mutex_lock(&loadLock);
  ncclResult_t res = ncclSuccess;
  if (!(loadedDevices & (1ull << device))) {
    int oldDev = -1;
    cudaError_t err = cudaGetDevice(&oldDev);
    if (err == cudaSuccess && oldDev != device) err = cudaSetDevice(device);
    for (int i = 0; i < symm::kNumCollectives && err == cudaSuccess; i++) {
      const symm::CollKernels* c = symm::kCollectives[i];
      for (int j = 0; j < c->nalgos && err == cudaSuccess; j++) err = c->algos[j].load();
    }
    if (err == cudaSuccess) {
      loadedDevices |= 1ull << device;
    } else {
      /* One line per process: the communicator then forwards on every rank. */
      static int warned;
      if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        WARN("libsymmcoll's kernels cannot run on device %d (%s): its communicators forward to "
             "NCCL", device, cudaGetErrorString(err));
      (void)cudaGetLastError();
      res = ncclUnhandledCudaError;
    }
    if (oldDev >= 0 && oldDev != device) (void)cudaSetDevice(oldDev);
  }
  pthread_mutex_unlock(&loadLock);
  return res;
}

extern "C" ncclResult_t symmCollLaunchRecorded(const struct symmLaunch* call,
                                               const struct symmPeers* peers, cudaStream_t stream,
                                               struct symmLaunchRecord* record) {
  record->valid = 0;
  record->pdl = 0;
  record->kernel = NULL;
  record->function = NULL;
  symm::Recorder rec = {record, 0};
  symm::setRecorder(&rec);
  const ncclResult_t res = symmCollLaunch(call, peers, stream);
  symm::setRecorder(NULL);
  /* Long messages launch several kernels; registered inputs carry a descriptor read at every
   * launch; the copy engine's stream operations are no kernel launch. */
  record->valid = res == ncclSuccess && rec.launches == 1 && record->kernel != NULL &&
                  !call->exchangeDescs && call->algo != SYMM_ALGO_COPYENGINE;
  return res;
}

extern "C" int symmCollReplay(struct symmLaunchRecord* record, cudaStream_t stream) {
  if (symmCu.p_cuKernelGetFunction == NULL ||
      (record->pdl ? symmCu.p_cuLaunchKernelEx == NULL : symmCu.p_cuLaunchKernel == NULL))
    return 0;
  /* The kernel as loaded in the current context, found at the first replay (calls that never
   * repeat never ask): launching it skips the driver's lookup of the context-independent
   * handle, about 0.09 us per call on an H100 (perf/RESULTS.md). */
  if (record->function == NULL) {
    CUfunction function = NULL;
    if (symmCu.p_cuKernelGetFunction(&function, (CUkernel)record->kernel) != CUDA_SUCCESS)
      return 0;
    record->function = (void*)function;
  }
  void* params[] = {record->args};
  if (record->pdl) /* as the recorded launch was (launchKernel) */
    return symm::launchDriverPdl((CUfunction)record->function, record->blocks, (CUstream)stream,
                                 params) == CUDA_SUCCESS;
  return symmCu.p_cuLaunchKernel((CUfunction)record->function, record->blocks, 1, 1,
                                 symm::kThreads, 1, 1, 0, (CUstream)stream, params,
                                 NULL) == CUDA_SUCCESS;
}

extern "C" ncclResult_t symmCollLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                       cudaStream_t stream) {
  const char* name = symmCollName(call->coll);
  const size_t esize = symmTypeSize(call->datatype);
  if (esize == 0 || !symmAlgoExists(call->coll, call->algo, call->datatype, call->op)) {
    WARN("%s: no %s kernel for datatype %d op %d", name, symmAlgoName(call->algo),
         (int)call->datatype, (int)call->op);
    return ncclInvalidArgument;
  }
  if (call->count == 0) return ncclSuccess;
  if (peers->nranks < 1 || peers->nranks > SYMM_MAX_RANKS ||
      peers->signalBytes < symm::kPadBytes ||
      peers->localStateBytes < SYMM_STATE_KERNEL_WORDS * sizeof(uint64_t) ||
      ((uintptr_t)peers->localState & 15u) != 0) { /* beginCall's 16-byte load */
    WARN("%s: peer memory too small or misaligned, or bad rank count (%d ranks)", name,
         peers->nranks);
    return ncclInternalError;
  }
  const size_t bytes = symmCollBytes(call->coll, call->count, esize, peers->nranks);
  if (!symmAlgoFits(call->coll, call->algo, bytes, peers->nranks, peers->bufferBytes)) {
    WARN("%s: %zu bytes do not fit the %s kernel (staging %zu bytes)", name, bytes,
         symmAlgoName(call->algo), peers->bufferBytes);
    return ncclInvalidArgument;
  }
  return symm::collKernels(call->coll)->launch(call, peers, stream); /* it exists: checked */
}
