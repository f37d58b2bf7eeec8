/* SPDX-License-Identifier: Apache-2.0 */
/* The bottom of src/transport: all-gathers over the real communicator, agreements (AND over
 * every rank), registry keys and socket rendezvous. Setup, windows and registration use these;
 * this file uses none of them. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "failure.h"
#include "fdpass.h"
#include "forward.h"
#include "internal.h"
#include "param.h"

SYMMCOLL_PARAM_FULL(FaultExchangeRank, "FAULT_EXCHANGE_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: this rank's setup exchanges act as if device memory had run out "
                    "(-1: never)")
SYMMCOLL_PARAM_FULL(FaultReadbackRank, "FAULT_READBACK_RANK", -1, -1, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: on this rank, the process's setup exchange number "
                    "SYMMCOLL_FAULT_READBACK_CALL fails reading its result back (-1: never)")
SYMMCOLL_PARAM_FULL(FaultReadbackCall, "FAULT_READBACK_CALL", 0, 0, INT32_MAX, SYMM_PARAM_TEST,
                    "tests only: which setup exchange of the process (from 0) "
                    "SYMMCOLL_FAULT_READBACK_RANK fails")

static int exchangeCalls; /* this process's symmExchange calls so far (atomic; the fault knob) */

/* Where one rank's all-gather lives: device memory on its own stream, or, after a local failure,
 * pinned host memory. */
struct exchangeSlot {
  void* scratch;     /* device-visible address of nranks * bytes */
  void* hostScratch; /* the pinned host allocation behind it, or NULL */
  int deviceScratch; /* scratch is stream-ordered device memory of `stream` */
  cudaStream_t stream;
  int degraded;      /* takes part with an all-zero payload */
};

/* A local failure must not keep a rank out of an all-gather its peers are already in: they
 * would wait in NCCL forever. It takes part with an all-zero payload, which every caller reads
 * as "no" (record version 0, no peer access, vote 0, window not usable), so all ranks then
 * decide alike. Only a rank that cannot reach its device at all stays out. Device memory comes
 * from the stream-ordered allocator on a private stream: nothing here waits for the device. */
static int prepareExchange(struct symmComm* c, size_t total, size_t bytes, const void* mine,
                           struct exchangeSlot* x) {
  if (cudaSetDevice(c->cudaDev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    x->stream = NULL;
    WARN("symmetric memory: cannot use device %d for the setup exchange", c->cudaDev);
    return 0;
  }
  if (symmParamFaultExchangeRank() != c->rank &&
      cudaMallocAsync(&x->scratch, total, x->stream) == cudaSuccess) {
    x->deviceScratch = 1;
  } else {
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
  } else if (cudaMemcpyAsync(at, mine, bytes, cudaMemcpyHostToDevice, x->stream) != cudaSuccess) {
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

/* Everything on x->stream is complete (or it never got work). */
static void releaseExchange(struct exchangeSlot* x) {
  if (x->deviceScratch) (void)cudaFreeAsync(x->scratch, x->stream);
  if (x->hostScratch != NULL) {
    /* Only after a local failure: the pinned fallback is freed once the stream is idle. */
    (void)cudaStreamSynchronize(x->stream);
    (void)cudaFreeHost(x->hostScratch);
  }
  if (x->stream != NULL) (void)cudaStreamDestroy(x->stream);
  (void)cudaGetLastError();
}

ncclResult_t symmWaitStream(const struct symmComm* comm, cudaStream_t stream) {
  for (unsigned polls = 0;; polls++) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return ncclSuccess;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      WARN("symmetric memory: waiting for a setup stream failed: %s", cudaGetErrorString(e));
      return ncclUnhandledCudaError;
    }
    if (__atomic_load_n(&comm->gone, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE))
      return ncclInvalidUsage;
    if (polls < 64) {
      sched_yield();
    } else {
      struct timespec pause = {0, 20 * 1000};
      nanosleep(&pause, NULL);
    }
  }
}

/* Around the calls of a setup exchange into the real NCCL, which may block there until every
 * peer takes part: every communicator of the exchange is counted in, then none may be aborting;
 * an abort raises `aborting` first and then reads the count (both sequentially consistent), so
 * either the exchange stays out, or the abort sees it inside (init.c, stopStaging). All or
 * none: one thread drives them all, and a group missing one of its ranks would never end.
 * 0: stay out (nobody counted in any more). */
static int enterReal(struct symmComm** comms, int n, const int* inExchange) {
  for (int i = 0; i < n; i++)
    if (inExchange[i]) __atomic_add_fetch(&comms[i]->inRealExchange, 1, __ATOMIC_SEQ_CST);
  int stop = 0;
  for (int i = 0; i < n && !stop; i++)
    stop = inExchange[i] && (__atomic_load_n(&comms[i]->aborting, __ATOMIC_SEQ_CST) ||
                             __atomic_load_n(&comms[i]->gone, __ATOMIC_SEQ_CST));
  if (!stop) return 1;
  for (int i = 0; i < n; i++)
    if (inExchange[i]) __atomic_sub_fetch(&comms[i]->inRealExchange, 1, __ATOMIC_SEQ_CST);
  return 0;
}

static void leaveReal(struct symmComm** comms, int n, const int* entered) {
  for (int i = 0; i < n; i++)
    if (entered[i]) __atomic_sub_fetch(&comms[i]->inRealExchange, 1, __ATOMIC_SEQ_CST);
}

/* A rank that staged its part of an exchange and then could not finish it (a failed all-gather,
 * read-back or stream), other than for an abort, fails its communicator: its peers are in the
 * same exchange and either wait in it for this rank or have decided from a result this rank
 * does not have, so no path it takes alone would match theirs (a forwarded collective would
 * meet their next setup all-gather). Every later call on it returns the error. A rank that could
 * not even use its device or whose real communicator already failed stays out without this:
 * the real NCCL refuses its calls as well. */
static void failDropouts(struct symmComm** comms, int n, const int* prepared, const int* done,
                         const ncclResult_t* realError) {
  for (int i = 0; i < n; i++) {
    struct symmComm* c = comms[i];
    if (!prepared[i] || done[i] || __atomic_load_n(&c->gone, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE))
      continue;
    /* The real NCCL's all-gather failing for a peer (one that aborted, say) is the peer's
     * failure, reported as NCCL reports it: ncclRemoteError. */
    symmCommFail(c, realError[i] == ncclRemoteError ? SYMM_ERR_PEER : SYMM_ERR_LAUNCH, 0);
  }
}

ncclResult_t symmExchange(struct symmComm** comms, int n, int* inExchange,
                          const void* const* send, void* const* recv, size_t bytes) {
  int prevDev = -1;
  (void)cudaGetDevice(&prevDev);
  struct exchangeSlot* slots = calloc((size_t)n, sizeof(*slots));
  int* prepared = calloc((size_t)n, sizeof(int));
  ncclResult_t* realError = calloc((size_t)n, sizeof(ncclResult_t)); /* all ncclSuccess */
  if (slots == NULL || prepared == NULL || realError == NULL) {
    WARN("symmetric memory: out of host memory for a setup exchange");
    free(slots);
    free(prepared);
    free(realError);
    for (int i = 0; i < n; i++) inExchange[i] = 0;
    return ncclSystemError;
  }
  const int call = __atomic_fetch_add(&exchangeCalls, 1, __ATOMIC_RELAXED);
  int taking = 0;
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    if (symmCommWaitIdle(c, -1) != ncclSuccess) {
      /* The real NCCL would refuse the call anyway. */
      WARN("symmetric memory: communicator of rank %d is not idle for the setup exchange", c->rank);
      inExchange[i] = 0;
      continue;
    }
    prepared[i] = prepareExchange(c, bytes * (size_t)c->nranks, bytes, send[i], &slots[i]);
    if (!prepared[i]) {
      inExchange[i] = 0;
      continue;
    }
    taking++;
  }
  ncclResult_t res;
  int* entered = calloc((size_t)n, sizeof(int));
  if (entered == NULL) WARN("symmetric memory: out of host memory for a setup exchange");
  if (entered == NULL || !enterReal(comms, n, inExchange)) {
    for (int i = 0; i < n; i++) inExchange[i] = 0;
  } else {
    for (int i = 0; i < n; i++) entered[i] = inExchange[i];
  }
  /* One thread may own several ranks: their all-gathers must be issued as one group (whose end
   * is where the real NCCL may wait for peers). */
  int issuing = 0;
  for (int i = 0; i < n; i++) issuing += inExchange[i];
  const int grouped = taking > 1 && issuing > 0;
  if (grouped) SYMM_CALL_REAL(res, ncclGroupStart, ());
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    struct symmComm* c = comms[i];
    (void)cudaSetDevice(c->cudaDev);
    SYMM_CALL_REAL(res, ncclAllGather,
                   ((char*)slots[i].scratch + bytes * (size_t)c->rank, slots[i].scratch, bytes,
                    ncclUint8, c->real, slots[i].stream));
    if (res != ncclSuccess && res != ncclInProgress) {
      WARN("symmetric memory: setup all-gather failed (%d) on rank %d", (int)res, c->rank);
      realError[i] = res;
      inExchange[i] = 0;
    }
  }
  if (grouped) {
    SYMM_CALL_REAL(res, ncclGroupEnd, ());
    if (res != ncclSuccess && res != ncclInProgress) {
      WARN("symmetric memory: setup group failed (%d)", (int)res);
      for (int i = 0; i < n; i++) {
        if (inExchange[i]) realError[i] = res;
        inExchange[i] = 0;
      }
    }
  }
  if (entered != NULL) leaveReal(comms, n, entered);
  free(entered);
  for (int i = 0; i < n; i++) {
    if (!prepared[i]) continue;
    struct exchangeSlot* x = &slots[i];
    struct symmComm* c = comms[i];
    const ncclResult_t idle = inExchange[i] ? symmCommWaitIdle(c, -1) : ncclSuccess;
    if (idle != ncclSuccess) {
      /* A non-blocking communicator's all-gather reports a peer's failure here. */
      WARN("symmetric memory: setup all-gather did not complete on rank %d (%d)", c->rank,
           (int)idle);
      realError[i] = idle;
      inExchange[i] = 0;
    }
    (void)cudaSetDevice(c->cudaDev);
    /* Polled, so that an abort on another thread (which raises `gone`) is never stuck here. */
    if (symmWaitStream(c, x->stream) != ncclSuccess) {
      inExchange[i] = 0;
      /* Abandoned (abort): the real NCCL still owns the posted all-gather, which may write into
       * the scratch and use the stream until the real communicator is aborted, after this
       * returns. Freeing them now would hand it freed memory: they are left behind (a few
       * hundred bytes per abandoned exchange). */
      (void)cudaGetLastError();
      continue;
    }
    /* Never the legacy stream: it would wait behind blocking streams where kernels spin. */
    const int faulty = c->rank == symmParamFaultReadbackRank() && call == symmParamFaultReadbackCall();
    if (inExchange[i] && (faulty || cudaMemcpyAsync(recv[i], x->scratch, bytes * (size_t)c->nranks,
                                          cudaMemcpyDefault, x->stream) != cudaSuccess ||
                          cudaStreamSynchronize(x->stream) != cudaSuccess)) {
      (void)cudaGetLastError();
      WARN("symmetric memory: reading the setup exchange back failed on rank %d", c->rank);
      inExchange[i] = 0;
    }
    releaseExchange(x);
  }
  failDropouts(comms, n, prepared, inExchange, realError);
  if (prevDev >= 0) (void)cudaSetDevice(prevDev);
  free(slots);
  free(prepared);
  free(realError);
  return ncclSuccess;
}

void symmAllRanksAgree(struct symmComm** comms, int n, const int* inExchange,
                       const uint32_t* myVote, uint32_t* allVoted) {
  const void** send = calloc((size_t)n, sizeof(void*));
  void** recv = calloc((size_t)n, sizeof(void*));
  uint32_t(*votes)[SYMM_MAX_RANKS] = calloc((size_t)n, sizeof(*votes));
  int* exchanged = calloc((size_t)n, sizeof(int));
  if (send == NULL || recv == NULL || votes == NULL || exchanged == NULL) {
    WARN("symmetric memory: out of host memory agreeing on setup");
    for (int i = 0; i < n; i++) allVoted[i] = 0;
    goto done;
  }
  for (int i = 0; i < n; i++) {
    send[i] = &myVote[i];
    recv[i] = votes[i];
    exchanged[i] = inExchange[i];
  }
  (void)symmExchange(comms, n, exchanged, send, recv, sizeof(uint32_t));
  for (int i = 0; i < n; i++) {
    if (!inExchange[i]) continue;
    allVoted[i] = exchanged[i] ? ~0u : 0u;
    for (int r = 0; r < comms[i]->nranks && allVoted[i]; r++) allVoted[i] &= votes[i][r];
  }
done:
  free(send);
  free(recv);
  free(votes);
  free(exchanged);
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
  rv->stop = symmSetupStop(t);
}

const volatile uint32_t* symmSetupStop(const struct symmTransport* t) {
  return t->flags.host != NULL ? &t->flags.host[SYMM_HOST_ABORT] : NULL;
}
