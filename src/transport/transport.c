/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator setup (eligibility, staging memory, peer mappings, agreement) and teardown. */
#define _GNU_SOURCE
#include "transport.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "fdpass.h"
#include "forward.h"
#include "internal.h"
#include "multicast.h"
#include "param.h"

SYMMCOLL_PARAM(MaxRanks, "MAX_RANKS", 8, "largest world size that uses symmetric memory (<= 8)")
SYMMCOLL_PARAM(BufferBytes, "BUFFER_BYTES", 64 << 20,
               "staging buffer per rank, allocated at communicator creation")
SYMMCOLL_PARAM(SignalBytes, "SIGNAL_BYTES", 1 << 20, "signal pad per rank (zeroed at creation)")
SYMMCOLL_PARAM(LocalStateBytes, "LOCAL_STATE_BYTES", 64 << 10,
               "per-rank private device state (epochs), zeroed at creation")
SYMMCOLL_PARAM(SetupTimeoutMs, "SETUP_TIMEOUT_MS", 30000,
               "how long setup waits for a peer's handle, or for a non-blocking communicator to go "
               "idle, before giving up (forwarding)")

SYMMCOLL_PARAM(FaultExchangeRank, "FAULT_EXCHANGE_RANK", -1,
               "tests only: this rank's setup exchanges act as if device memory had run out "
               "(-1: never)")

int64_t symmTransportSetupTimeoutMs(void) { return symmParamSetupTimeoutMs(); }

#define FLAG_ABORT 0
#define FLAG_ERROR 32 /* own cache line */
#define HOST_FLAG_WORDS 64

static size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* ---- exchange over the real communicator ------------------------------------------------- */

/* Where one rank's all-gather lives: device memory on its own stream, or, after a local failure,
 * pinned host memory on the legacy stream. */
struct exchangeSlot {
  void* scratch;     /* device-visible address of nranks * bytes */
  void* hostScratch; /* the pinned host allocation behind it, or NULL */
  cudaStream_t stream;
  int ownStream;     /* stream is ours to destroy */
  int degraded;      /* takes part with an all-zero payload */
};

/* A local failure must not keep a rank out of an all-gather its peers are already in: they
 * would wait in NCCL forever. It takes part with an all-zero payload, which every caller reads
 * as "no" (record version 0, no peer access, agreement word 0, window not usable), so all ranks
 * then decide alike. Only a rank that cannot reach its device at all stays out. */
static int prepareExchange(struct symmComm* c, size_t total, size_t bytes, const void* mine,
                           struct exchangeSlot* x) {
  if (cudaSetDevice(c->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("symmetric memory: cannot use device %d for the setup exchange", c->cudaDev);
    return 0;
  }
  if (cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) == cudaSuccess) {
    x->ownStream = 1;
  } else {
    (void)cudaGetLastError();
    x->stream = NULL;
    x->degraded = 1;
  }
  if (symmParamFaultExchangeRank() == c->rank || cudaMalloc(&x->scratch, total) != cudaSuccess) {
    (void)cudaGetLastError();
    x->scratch = NULL;
    x->degraded = 1;
    if (cudaHostAlloc(&x->hostScratch, total, cudaHostAllocMapped | cudaHostAllocPortable) !=
            cudaSuccess ||
        cudaHostGetDevicePointer(&x->scratch, x->hostScratch, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("symmetric memory: no memory at all for the setup exchange on device %d", c->cudaDev);
      return 0;
    }
  }
  char* at = (char*)x->scratch + bytes * (size_t)c->rank;
  if (x->hostScratch != NULL) {
    memset((char*)x->hostScratch + bytes * (size_t)c->rank, 0, bytes);
  } else if (x->degraded || cudaMemcpyAsync(at, mine, bytes, cudaMemcpyHostToDevice, x->stream) !=
                                cudaSuccess) {
    (void)cudaGetLastError();
    x->degraded = 1;
    if (cudaMemsetAsync(at, 0, bytes, x->stream) != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("symmetric memory: cannot stage the setup exchange on device %d", c->cudaDev);
      return 0;
    }
  }
  if (x->degraded)
    WARN("symmetric memory: rank %d could not stage its setup exchange on device %d; it takes "
         "part with an empty record, so the communicator forwards on every rank", c->rank,
         c->cudaDev);
  return 1;
}

static void releaseExchange(struct exchangeSlot* x) {
  if (x->stream != NULL || x->scratch != NULL) (void)cudaStreamSynchronize(x->stream);
  if (x->hostScratch != NULL) (void)cudaFreeHost(x->hostScratch);
  else if (x->scratch != NULL) (void)cudaFree(x->scratch);
  if (x->ownStream) (void)cudaStreamDestroy(x->stream);
  (void)cudaGetLastError();
}

ncclResult_t symmExchange(struct symmComm** comms, int n, int* take, const void* const* send,
                          void* const* recv, size_t bytes) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  struct exchangeSlot* slots = calloc((size_t)n, sizeof(*slots));
  int* prepared = calloc((size_t)n, sizeof(int));
  if (slots == NULL || prepared == NULL) {
    WARN("symmetric memory: out of host memory for a setup exchange");
    free(slots);
    free(prepared);
    for (int i = 0; i < n; i++) take[i] = 0;
    return ncclSystemError;
  }
  int taking = 0;
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    struct symmComm* c = comms[i];
    if (symmCommWaitIdle(c, symmParamSetupTimeoutMs()) != ncclSuccess) {
      /* The real NCCL would refuse the call anyway. */
      WARN("symmetric memory: communicator of rank %d is not idle for the setup exchange", c->rank);
      take[i] = 0;
      continue;
    }
    prepared[i] = prepareExchange(c, bytes * (size_t)c->nranks, bytes, send[i], &slots[i]);
    if (!prepared[i]) {
      take[i] = 0;
      continue;
    }
    taking++;
  }
  ncclResult_t res;
  /* One thread may own several ranks: their all-gathers must be issued as one group. */
  if (taking > 1) SYMM_CALL_REAL(res, ncclGroupStart, ());
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    struct symmComm* c = comms[i];
    (void)cudaSetDevice(c->cudaDev);
    SYMM_CALL_REAL(res, ncclAllGather,
                   ((char*)slots[i].scratch + bytes * (size_t)c->rank, slots[i].scratch, bytes,
                    ncclUint8, c->real, slots[i].stream));
    if (res != ncclSuccess && res != ncclInProgress) {
      WARN("symmetric memory: setup all-gather failed (%d) on rank %d", (int)res, c->rank);
      take[i] = 0;
    }
  }
  if (taking > 1) {
    SYMM_CALL_REAL(res, ncclGroupEnd, ());
    if (res != ncclSuccess && res != ncclInProgress) {
      WARN("symmetric memory: setup group failed (%d)", (int)res);
      for (int i = 0; i < n; i++) take[i] = 0;
    }
  }
  for (int i = 0; i < n; i++) {
    if (!prepared[i]) continue;
    struct exchangeSlot* x = &slots[i];
    if (take[i] && symmCommWaitIdle(comms[i], symmParamSetupTimeoutMs()) != ncclSuccess) {
      WARN("symmetric memory: setup all-gather did not complete on rank %d", comms[i]->rank);
      take[i] = 0;
    }
    (void)cudaSetDevice(comms[i]->cudaDev);
    if (take[i] && (cudaMemcpyAsync(recv[i], x->scratch, bytes * (size_t)comms[i]->nranks,
                                    cudaMemcpyDeviceToHost, x->stream) != cudaSuccess ||
                    cudaStreamSynchronize(x->stream) != cudaSuccess)) {
      WARN("symmetric memory: reading the setup exchange back failed on rank %d", comms[i]->rank);
      take[i] = 0;
    }
    releaseExchange(x);
  }
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  free(slots);
  free(prepared);
  return ncclSuccess;
}

/* All-gathers one 32-bit word per rank and ANDs them bitwise: for 0/1 words, 1 only if every
 * rank said 1; other bits are independent agreements riding on the same exchange. */
void symmAgree(struct symmComm** comms, int n, int* take, const uint32_t* mine,
               uint32_t* agreed) {
  const void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  uint32_t(*all)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*all));
  int* took = calloc((size_t)n, sizeof(int));
  if (send == NULL || recv == NULL || all == NULL || took == NULL) {
    WARN("symmetric memory: out of host memory agreeing on setup");
    for (int i = 0; i < n; i++) agreed[i] = 0;
    goto done;
  }
  for (int i = 0; i < n; i++) {
    send[i] = &mine[i];
    recv[i] = all[i];
    took[i] = take[i];
  }
  (void)symmExchange(comms, n, took, send, recv, sizeof(uint32_t));
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    agreed[i] = took[i] ? ~0u : 0u;
    for (int r = 0; r < comms[i]->nranks && agreed[i]; r++) agreed[i] &= all[i][r];
  }
done:
  free(send);
  free(recv);
  free(all);
  free(took);
}

void symmKeyOf(const struct symmTransport* t, uint32_t tag, int rank, struct symmMapKey* key) {
  memset(key, 0, sizeof(*key));
  memcpy(key->secret, t->secret, sizeof(key->secret));
  key->tag = tag;
  key->rank = rank;
}

void symmFillRendezvous(const struct symmTransport* t, uint32_t tag, struct symmFdRendezvous* rv) {
  memset(rv, 0, sizeof(*rv));
  memcpy(rv->secret, t->secret, sizeof(rv->secret));
  rv->tag = tag;
  rv->rank = t->peers.rank;
  rv->nranks = t->peers.nranks;
  memcpy(rv->pids, t->pids, sizeof(rv->pids));
  rv->uid = t->uid;
  rv->timeoutMs = t->timeoutMs;
}

/* ---- per-rank pieces ---------------------------------------------------------------------- */

static int maxRanks(void) {
  int64_t m = symmParamMaxRanks();
  return m < 2 ? 2 : m > SYMM_MAX_RANKS ? SYMM_MAX_RANKS : (int)m;
}

static void buildRecord(const struct symmComm* c, struct symmPeerRecord* rec) {
  memset(rec, 0, sizeof(*rec));
  rec->version = SYMM_RECORD_VERSION;
  rec->rank = c->rank;
  rec->hostHash = symmHostHash();
  rec->pid = (int32_t)getpid();
  rec->uid = (uint32_t)getuid();
  rec->cudaDev = c->cudaDev;
  if (symmDisabled()) rec->flags |= SYMM_REC_DISABLED;
  if (!c->kernelsLoaded) rec->flags |= SYMM_REC_NO_KERNELS;
  if (cudaDeviceGetAttribute(&rec->ccMajor, cudaDevAttrComputeCapabilityMajor, c->cudaDev) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&rec->ccMinor, cudaDevAttrComputeCapabilityMinor, c->cudaDev) !=
          cudaSuccess ||
      cudaDeviceGetPCIBusId(rec->busId, sizeof(rec->busId), c->cudaDev) != cudaSuccess) {
    (void)cudaGetLastError();
    rec->flags |= SYMM_REC_SETUP_FAILED;
  }
  if (symmCuLoad() == ncclSuccess) {
    CUdevice dev;
    int vmm = 0, posix = 0;
    size_t gran = 0;
    if (CU_CALL(SYMM_LOG_INFO, cuDeviceGet, (&dev, c->cudaDev)) == CUDA_SUCCESS &&
        CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
                (&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev)) ==
            CUDA_SUCCESS &&
        CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
                (&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev)) ==
            CUDA_SUCCESS &&
        vmm && posix && symmVmmGranularity(c->cudaDev, &gran) == ncclSuccess && gran > 0) {
      rec->flags |= SYMM_REC_VMM;
      rec->granularity = gran;
    }
    /* The environment guard is checked first inside; no device query when multicast is off. */
    if (symmMulticastUsable(c->cudaDev)) rec->flags |= SYMM_REC_MULTICAST;
  }
  if (c->rank == 0 && getrandom(rec->secret, sizeof(rec->secret), 0) != (ssize_t)sizeof(rec->secret)) {
    WARN("symmetric memory: getrandom failed; this communicator forwards");
    rec->flags |= SYMM_REC_SETUP_FAILED;
  }
}

/* Bit q set when our device can use rank q's memory. */
static uint32_t accessMask(const struct symmComm* c, const struct symmPeerRecord* recs) {
  uint32_t mask = 0;
  for (int q = 0; q < c->nranks; q++) {
    int theirDev = -1, can = 0;
    if (q == c->rank) {
      mask |= 1u << q;
      continue;
    }
    if (cudaDeviceGetByPCIBusId(&theirDev, recs[q].busId) != cudaSuccess) {
      (void)cudaGetLastError();
      continue; /* not visible in this process */
    }
    if (theirDev == c->cudaDev) {
      mask |= 1u << q;
    } else if (cudaDeviceCanAccessPeer(&can, c->cudaDev, theirDev) == cudaSuccess && can) {
      mask |= 1u << q;
    }
  }
  return mask;
}

struct setupCtx {
  struct symmComm* comm;
  struct symmPeerRecord records[SYMM_MAX_RANKS];
  struct symmVerdict verdict;
  struct symmTransport* t;
  struct symmFdServer* server;
  struct symmFdServer* mcServer;
  struct symmFdServer* regServer; /* this rank's registration channel (userreg.c) */
};

static void freeTransport(struct symmTransport* t, int abort);

/* Allocates, maps and publishes this rank's staging memory, and starts serving its fd. */
static ncclResult_t buildLocal(struct setupCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  ncclResult_t res = ncclSuccess;
  CUDACHECK(cudaSetDevice(c->cudaDev));
  size_t gran = 1;
  for (int r = 0; r < c->nranks; r++)
    if (x->records[r].granularity > gran) gran = x->records[r].granularity;
  size_t bufferBytes = roundUp((size_t)symmParamBufferBytes(), gran);
  size_t signalBytes = roundUp((size_t)symmParamSignalBytes(), 4096);
  t->allocBytes = roundUp(bufferBytes + signalBytes, gran);
  t->peers.bufferBytes = bufferBytes;
  t->peers.signalBytes = t->allocBytes - bufferBytes; /* the rounding slack goes to signals */

  CUmemGenericAllocationHandle handle;
  CUdeviceptr base = 0;
  NCCLCHECKGOTO(symmVmmCreate(c->cudaDev, t->allocBytes, &handle), res, fail);
  NCCLCHECKGOTO(symmVmmMap(handle, t->allocBytes, c->cudaDev, &base), res, release_handle);
  CUDACHECKGOTO(cudaMemset((void*)(base + bufferBytes), 0, t->peers.signalBytes), res, unmap);
  CUDACHECKGOTO(cudaDeviceSynchronize(), res, unmap);
  struct symmMapKey key;
  symmKeyOf(t, SYMM_TAG_STAGING, c->rank, &key);
  NCCLCHECKGOTO(symmRegistryPublish(&key, handle, base, t->allocBytes, 0, c->cudaDev,
                                    &t->maps[c->rank]),
                res, unmap);
  /* From here the registry owns handle and mapping. */
  uint32_t remote = 0;
  for (int r = 0; r < c->nranks; r++)
    if (t->pids[r] != t->pids[c->rank]) remote |= 1u << r;
  if (remote != 0) {
    int fd = -1;
    NCCLCHECK(symmVmmExportFd(handle, &fd));
    struct symmFdRendezvous rv;
    symmFillRendezvous(t, SYMM_TAG_STAGING, &rv);
    res = symmFdServerStart(&rv, fd, remote, &x->server);
    close(fd);
    memset(&rv, 0, sizeof(rv));
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
unmap:
  symmVmmUnmap(base, t->allocBytes);
release_handle:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (handle));
fail:
  return res;
}

/* Maps every peer's staging memory: same process through the registry, others by fd. */
static ncclResult_t mapPeers(struct setupCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  CUDACHECK(cudaSetDevice(c->cudaDev));
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_STAGING, &rv);
  ncclResult_t res = ncclSuccess;
  for (int k = 1; k < c->nranks && res == ncclSuccess; k++) {
    int q = (c->rank + k) % c->nranks; /* stagger so servers are not all hit at once */
    struct symmMapKey key;
    symmKeyOf(t, SYMM_TAG_STAGING, q, &key);
    if (t->pids[q] == t->pids[c->rank]) {
      res = symmRegistryAcquireLocal(&key, c->cudaDev, t->timeoutMs, &t->maps[q]);
    } else {
      int fd = -1;
      res = symmFdFetch(&rv, q, &fd);
      if (res == ncclSuccess) res = symmRegistryAcquireFd(&key, fd, t->allocBytes, c->cudaDev, &t->maps[q]);
    }
  }
  memset(&rv, 0, sizeof(rv));
  if (res != ncclSuccess) return res;
  for (int r = 0; r < c->nranks; r++) {
    t->peers.buffers[r] = (void*)t->maps[r]->base;
    t->peers.signals[r] = (uint64_t*)(t->maps[r]->base + t->peers.bufferBytes);
  }
  return ncclSuccess;
}

/* Private state: epochs (device) and the abort/error words (host-mapped). */
static ncclResult_t buildPrivate(struct setupCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  CUDACHECK(cudaSetDevice(c->cudaDev));
  t->peers.localStateBytes = (size_t)symmParamLocalStateBytes();
  CUDACHECK(cudaMalloc(&t->localState, t->peers.localStateBytes));
  CUDACHECK(cudaMemset(t->localState, 0, t->peers.localStateBytes));
  t->peers.localState = t->localState;
  CUDACHECK(cudaHostAlloc((void**)&t->hostFlags, HOST_FLAG_WORDS * sizeof(uint32_t),
                          cudaHostAllocMapped | cudaHostAllocPortable));
  memset(t->hostFlags, 0, HOST_FLAG_WORDS * sizeof(uint32_t));
  void* devFlags = NULL;
  CUDACHECK(cudaHostGetDevicePointer(&devFlags, t->hostFlags, 0));
  t->peers.abortFlag = (volatile uint32_t*)devFlags + FLAG_ABORT;
  t->peers.errorFlag = (volatile uint32_t*)devFlags + FLAG_ERROR;
  CUDACHECK(cudaEventCreateWithFlags(&t->lastLaunch, cudaEventDisableTiming));
  CUDACHECK(cudaDeviceSynchronize());
  return ncclSuccess;
}

/* ---- multicast (only where every guard allows it; never on the shared test machines) ------ */

static ncclResult_t multicastServe(struct setupCtx* x) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  if (c->rank != 0) return ncclSuccess;
  int fd = -1;
  NCCLCHECK(symmMulticastCreate(c->nranks, t->peers.bufferBytes, &t->mcHandle, &t->mcBytes, &fd));
  t->mcCreated = 1;
  uint32_t remote = 0;
  for (int r = 0; r < c->nranks; r++)
    if (t->pids[r] != t->pids[0]) remote |= 1u << r;
  struct symmFdRendezvous rv;
  symmFillRendezvous(t, SYMM_TAG_MULTICAST, &rv);
  ncclResult_t res = remote ? symmFdServerStart(&rv, fd, remote, &x->mcServer) : ncclSuccess;
  close(fd);
  return res;
}

/* Not rank 0: obtain the object (another process by fd; ours: a fresh export of the same). */
static ncclResult_t multicastJoin(struct setupCtx* x, struct setupCtx* all, int n) {
  struct symmComm* c = x->comm;
  struct symmTransport* t = x->t;
  if (c->rank != 0) {
    int fd = -1;
    if (t->pids[0] == t->pids[c->rank]) {
      /* Rank 0 lives in this process: it is one of `all` or another thread's; export again. */
      struct symmTransport* owner = NULL;
      for (int i = 0; i < n; i++)
        if (all[i].t && all[i].comm->rank == 0 && memcmp(all[i].t->secret, t->secret, 16) == 0)
          owner = all[i].t;
      if (owner == NULL || !owner->mcCreated) {
        INFO(SYMM_TRANSPORT, "multicast: rank 0 is another thread of this process; not supported");
        return ncclInvalidUsage;
      }
      NCCLCHECK(symmVmmExportFd(owner->mcHandle, &fd));
      t->mcBytes = owner->mcBytes;
    } else {
      struct symmFdRendezvous rv;
      symmFillRendezvous(t, SYMM_TAG_MULTICAST, &rv);
      ncclResult_t res = symmFdFetch(&rv, 0, &fd);
      memset(&rv, 0, sizeof(rv));
      if (res != ncclSuccess) return res;
      t->mcBytes = t->peers.bufferBytes; /* rank 0 rounds to the same granularity */
    }
    NCCLCHECK(symmMulticastImport(fd, &t->mcHandle));
    t->mcCreated = 1;
  }
  return symmMulticastAddDevice(t->mcHandle, c->cudaDev);
}

static void multicastDrop(struct symmTransport* t) {
  if (!t->mcCreated) return;
  symmMulticastRelease(t->mcHandle, t->mcBytes, t->cudaDev, t->mcBound, t->mcBase);
  t->mcCreated = t->mcBound = 0;
  t->mcBase = 0;
  t->peers.multicastBuffer = NULL;
}

/* ---- setup ------------------------------------------------------------------------------- */

static void finishServers(struct setupCtx* x, int cancel) {
  if (x->server) (void)symmFdServerFinish(x->server, cancel);
  if (x->mcServer) (void)symmFdServerFinish(x->mcServer, cancel);
  if (x->regServer) (void)symmFdServerFinish(x->regServer, cancel);
  x->server = x->mcServer = x->regServer = NULL;
}

/* Most ranks on one GPU (by PCI bus id), from the all-gathered records: the same on all ranks. */
static int ranksPerDevice(const struct symmPeerRecord* records, int nranks) {
  int most = 1;
  for (int r = 0; r < nranks; r++) {
    int same = 0;
    for (int q = 0; q < nranks; q++)
      same += strncmp(records[r].busId, records[q].busId, sizeof(records[r].busId)) == 0;
    if (same > most) most = same;
  }
  return most;
}

ncclResult_t symmTransportSetup(struct symmComm** comms, int n) {
  if (n <= 0) return ncclSuccess;
  struct setupCtx* ctx = calloc((size_t)n, sizeof(*ctx));
  int* take = calloc((size_t)n, sizeof(int));
  const void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  uint32_t* mine = calloc((size_t)n, sizeof(uint32_t));
  uint32_t* agreed = calloc((size_t)n, sizeof(uint32_t));
  uint32_t(*masks)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*masks));
  struct symmPeerRecord* myRecords = calloc((size_t)n, sizeof(*myRecords));
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  if (!ctx || !take || !send || !recv || !mine || !agreed || !masks || !myRecords) {
    WARN("symmetric memory: out of host memory at setup; communicators forward");
    goto done;
  }

  /* Stage 0: what every rank knows alike without talking (identical decisions). */
  for (int i = 0; i < n; i++) {
    struct symmComm* c = comms[i];
    ctx[i].comm = c;
    if (c->nranks < 2 || c->nranks > maxRanks()) {
      INFO(SYMM_INIT, "comm %p forwards: world size %d outside 2..%d (SYMMCOLL_MAX_RANKS)",
           (void*)c->real, c->nranks, maxRanks());
      continue;
    }
    take[i] = 1;
    (void)cudaSetDevice(c->cudaDev);
    buildRecord(c, &myRecords[i]);
    send[i] = &myRecords[i];
    recv[i] = ctx[i].records;
  }

  /* Stage 1: all-gather the records and decide from the table. */
  (void)symmExchange(comms, n, take, send, recv, sizeof(struct symmPeerRecord));
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    struct symmComm* c = comms[i];
    if (!symmDecideFromRecords(ctx[i].records, c->nranks, maxRanks(), &ctx[i].verdict)) {
      INFO(SYMM_INIT, "comm %p forwards: %s", (void*)c->real, ctx[i].verdict.reason);
      take[i] = 0;
      continue;
    }
    (void)cudaSetDevice(c->cudaDev);
    mine[i] = accessMask(c, ctx[i].records);
    send[i] = &mine[i];
    recv[i] = masks[i];
  }

  /* Stage 2: everyone's peer-access verdicts, so all agree. */
  (void)symmExchange(comms, n, take, send, recv, sizeof(uint32_t));
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    if (!symmDecideFromAccess(masks[i], comms[i]->nranks, &ctx[i].verdict)) {
      INFO(SYMM_INIT, "comm %p forwards: %s", (void*)comms[i]->real, ctx[i].verdict.reason);
      take[i] = 0;
    }
  }

  /* Stage 3: local memory, published and served. Failures from here on are agreed. */
  for (int i = 0; i < n; i++) {
    mine[i] = 0;
    if (!take[i]) continue;
    struct symmComm* c = comms[i];
    struct symmTransport* t = calloc(1, sizeof(*t));
    if (t == NULL) {
      WARN("symmetric memory: out of host memory for a transport");
      continue;
    }
    ctx[i].t = t;
    pthread_mutex_init(&t->lock, NULL);
    t->cudaDev = c->cudaDev;
    t->peers.rank = c->rank;
    t->peers.nranks = c->nranks;
    t->peers.ranksPerDevice = ranksPerDevice(ctx[i].records, c->nranks);
    t->uid = ctx[i].records[0].uid;
    t->timeoutMs = (int)symmParamSetupTimeoutMs();
    memcpy(t->secret, ctx[i].records[0].secret, sizeof(t->secret));
    for (int r = 0; r < c->nranks; r++) t->pids[r] = ctx[i].records[r].pid;
    /* Bit 0: built; bit 1: serving a registration channel (optional, agreed separately). */
    if (buildPrivate(&ctx[i]) == ncclSuccess && buildLocal(&ctx[i]) == ncclSuccess)
      mine[i] = 1u | (symmUserRegServe(t, &ctx[i].regServer) ? 2u : 0u);
  }
  symmAgree(comms, n, take, mine, agreed);

  /* Stage 4: map every peer (and multicast where allowed), then the final agreement. */
  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    if (!(agreed[i] & 1u)) {
      mine[i] = 0;
      continue;
    }
    mine[i] = mapPeers(&ctx[i]) == ncclSuccess;
    if (mine[i]) symmUserRegConnect(ctx[i].t, (agreed[i] & 2u) != 0); /* every rank serves one */
  }
  int anyMulticast = 0;
  for (int i = 0; i < n; i++) anyMulticast |= take[i] && (agreed[i] & 1u) && ctx[i].verdict.multicast;
  if (anyMulticast) {
    /* Multicast is optional: its own agreements; failure only turns multimem off. */
    int* mcTake = calloc((size_t)n, sizeof(int));
    uint32_t* mcMine = calloc((size_t)n, sizeof(uint32_t));
    uint32_t* mcAgreed = calloc((size_t)n, sizeof(uint32_t));
    if (mcTake && mcMine && mcAgreed) {
      for (int i = 0; i < n; i++) {
        mcTake[i] = take[i] && (agreed[i] & 1u) && ctx[i].verdict.multicast;
        if (mcTake[i]) mcMine[i] = mine[i] && multicastServe(&ctx[i]) == ncclSuccess;
      }
      symmAgree(comms, n, mcTake, mcMine, mcAgreed);
      for (int i = 0; i < n; i++)
        if (mcTake[i]) mcMine[i] = mcAgreed[i] && multicastJoin(&ctx[i], ctx, n) == ncclSuccess;
      symmAgree(comms, n, mcTake, mcMine, mcAgreed);
      for (int i = 0; i < n; i++) {
        if (!mcTake[i]) continue;
        struct symmTransport* t = ctx[i].t;
        if (mcAgreed[i] && symmMulticastBindAndMap(t->mcHandle, t->mcBytes, t->maps[comms[i]->rank]->handle,
                                                   0, t->cudaDev, &t->mcBase) == ncclSuccess) {
          t->mcBound = 1;
          t->peers.multicastBuffer = (void*)t->mcBase;
        }
        mcMine[i] = t->mcBound;
      }
      symmAgree(comms, n, mcTake, mcMine, mcAgreed);
      for (int i = 0; i < n; i++) {
        if (!mcTake[i]) continue;
        if (ctx[i].mcServer) (void)symmFdServerFinish(ctx[i].mcServer, 1);
        ctx[i].mcServer = NULL;
        if (!mcAgreed[i]) multicastDrop(ctx[i].t);
      }
    } else {
      WARN("symmetric memory: out of host memory for multicast setup; multimem stays off");
    }
    free(mcTake);
    free(mcMine);
    free(mcAgreed);
  }
  symmAgree(comms, n, take, mine, agreed);

  for (int i = 0; i < n; i++) {
    if (!take[i]) continue;
    struct symmComm* c = comms[i];
    finishServers(&ctx[i], 1);
    if (agreed[i]) {
      pthread_rwlock_wrlock(&c->transportLock);
      c->transport = ctx[i].t;
      pthread_rwlock_unlock(&c->transportLock);
      ctx[i].t = NULL;
      INFO(SYMM_INIT, "comm %p rank %d/%d: symmetric memory ready (%zu KiB staging, multicast %s)",
           (void*)c->real, c->rank, c->nranks, c->transport->peers.bufferBytes >> 10,
           c->transport->peers.multicastBuffer ? "on" : "off");
    } else {
      INFO(SYMM_INIT, "comm %p forwards: symmetric memory setup failed on %s rank", (void*)c->real,
           mine[i] ? "another" : "this");
    }
  }

done:
  for (int i = 0; ctx && i < n; i++) {
    finishServers(&ctx[i], 1);
    if (ctx[i].t) freeTransport(ctx[i].t, 0);
    memset(ctx[i].records, 0, sizeof(ctx[i].records)); /* the secret */
  }
  if (myRecords) memset(myRecords, 0, (size_t)n * sizeof(*myRecords));
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  free(ctx);
  free(take);
  free(send);
  free(recv);
  free(mine);
  free(agreed);
  free(masks);
  free(myRecords);
  return ncclSuccess;
}

/* ---- teardown ---------------------------------------------------------------------------- */

/* Waits for our last kernel; on abort only up to a deadline (kernels exit on the flag). Returns
 * 0 if kernels may still be running (then memory is leaked rather than unmapped under them). */
static int quiesce(struct symmTransport* t, int abort) {
  if (!t->launched || t->lastLaunch == NULL) return 1;
  if (!abort) return cudaEventSynchronize(t->lastLaunch) == cudaSuccess;
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    cudaError_t e = cudaEventQuery(t->lastLaunch);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= 5) return 0;
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
}

static void freeTransport(struct symmTransport* t, int abort) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  (void)cudaSetDevice(t->cudaDev);
  if (abort && t->hostFlags) __atomic_store_n(&t->hostFlags[FLAG_ABORT], 1u, __ATOMIC_SEQ_CST);
  if (!quiesce(t, abort)) {
    WARN("symmetric memory: kernels on device %d did not finish; leaking their memory rather than "
         "unmapping it under them", t->cudaDev);
    symmUserRegTeardown(t, 0);
    goto restore;
  }
  /* First: its thread writes into localState and maps peers' regions. */
  symmUserRegTeardown(t, 1);
  symmWindowsTeardown(t);
  multicastDrop(t);
  for (int r = SYMM_MAX_RANKS - 1; r >= 0; r--) {
    symmRegistryRelease(t->maps[r]);
    t->maps[r] = NULL;
  }
  if (t->lastLaunch) (void)cudaEventDestroy(t->lastLaunch);
  if (t->hostFlags) (void)cudaFreeHost(t->hostFlags);
  if (t->localState) (void)cudaFree(t->localState);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&t->lock);
  memset(t->secret, 0, sizeof(t->secret));
  free(t);
restore:
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
}

void symmTransportTeardown(struct symmComm* comm, int abort) {
  if (comm == NULL) return;
  /* Raise the flag before waiting for launches in flight, so their kernels can exit. */
  if (abort) symmTransportSetAbort(comm);
  pthread_rwlock_wrlock(&comm->transportLock);
  struct symmTransport* t = comm->transport;
  comm->transport = NULL;
  pthread_rwlock_unlock(&comm->transportLock);
  if (t != NULL) freeTransport(t, abort);
}

const struct symmPeers* symmTransportBeginLaunch(struct symmComm* comm) {
  if (comm == NULL || comm->transport == NULL) return NULL;
  pthread_rwlock_rdlock(&comm->transportLock);
  struct symmTransport* t = comm->transport;
  if (t == NULL || __atomic_load_n(&t->hostFlags[FLAG_ABORT], __ATOMIC_ACQUIRE) != 0) {
    pthread_rwlock_unlock(&comm->transportLock);
    return NULL;
  }
  return &t->peers;
}

void symmTransportEndLaunch(struct symmComm* comm, cudaStream_t stream, int launched) {
  if (launched) symmTransportNoteLaunch(comm, stream);
  pthread_rwlock_unlock(&comm->transportLock);
}

/* ---- queries ----------------------------------------------------------------------------- */

const struct symmPeers* symmTransportPeers(const struct symmComm* comm) {
  return comm && comm->transport ? &comm->transport->peers : NULL;
}

int symmTransportMulticastReady(const struct symmComm* comm) {
  /* No multicast mapping means no multicast (and skips the environment scan on every call);
   * with one, the environment still has the last word. */
  if (comm == NULL || comm->transport == NULL || comm->transport->peers.multicastBuffer == NULL)
    return 0;
  return symmMulticastEnvAllows();
}

long symmTransportMulticastAttempts(void) { return symmMulticastAttempts(); }

void symmTransportNoteLaunch(struct symmComm* comm, cudaStream_t stream) {
  if (comm == NULL || comm->transport == NULL) return;
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone)
    return; /* graphs: the application destroys them before the communicator */
  if (cudaEventRecord(comm->transport->lastLaunch, stream) == cudaSuccess) comm->transport->launched = 1;
}

void symmTransportSetAbort(struct symmComm* comm) {
  if (comm == NULL) return;
  pthread_rwlock_rdlock(&comm->transportLock);
  struct symmTransport* t = comm->transport;
  if (t != NULL && t->hostFlags != NULL)
    __atomic_store_n(&t->hostFlags[FLAG_ABORT], 1u, __ATOMIC_SEQ_CST);
  pthread_rwlock_unlock(&comm->transportLock);
}

ncclResult_t symmTransportAsyncError(const struct symmComm* comm) {
  if (comm == NULL) return ncclSuccess;
  struct symmComm* c = (struct symmComm*)comm; /* the lock is not part of the logical state */
  pthread_rwlock_rdlock(&c->transportLock);
  uint32_t err = 0;
  if (c->transport != NULL && c->transport->hostFlags != NULL)
    err = __atomic_load_n(&c->transport->hostFlags[FLAG_ERROR], __ATOMIC_ACQUIRE);
  pthread_rwlock_unlock(&c->transportLock);
  return err ? ncclRemoteError : ncclSuccess;
}
