/* SPDX-License-Identifier: Apache-2.0 */
/* test_allreduce's long runs: CUDA graphs replayed many times, and the soak of random
 * back-to-back calls checked on the device beside other traffic. */
#include "allreduce_test.h"

#include <string.h>

#include "ar_helpers.h"

/* ------------------------------------------------------------------------------------------ */
/* CUDA graphs: all-reduce then "input += 1" captured once, replayed many times */

void graphTest(struct driver* d) {
  static const size_t counts[2] = {1000, (1u << 20) + 5};
  static const ncclDataType_t types[2] = {ncclFloat32, ncclInt32};
  struct hostCase h, cur;
  hostCaseInit(&h, counts[1] * 4);
  hostCaseInit(&cur, counts[1] * 4);
  long replaysDone = 0;
  for (int algo = SYMM_ALGO_NCCL + 1; algo < SYMM_NALGOS; algo++) {
    for (int ci = 0; ci < 2; ci++) {
      for (int ti = 0; ti < 2; ti++) {
        struct arCall a = {.algo = (enum symmAlgo)algo, .dtype = types[ti], .op = ncclSum,
                           .count = counts[ci]};
        if (!algoWanted(a.algo, a.dtype, a.op, a.count)) continue;
        if (a.count * 4 + 64 > opt.maxBytes) continue;
        /* Two-shot: every other rank reads its input in place (ncclCommRegister style). */
        a.exchangeDescs = a.algo == SYMM_ALGO_TWOSHOT && allRanks != NULL;
        a.descMask = 0x55555555u;
        selectAlgo(d, a.algo);
        randomOffsets(&a);
        hostCaseFill(&h, &a, opt.seed + 999 + (uint64_t)ci * 10 + (uint64_t)ti);
        uploadInputs(d, &a, &h);
        TCHECK(syncAll(d), "graph: upload");
        cudaGraphExec_t exec[SYMM_MAX_RANKS];
        for (int i = 0; i < d->nlocal; i++) {
          CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
          CUDA_OR_DIE(cudaStreamBeginCapture(d->local[i]->stream, cudaStreamCaptureModeRelaxed));
        }
        ncclResult_t r = issueAll(d, &a, 0);
        TCHECK(r == ncclSuccess, "graph capture issue: %s", ncclGetErrorString(r));
        for (int i = 0; i < d->nlocal; i++) {
          struct rankCtx* c = d->local[i];
          CUDA_OR_DIE(cudaSetDevice(c->dev));
          CUDA_OR_DIE(arAddOneDevice((void*)sendPtr(c, &a), a.count, a.dtype, c->stream));
          cudaGraph_t graph;
          CUDA_OR_DIE(cudaStreamEndCapture(c->stream, &graph));
          CUDA_OR_DIE(cudaGraphInstantiate(&exec[i], graph, 0));
          /* Uploaded first: see test/core/README.md, "Graph uploads". */
          CUDA_OR_DIE(cudaGraphUpload(exec[i], c->stream));
          CUDA_OR_DIE(cudaStreamSynchronize(c->stream));
          CUDA_OR_DIE(cudaGraphDestroy(graph));
        }
        /* Ranks as threads on one GPU: no replay starts (its kernels spin until every rank's
         * replay arrives) before every rank has instantiated. On one H200 with 5 ranks, one
         * rank's cudaGraphInstantiate waited inside the driver for the GPU while the other
         * ranks' first replays spun for it, and their next launches waited for its lock. */
        driverBarrier();
        const long every = opt.replays >= 10 ? opt.replays / 10 : 1;
        for (long k = 1; k <= opt.replays; k++) {
          for (int i = 0; i < d->nlocal; i++) {
            CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
            CUDA_OR_DIE(cudaGraphLaunch(exec[i], d->local[i]->stream));
          }
          replaysDone++;
          if (k % every != 0 && k != opt.replays) continue;
          TCHECK(syncAll(d), "graph replay %ld sync", k);
          /* After replay k the output is the all-reduce of (input + k - 1). */
          for (int rr = 0; rr < nranksWorld; rr++) {
            memcpy(cur.in[rr], h.in[rr], a.count * 4);
            arAddHost(a.dtype, cur.in[rr], a.count, (int)(k - 1));
          }
          arHostReference(a.dtype, a.op, nranksWorld, (const void* const*)cur.in, cur.expect,
                          a.count);
          char what[64];
          snprintf(what, sizeof(what), "graph replay %ld", k);
          checkResults(d, &a, &cur, what, -1.0);
        }
        for (int i = 0; i < d->nlocal; i++) {
          CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
          CUDA_OR_DIE(cudaGraphExecDestroy(exec[i]));
        }
      }
    }
  }
  if (d->isLeader) printf("graph: %ld replays per rank checked\n", replaysDone);
  hostCaseFree(&h);
  hostCaseFree(&cur);
}

/* ------------------------------------------------------------------------------------------ */
/* Soak: many random back-to-back calls, checked on the device, mixed with other traffic */

#define SOAK_MAX_COUNT 16384
struct soakData {
  char* in[ncclNumTypes][ncclNumOps];  /* this rank's input (device) */
  char* exp[ncclNumTypes][ncclNumOps]; /* expected result (device) */
};

void soakTest(struct driver* d) {
  struct soakData sd[SYMM_MAX_RANKS];
  struct hostCase h;
  hostCaseInit(&h, SOAK_MAX_COUNT * 8);
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    for (int op = 0; op < ncclNumOps; op++) {
      struct arCall a = {.dtype = (ncclDataType_t)dt, .op = (ncclRedOp_t)op,
                         .count = SOAK_MAX_COUNT};
      hostCaseFill(&h, &a, opt.seed * 31 + (uint64_t)dt * 5 + (uint64_t)op);
      const size_t bytes = SOAK_MAX_COUNT * symmTypeSize(a.dtype);
      for (int i = 0; i < d->nlocal; i++) {
        CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
        CUDA_OR_DIE(cudaMalloc((void**)&sd[i].in[dt][op], bytes));
        CUDA_OR_DIE(cudaMalloc((void**)&sd[i].exp[dt][op], bytes));
        CUDA_OR_DIE(cudaMemcpy(sd[i].in[dt][op], h.in[d->local[i]->rank], bytes,
                               cudaMemcpyHostToDevice));
        CUDA_OR_DIE(cudaMemcpy(sd[i].exp[dt][op], h.expect, bytes, cudaMemcpyHostToDevice));
        /* The rank streams are non-blocking: they do not wait for the legacy stream's copies,
         * whose last bytes may still be in flight when cudaMemcpy returns. */
        CUDA_OR_DIE(cudaStreamSynchronize(cudaStreamLegacy));
      }
    }
  }
  if (opt.mode == MODE_NCCL) {
    /* auto, with the tuning file main() installed (SYMMCOLL_TUNING_FILE): Lamport <= 1 KiB,
     * one-shot <= 4 KiB, two-shot to 16 KiB, multimem (emulated) to 64 KiB, two-shot up to
     * 96 KiB, the real NCCL above. */
    setAlgoEnv(d, "auto");
  }
  long calls = 0, forwarded = 0;
  for (long n = 0; n < opt.soak; n++) {
    const ncclDataType_t dt = (ncclDataType_t)(rnd() % ncclNumTypes);
    const ncclRedOp_t op = (ncclRedOp_t)(rnd() % ncclNumOps);
    static const enum symmAlgo arAlgos[4] = {SYMM_ALGO_LAMPORT, SYMM_ALGO_ONESHOT,
                                             SYMM_ALGO_TWOSHOT, SYMM_ALGO_MULTIMEM};
    enum symmAlgo algo = arAlgos[rnd() % 4];
    const size_t count = (rnd() & 3) ? 1 + rnd() % 512 : 1 + rnd() % SOAK_MAX_COUNT;
    if (!algoWanted(algo, dt, op, count))
      algo = algoWanted(SYMM_ALGO_ONESHOT, dt, op, count) ? SYMM_ALGO_ONESHOT : SYMM_ALGO_TWOSHOT;
    if (!algoWanted(algo, dt, op, count)) continue;
    /* Sizes above the two-shot threshold go to the real NCCL (or the test bootstrap), whose avg
     * rounds differently from ours when 1/n is inexact (n = 3, 5, 6, 7): only ours is checked
     * bit for bit against our reference. */
    if (opt.mode == MODE_NCCL && op == ncclAvg && count * symmTypeSize(dt) > 98304) continue;
    const size_t off = rnd() % (SOAK_MAX_COUNT - count + 1);
    const size_t recvOff = (rnd() % 8) * symmTypeSize(dt);
    const int inPlace = (int)(rnd() % 3 == 0);
    const size_t es = symmTypeSize(dt);
    const int extra = (int)(rnd() % 16);
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      if (inPlace)
        CUDA_OR_DIE(cudaMemcpyAsync(c->recvMem + recvOff, sd[i].in[dt][op] + off * es,
                                    count * es, cudaMemcpyDeviceToDevice, c->stream));
    }
    const int group = opt.mode == MODE_NCCL && d->nlocal > 1;
    if (group) NCCL_OR_DIE(ncclGroupStart());
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      const void* send = inPlace ? (const void*)(c->recvMem + recvOff)
                                 : (const void*)(sd[i].in[dt][op] + off * es);
      ncclResult_t r;
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      if (opt.mode == MODE_DIRECT) {
        struct symmLaunch call = {.coll = SYMM_COLL_ALLREDUCE, .sendbuff = send,
                                  .recvbuff = c->recvMem + recvOff, .count = count, .datatype = dt,
                                  .op = op, .algo = algo, .emulateMultimem = 1,
                                  .pdl = directPdl(c->dev)};
        r = symmCollLaunch(&call, &c->peers, c->stream);
      } else {
        r = ncclAllReduce(send, c->recvMem + recvOff, count, dt, op, c->comm, c->stream);
      }
      if (r != ncclSuccess) TCHECK(0, "soak call %ld: %s", n, ncclGetErrorString(r));
    }
    if (group) NCCL_OR_DIE(ncclGroupEnd());
    for (int i = 0; i < d->nlocal; i++) {
      struct rankCtx* c = d->local[i];
      CUDA_OR_DIE(cudaSetDevice(c->dev));
      CUDA_OR_DIE(arCompareDevice(c->recvMem + recvOff, sd[i].exp[dt][op] + off * es, count * es,
                                  c->devMismatch, c->stream));
    }
    calls++;
    /* Other traffic: forwarded NCCL broadcasts on the same or another stream (nccl mode), or
     * device copies on another stream (direct mode). */
    if (extra < 2) {
      if (group) NCCL_OR_DIE(ncclGroupStart());
      for (int i = 0; i < d->nlocal; i++) {
        struct rankCtx* c = d->local[i];
        CUDA_OR_DIE(cudaSetDevice(c->dev));
        cudaStream_t s = extra == 0 ? c->stream : c->side;
        if (opt.mode == MODE_NCCL)
          NCCL_OR_DIE(ncclBroadcast(c->sendMem, c->sendMem + 4096, 1024, ncclFloat32, 0, c->comm, s));
        else
          CUDA_OR_DIE(cudaMemcpyAsync(c->sendMem + 4096, c->sendMem, 4096, cudaMemcpyDeviceToDevice, s));
      }
      if (group) NCCL_OR_DIE(ncclGroupEnd());
      forwarded++;
    }
    if ((n + 1) % 20000 == 0 || n + 1 == opt.soak) {
      TCHECK(syncAll(d), "soak sync at call %ld", n);
      for (int i = 0; i < d->nlocal; i++) {
        unsigned long long bad = 0;
        CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
        CUDA_OR_DIE(cudaStreamSynchronize(d->local[i]->side));
        CUDA_OR_DIE(cudaMemcpy(&bad, d->local[i]->devMismatch, sizeof(bad), cudaMemcpyDeviceToHost));
        TCHECK(bad == 0, "soak rank %d: %llu wrong bytes in calls up to %ld", d->local[i]->rank,
               bad, n);
        /* On the compare kernels' stream: the legacy stream would not order it before them. */
        CUDA_OR_DIE(cudaMemsetAsync(d->local[i]->devMismatch, 0, sizeof(bad), d->local[i]->stream));
      }
    }
  }
  if (d->isLeader)
    printf("soak: %ld all-reduce calls, %ld other operations interleaved\n", calls, forwarded);
  for (int i = 0; i < d->nlocal; i++) {
    CUDA_OR_DIE(cudaSetDevice(d->local[i]->dev));
    for (int dt = 0; dt < ncclNumTypes; dt++)
      for (int op = 0; op < ncclNumOps; op++) {
        CUDA_OR_DIE(cudaFree(sd[i].in[dt][op]));
        CUDA_OR_DIE(cudaFree(sd[i].exp[dt][op]));
      }
  }
  hostCaseFree(&h);
}

