/* SPDX-License-Identifier: Apache-2.0 */
/* test_allreduce's ranks: the memory the direct mode builds (one process: peer access; forked
 * processes: cudaIpc handles relayed by the parent) and one all-reduce issued on every local rank. */
#include "allreduce_test.h"

#include <string.h>

#include "ar_helpers.h"
#include "param.h"
#include "procs.h"
#include "transport.h"

/* ------------------------------------------------------------------------------------------ */
/* Ranks and the memory the direct mode builds */

void driverBarrier(void) {
  if (opt.threads) pthread_barrier_wait(&threadBarrier);
}

/* Forces the algorithm of the nccl mode (environment + param reset), in step on every thread. */
void setAlgoEnv(const struct driver* d, const char* name) {
  driverBarrier();
  if (d->isLeader || !opt.threads) {
    setenv("SYMMCOLL_ALLREDUCE_ALGO", name, 1);
    symmParamResetAll();
  }
  driverBarrier();
}

void allocRankMemory(struct rankCtx* c) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
  CUDA_OR_DIE(cudaMalloc((void**)&c->sendMem, opt.maxBytes + 256));
  CUDA_OR_DIE(cudaMalloc((void**)&c->recvMem, opt.maxBytes + 256));
  CUDA_OR_DIE(cudaMalloc((void**)&c->devMismatch, sizeof(unsigned long long)));
  /* Every kernel loaded before any spins (the library does this itself at communicator setup;
   * the direct mode has no communicator). */
  CUDA_OR_DIE(arLoadKernels());
  if (symmAlgosLoadKernels(c->dev) != ncclSuccess) {
    fprintf(stderr, "rank %d: the all-reduce kernels do not load on device %d\n", c->rank, c->dev);
    exit(2);
  }
  /* cudaMemset runs on the legacy stream, which the non-blocking rank streams do not wait for:
   * every memset and copy here is waited for before any kernel. */
  CUDA_OR_DIE(cudaMemset(c->devMismatch, 0, sizeof(unsigned long long)));
  CUDA_OR_DIE(cudaStreamSynchronize(cudaStreamLegacy));
  if (opt.mode != MODE_DIRECT) return;
  CUDA_OR_DIE(cudaMalloc(&c->staging, opt.stagingBytes));
  CUDA_OR_DIE(cudaMalloc(&c->signalsMem, SIGNAL_BYTES));
  CUDA_OR_DIE(cudaMemset(c->signalsMem, 0, SIGNAL_BYTES));
  CUDA_OR_DIE(cudaMalloc(&c->stateMem, STATE_BYTES));
  CUDA_OR_DIE(cudaMemset(c->stateMem, 0, STATE_BYTES));
  CUDA_OR_DIE(cudaStreamSynchronize(cudaStreamLegacy));
  CUDA_OR_DIE(cudaHostAlloc((void**)&c->abortHost, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  c->errorHost = c->abortHost + 1;
  c->abortHost[0] = c->errorHost[0] = 0;
  memset(&c->peers, 0, sizeof(c->peers));
  c->peers.rank = c->rank;
  c->peers.nranks = nranksWorld;
  c->peers.ranksPerDevice = (nranksWorld + ngpus - 1) / ngpus; /* as the transport computes it */
  c->peers.bufferBytes = opt.stagingBytes;
  c->peers.signalBytes = SIGNAL_BYTES;
  c->peers.localState = c->stateMem;
  c->peers.localStateBytes = STATE_BYTES;
  uint32_t *abortDev, *errorDev;
  CUDA_OR_DIE(cudaHostGetDevicePointer((void**)&abortDev, c->abortHost, 0));
  errorDev = abortDev + 1;
  c->peers.abortFlag = abortDev;
  c->peers.errorFlag = errorDev;
}

/* One process, every rank: peers see each other's cudaMalloc memory directly. */
void connectDirectLocal(struct rankCtx* ctx, int n) {
  for (int a = 0; a < n; a++) {
    CUDA_OR_DIE(cudaSetDevice(ctx[a].dev));
    for (int b = 0; b < n; b++) {
      if (ctx[b].dev != ctx[a].dev) {
        cudaError_t e = cudaDeviceEnablePeerAccess(ctx[b].dev, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
        else CUDA_OR_DIE(e);
      }
      ctx[a].peers.buffers[b] = ctx[b].staging;
      ctx[a].peers.signals[b] = ctx[b].signalsMem;
    }
  }
  /* ncclCommRegister zero-copy as the kernel sees it: in one process every rank's memory is
   * already reachable, so each rank's table says writer w registered its send buffer in slot 0
   * and its receive buffer (in-place inputs) in slot 1. */
  for (int a = 0; a < n; a++) {
    uint64_t table[SYMM_MAX_RANKS * SYMM_USER_REG_SLOTS];
    memset(table, 0, sizeof(table));
    for (int w = 0; w < n; w++) {
      table[w * SYMM_USER_REG_SLOTS + 0] = (uint64_t)(uintptr_t)ctx[w].sendMem;
      table[w * SYMM_USER_REG_SLOTS + 1] = (uint64_t)(uintptr_t)ctx[w].recvMem;
    }
    char* at = (char*)ctx[a].stateMem + USER_REG_TABLE_OFFSET;
    CUDA_OR_DIE(cudaSetDevice(ctx[a].dev));
    CUDA_OR_DIE(cudaMemcpy(at, table, sizeof(table), cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaStreamSynchronize(cudaStreamLegacy));
    ctx[a].peers.userRegTable = (const uint64_t*)at;
  }
}

/* Forked processes: every child sends a blob up a pipe; the parent sends all blobs to all. */
int upPipe[SYMM_MAX_RANKS][2], downPipe[SYMM_MAX_RANKS][2];
static void writeAll(int fd, const void* p, size_t n) {
  if (procsWriteAll(fd, p, n) != 0) { perror("write"); exit(2); }
}
static void readAll(int fd, void* p, size_t n) {
  if (procsReadAll(fd, p, n) != 0) { fprintf(stderr, "pipe closed early\n"); exit(2); }
}

void exchange(int rank, const struct blob* mine, struct blob* all) {
  writeAll(upPipe[rank][1], mine, sizeof(*mine));
  readAll(downPipe[rank][0], all, sizeof(*all) * (size_t)nranksWorld);
}

void relayBlobs(void) {
  struct blob all[SYMM_MAX_RANKS];
  for (int r = 0; r < nranksWorld; r++) readAll(upPipe[r][0], &all[r], sizeof(all[r]));
  for (int r = 0; r < nranksWorld; r++)
    writeAll(downPipe[r][1], all, sizeof(all[0]) * (size_t)nranksWorld);
}

void connectDirectIpc(struct rankCtx* c) {
  struct blob mine, all[SYMM_MAX_RANKS];
  memset(&mine, 0, sizeof(mine));
  CUDA_OR_DIE(cudaIpcGetMemHandle(&mine.staging, c->staging));
  CUDA_OR_DIE(cudaIpcGetMemHandle(&mine.signals, c->signalsMem));
  exchange(c->rank, &mine, all);
  for (int r = 0; r < nranksWorld; r++) {
    if (r == c->rank) {
      c->peers.buffers[r] = c->staging;
      c->peers.signals[r] = c->signalsMem;
      continue;
    }
    CUDA_OR_DIE(cudaIpcOpenMemHandle(&c->peers.buffers[r], all[r].staging,
                                     cudaIpcMemLazyEnablePeerAccess));
    CUDA_OR_DIE(cudaIpcOpenMemHandle((void**)&c->peers.signals[r], all[r].signals,
                                     cudaIpcMemLazyEnablePeerAccess));
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Issuing one all-reduce on every local rank */

const void* sendPtr(const struct rankCtx* c, const struct arCall* a) {
  return a->inPlace ? c->recvMem + a->recvOff[c->rank] : c->sendMem + a->sendOff[c->rank];
}
void* recvPtr(const struct rankCtx* c, const struct arCall* a) {
  return c->recvMem + a->recvOff[c->rank];
}

/* Direct mode launches as the library does (src/enqueue.c): programmatic dependent launch unless
 * SYMMCOLL_PDL=0, on sm_90 and newer. */
int directPdl(int dev) {
  static int cached = -1;
  if (cached < 0) {
    const char* env = getenv("SYMMCOLL_PDL");
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      major = 0;
    cached = major >= 9 && !(env != NULL && atoi(env) == 0);
  }
  return cached;
}

ncclResult_t issueOne(struct rankCtx* c, const struct arCall* a, cudaStream_t stream) {
  CUDA_OR_DIE(cudaSetDevice(c->dev));
  if (opt.mode == MODE_DIRECT) {
    void* bufferPeers[SYMM_MAX_RANKS];
    const int writeOutputs = a->writeOutputs && allRanks != NULL;
    const int zeroCopy = (a->zeroCopy || writeOutputs) && allRanks != NULL;
    if (zeroCopy)
      for (int r = 0; r < nranksWorld; r++)
        bufferPeers[r] = writeOutputs ? recvPtr(&allRanks[r], a) : (void*)sendPtr(&allRanks[r], a);
    struct symmLaunch call = {.coll = SYMM_COLL_ALLREDUCE, .sendbuff = sendPtr(c, a),
                              .recvbuff = recvPtr(c, a), .count = a->count, .datatype = a->dtype,
                              .op = a->op, .algo = a->algo, .emulateMultimem = 1,
                              .windowPeers = zeroCopy ? bufferPeers : NULL,
                              .windowsAreOutputs = writeOutputs, .pdl = directPdl(c->dev)};
    if (a->exchangeDescs && allRanks != NULL) {
      call.exchangeDescs = 1;
      if (a->descMask & (1u << c->rank)) {
        const char* base = a->inPlace ? c->recvMem : c->sendMem;
        call.inputDesc = SYMM_USER_REG_DESC(a->inPlace ? 1 : 0,
                                            (const char*)call.sendbuff - base);
      }
    }
    return symmCollLaunch(&call, &c->peers, stream);
  }
  return ncclAllReduce(sendPtr(c, a), recvPtr(c, a), a->count, a->dtype, a->op, c->comm, stream);
}

ncclResult_t issueAll(struct driver* d, const struct arCall* a, int useSide) {
  ncclResult_t res = ncclSuccess;
  const int group = opt.mode == MODE_NCCL && d->nlocal > 1;
  if (group) NCCL_OR_DIE(ncclGroupStart());
  for (int i = 0; i < d->nlocal; i++) {
    ncclResult_t r = issueOne(d->local[i], a, useSide ? d->local[i]->side : d->local[i]->stream);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  if (group) {
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  return res;
}
