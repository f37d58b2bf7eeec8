/* SPDX-License-Identifier: Apache-2.0 */
/* The route of a collective call (src/include/route.h): every rule that decides whether the real
 * NCCL or our kernels run it, and how, each written once, in the order they apply. */
#include "route.h"

#include <stdint.h>

#include "algos.h"
#include "debug.h"
#include "param.h"

SYMMCOLL_PARAM_FULL(Pdl, "PDL", 1, 0, 1, SYMM_PARAM_AGREED,
                    "launch our kernels with programmatic dependent launch where every rank is "
                    "sm_90+: the next kernel of ours on a stream is scheduled while one runs "
                    "(0 = plain launches)")

/* ---- the rules ------------------------------------------------------------------------------ */

/* The operator of a reduction: -1 invalid (negative), 0 built in (our kernels have it), 1
 * user-defined (ncclRedOpCreatePreMulSum: the real NCCL's, which checks it). All-gather has
 * none. */
static int opKind(const struct symmTask* t) {
  if (t->coll == SYMM_COLL_ALLGATHER) return 0;
  if ((int)t->op < 0) return -1;
  return (int)t->op >= (int)ncclNumOps;
}

/* fp8 reductions need sm_90 or newer on every rank: NCCL refuses them below (arch known), and our
 * images for older GPUs hold no code for them (src/algos/reduce.cuh). `arch` 0: ranks differ. */
static int fp8BelowSm90(const struct symmTask* t, int arch) {
  return t->coll != SYMM_COLL_ALLGATHER && arch < 90 &&
         (t->datatype == ncclFloat8e4m3 || t->datatype == ncclFloat8e5m2);
}

const char* symmArgsProblem(const struct symmTask* task, int arch) {
  if (symmTypeSize(task->datatype) == 0) return "invalid datatype";
  if (opKind(task) < 0) return "invalid reduction operation";
  /* NCCL discards an empty call before this check: count 0 of fp8 is no error anywhere. */
  if (arch > 0 && task->count > 0 && fp8BelowSm90(task, arch))
    return "fp8 reductions need sm_90 or newer on every rank";
  return NULL;
}

ncclResult_t symmArgsCheck(const struct symmTask* task, int nranks, int arch, int* ncclDecides) {
  *ncclDecides = SYMM_OURS_MAY_RUN;
  if (symmArgsProblem(task, arch) != NULL) {
    *ncclDecides = SYMM_NCCL_REFUSES;
    return ncclSuccess;
  }
  /* nranks * count * esize must fit (all-gather's output, reduce-scatter's input). */
  const size_t esize = symmTypeSize(task->datatype);
  const size_t scale = task->coll == SYMM_COLL_ALLREDUCE || nranks < 1 ? 1 : (size_t)nranks;
  size_t bytes;
  if (__builtin_mul_overflow(task->count, esize * scale, &bytes)) {
    WARN("%s: count %zu of %zu-byte elements overflows", symmCollApiName(task->coll),
         task->count, esize);
    return ncclInvalidArgument;
  }
  /* So do empty calls and NULL buffers (NCCL checks pointers only when asked to). */
  if (opKind(task) > 0 || task->count == 0 || task->sendbuff == NULL || task->recvbuff == NULL)
    *ncclDecides = SYMM_NCCL_RUNS;
  return ncclSuccess;
}

/* NCCL_CTA_POLICY_ZERO: the application keeps every SM for itself (nvFuser sets it). */
static int keepsSms(int ctaPolicy) { return (ctaPolicy & NCCL_CTA_POLICY_ZERO) != 0; }

int symmPolicyAllows(int ctaPolicy, enum symmAlgo algo) {
  /* Only the copy engines may move data: no SM kernel of ours (the real NCCL reads the policy
   * itself). */
  return symmAlgoForwards(algo) || !keepsSms(ctaPolicy) || algo == SYMM_ALGO_COPYENGINE;
}

/* ... and they take every all-gather where the peers are on NVLink (or share a GPU), at any size,
 * through staging or into registered outputs; everything else is NCCL's (we have no SM-free path
 * for it), PCIe peers as everywhere without measurements. */
static int copyEngineEverySize(int ctaPolicy, enum symmColl coll, int link) {
  return keepsSms(ctaPolicy) && coll == SYMM_COLL_ALLGATHER &&
         (link == SYMM_LINK_NVLINK || link == SYMM_LINK_SAME_GPU);
}

static unsigned policyExcludes(int ctaPolicy) {
  unsigned excluded = 0;
  for (int a = 0; a < SYMM_NALGOS; a++)
    if (!symmPolicyAllows(ctaPolicy, (enum symmAlgo)a)) excluded |= 1u << a;
  return excluded;
}

void symmGridBounds(const struct symmCommConfig* config, int* maxBlocks, int* minBlocks) {
  int most = config->maxCTAs > 0 ? config->maxCTAs : 0;
  if (config->ctaPolicy & NCCL_CTA_POLICY_EFFICIENCY)
    most = most > 0 && most < SYMM_EFFICIENCY_BLOCKS ? most : SYMM_EFFICIENCY_BLOCKS;
  int least = config->minCTAs > 0 ? config->minCTAs : 0;
  if (most > 0 && least > most) least = most;
  *maxBlocks = most;
  *minBlocks = least;
}

size_t symmRouteLargestStaged(const struct symmTuneInput* comm, int ctaPolicy) {
  struct symmTuneInput in = *comm;
  in.excluded = policyExcludes(ctaPolicy);
  if (copyEngineEverySize(ctaPolicy, SYMM_COLL_ALLGATHER, in.link)) return SIZE_MAX;
  return symmTunerLargestStaged(&in);
}

/* A route may be remembered and repeated for an identical call (src/enqueue.c's repeat cache)
 * only outside groups, with our kernels able to run now: then nothing but the call, the windows,
 * multicast and the knobs, which the cache's key holds, can change it. */
static int repeatable(const struct symmRouteFacts* f) { return f->groupDepth == 0 && f->peersLive; }

/* The tuner's view of the call: what the facts say and the rules leave to it. */
static struct symmTuneInput tuneInput(const struct symmRouteFacts* f, const struct symmTask* t) {
  return (struct symmTuneInput){
      .coll = t->coll, .nranks = f->nranks, .datatype = t->datatype,
      .op = t->coll == SYMM_COLL_ALLGATHER ? ncclSum : t->op,
      .bytes = symmCollBytes(t->coll, t->count, symmTypeSize(t->datatype), f->nranks),
      .registered = f->registered, .multicastReady = f->multicastReady != 0, .arch = f->arch,
      .link = f->link, .stagingBytes = f->stagingBytes, .table = f->table,
      /* arch 0 (mixed) is left here: the fp8 rule refused known older ones in symmArgsCheck. */
      .excluded = policyExcludes(f->config.ctaPolicy) |
                  (fp8BelowSm90(t, f->arch) ? ~SYMM_ALGOS_FORWARDED : 0u)};
}

/* ---- the route ------------------------------------------------------------------------------ */

static struct symmRoute need(unsigned what) {
  return (struct symmRoute){.kind = SYMM_ROUTE_NEED, .need = what};
}

/* Inside a group a call we refuse fails the real NCCL's group too, as NCCL's own refusals do; a
 * launch issued at the group's end (or later) only returns its error. */
static struct symmRoute refuse(const struct symmRouteFacts* f, ncclResult_t result) {
  return (struct symmRoute){.kind = SYMM_ROUTE_REFUSE, .result = result,
                            .failGroup = !f->issuing && f->groupDepth > 0};
}

static struct symmRoute forward(int ordered) {
  return (struct symmRoute){.kind = SYMM_ROUTE_FORWARD, .ordered = ordered};
}

/* Arguments NCCL's own checks refuse: given to it untouched, with a WARN of ours. */
static struct symmRoute refusedByNccl(void) {
  struct symmRoute r = forward(0);
  r.note = SYMM_NOTE_NCCL_REFUSES;
  return r;
}

/* Which algorithm, if any of ours, and its launch: the tuner over what the rules allow. */
static struct symmRoute pick(const struct symmRouteFacts* f, const struct symmTask* t) {
  const int policy = f->config.ctaPolicy;
  const struct symmTuneInput in = tuneInput(f, t);
  enum symmAlgo algo;
  if (keepsSms(policy)) {
    const unsigned avail = symmTunerAvailable(&in);
    const int forced = symmTunerForced(&in, avail);
    if (forced >= 0) {
      algo = (enum symmAlgo)forced;
    } else {
      algo = copyEngineEverySize(policy, t->coll, f->link) && (avail >> SYMM_ALGO_COPYENGINE & 1u)
                 ? SYMM_ALGO_COPYENGINE : SYMM_ALGO_NCCL;
      symmTunerNote(&in, algo, "NCCL_CTA_POLICY_ZERO");
    }
  } else {
    algo = symmTunerPick(&in);
  }
  struct symmRoute r = {.kind = SYMM_ROUTE_LAUNCH, .tuned = 1, .algo = algo, .op = in.op,
                        .emulateMultimem = !in.multicastReady,
                        .zeroCopy = symmTunerZeroCopy(&in, algo),
                        /* ncclCommRegister memory: each rank says in the kernel whether its
                         * input is read in place; the descriptor is read at launch. */
                        .exchangeDescs = symmTunerUserZeroCopy(&in, algo),
                        /* griddepcontrol exists from sm_90 on (src/algos/sync.cuh). */
                        .pdl = symmParamPdl() != 0 && f->arch >= 90};
  symmGridBounds(&f->config, &r.maxBlocks, &r.minBlocks);
  return r;
}

/* Captured all-gather push, reduce-scatter pull and the all-reduce two-shot writing outputs on
 * plain buffers run in place, as on symmetric windows, where the tuner would run them so on a
 * window (large enough) and the buffers can be exchanged (src/transport/graphpeers.c); the
 * two-shot reading inputs in place (small calls) gains nothing worth an exchange. Decided from
 * agreed facts alone, the call's plain-buffer pick (whether its buffers lie in a window is each
 * rank's own fact): so every rank takes part in the same exchanges, capture aside (ranks capture
 * the same calls), and a rank whose buffers are in a window takes part saying no (enqueue.c). A
 * rank that skipped one would leave a peer waiting, or meeting its next call's offer. Such
 * routes are never remembered: whether a call is captured is not part of the repeat cache's
 * key. */
static int graphZeroCopyCandidate(const struct symmRouteFacts* f, const struct symmTask* t,
                                  const struct symmRoute* own) {
  if (!f->graphPeersReady) return 0;
  struct symmRouteFacts plain = *f;
  plain.registered = 0;
  /* `own` is this rank's pick: already the plain buffers' one unless they lie in a window. */
  const struct symmRoute r = f->registered ? pick(&plain, t) : *own;
  if (symmAlgoForwards(r.algo) || r.algo == SYMM_ALGO_COPYENGINE) return 0;
  struct symmTuneInput windowed = tuneInput(&plain, t);
  if (t->coll == SYMM_COLL_ALLREDUCE && !symmTunerAllReduceWritesOutputs(windowed.bytes)) return 0;
  windowed.registered = 1;
  return symmTunerZeroCopy(&windowed, r.algo);
}

/* A launch decided earlier, issued now: it runs unless the communicator went away or failed
 * meanwhile, or its kernels cannot run any more (staging failed, aborted, revoked), when the
 * real NCCL runs it (or refuses it). */
static struct symmRoute issued(const struct symmRouteFacts* f) {
  if (!(f->have & SYMM_NEED_COMM)) return need(SYMM_NEED_COMM);
  if (f->device != ncclSuccess) return refuse(f, f->device);
  if (!(f->have & SYMM_NEED_LOCK)) return need(SYMM_NEED_LOCK);
  if (f->gone) return refuse(f, ncclInvalidUsage);
  if (!(f->have & SYMM_NEED_HEALTH)) return need(SYMM_NEED_HEALTH);
  if (f->health != ncclSuccess) return refuse(f, f->health);
  if (!f->peersLive) return forward(0);
  return (struct symmRoute){.kind = SYMM_ROUTE_LAUNCH, .when = SYMM_WHEN_NOW};
}

/* NCCL's rule for a group, which the real NCCL can check only among the calls it is given: one
 * communicator's calls use streams all uncaptured or all in one capture. Asked once the
 * communicator's own failure is known (NCCL reports that first), never for empty calls (NCCL
 * drops them before it looks at their stream); forwarded calls ask when they are ordered
 * (forwardEnter). 1 with *out set where the call must gather it or is refused. */
static int groupStreamsStop(const struct symmRouteFacts* f, const struct symmTask* t,
                            struct symmRoute* out) {
  if (f->groupDepth == 0 || t->count == 0) return 0;
  if (!(f->have & SYMM_NEED_GROUP_STREAM)) {
    *out = need(SYMM_NEED_GROUP_STREAM);
    return 1;
  }
  if (f->groupStream == ncclSuccess) return 0;
  *out = refuse(f, f->groupStream);
  return 1;
}

struct symmRoute symmRoute(const struct symmRouteFacts* f, const struct symmTask* t) {
  if (f->issuing) return issued(f);
  /* The real NCCL must be there; its own calls back into us, and every call under
   * SYMMCOLL_DISABLE, go to it untouched. */
  if (f->realMissing)
    return (struct symmRoute){.kind = SYMM_ROUTE_REFUSE, .result = ncclSystemError};
  if (f->passthrough) return (struct symmRoute){.kind = SYMM_ROUTE_FORWARD, .untouched = 1};
  /* What setup agreed is read with the communicator, and again after waiting for its job. */
  if (!(f->have & SYMM_NEED_COMM)) return need(SYMM_NEED_COMM | SYMM_NEED_SETTLED);
  /* NULL, destroyed or foreign communicators: the real NCCL's own answer. */
  if (!f->known) return forward(0);
  if (f->device != ncclSuccess) return refuse(f, f->device);
  if (f->gone) return refuse(f, ncclInvalidUsage);
  /* A call before a non-blocking communicator's setup job is done waits for it. */
  if (f->jobRunning) return need(SYMM_NEED_JOB);
  if (!(f->have & SYMM_NEED_SETTLED)) return need(SYMM_NEED_SETTLED);
  int ncclDecides = SYMM_OURS_MAY_RUN;
  const ncclResult_t args = symmArgsCheck(t, f->nranks, f->arch, &ncclDecides);
  if (args != ncclSuccess) return refuse(f, args);
  /* NCCL_CHECK_POINTERS: buffers NCCL's check refuses are its to refuse (NULL ones are NCCL's
   * anyway). */
  if (f->checkPointers && ncclDecides == SYMM_OURS_MAY_RUN) {
    if (!(f->have & SYMM_NEED_POINTERS)) return need(SYMM_NEED_POINTERS);
    if (f->pointersRefused) ncclDecides = SYMM_NCCL_REFUSES;
  }
  /* Ours behind a non-blocking group go first, in call order; while NCCL's group is still being
   * launched, this call came too early. */
  if (f->parked) return need(SYMM_NEED_PARKED);
  if (f->parkedResult == ncclInProgress) {
    struct symmRoute r = refuse(f, ncclInvalidArgument);
    r.note = SYMM_NOTE_PARKED_BUSY;
    return r;
  }
  if (f->parkedResult != ncclSuccess) return refuse(f, f->parkedResult);
  /* Never ours on this communicator: nothing of ours to order it against (a failed one still
   * refuses, as every call on it does). */
  struct symmRoute stop;
  if (!f->hasTransport) {
    if (f->failure != ncclSuccess) return refuse(f, f->failure);
    if (ncclDecides == SYMM_NCCL_REFUSES) return refusedByNccl();
    return groupStreamsStop(f, t, &stop) ? stop : forward(0);
  }
  if (ncclDecides == SYMM_NCCL_RUNS && t->count > 0) return forward(1);

  /* Under the lock: its health first; outside groups, the repeat cache is looked at too (read
   * only; used when the route is repeatable). */
  if (!(f->have & SYMM_NEED_LOCK))
    return need(SYMM_NEED_LOCK | SYMM_NEED_HEALTH | (f->groupDepth == 0 ? SYMM_NEED_REPEAT : 0u));
  if (!(f->have & SYMM_NEED_HEALTH)) return need(SYMM_NEED_HEALTH);
  if (f->health != ncclSuccess) return refuse(f, f->health);
  /* After the communicator's own failure, as NCCL checks its state before the arguments; NCCL
   * never puts the call on the stream, so it needs no order. */
  if (ncclDecides == SYMM_NCCL_REFUSES) return refusedByNccl();
  /* Aborted or revoked (staging was built, our kernels cannot run): inside a group the real NCCL
   * is given the call now, which refuses it itself (a revoked communicator: ncclInvalidUsage)
   * and fails its group, as without us. Outside groups the launch is issued and forwards. */
  if (f->groupDepth > 0 && f->stillOurs && !f->peersLive && !f->needsStaging) return forward(0);
  /* NCCL checks an empty call's arguments and then discards it (nothing reaches the stream), so
   * it needs no order against ours: in a graph that order would be two nodes for nothing. A
   * failed communicator still refuses it, as every call on it. */
  if (t->count == 0) return forward(0);
  if (groupStreamsStop(f, t, &stop)) return stop;
  if (repeatable(f)) {
    if (!(f->have & SYMM_NEED_REPEAT)) return need(SYMM_NEED_REPEAT);
    if (f->repeat != NULL) {
      struct symmRoute r = *f->repeat;
      r.remember = r.tuned = 0;
      r.repeated = 1;
      return r;
    }
  }
  /* Teardown may have detached the transport since: then nothing of ours is chosen. */
  struct symmRoute r = {.kind = SYMM_ROUTE_LAUNCH, .algo = SYMM_ALGO_NCCL};
  if (f->stillOurs) {
    if (!(f->have & SYMM_NEED_WINDOW)) return need(SYMM_NEED_WINDOW);
    r = pick(f, t);
  }
  /* Before this rank's own pick may forward: the exchange is every rank's (above). */
  const int graphCandidate = f->stillOurs && !f->needsStaging && graphZeroCopyCandidate(f, t, &r);
  if (graphCandidate) {
    if (!(f->have & SYMM_NEED_CAPTURE)) return need(SYMM_NEED_CAPTURE);
    if (f->captured) {
      if (!(f->have & SYMM_NEED_GRAPH_PEERS)) return need(SYMM_NEED_GRAPH_PEERS);
      /* The exchange waited without the lock: what the lock guards is read again. */
      if (f->gone) return refuse(f, ncclInvalidUsage);
      if (f->health != ncclSuccess) return refuse(f, f->health);
      if (!f->stillOurs) return forward(1);
      if (f->graphPeers) {
        /* Every rank offered plain buffers (r is their pick). The peers' buffers are mapped as
         * a window's would be: the windows' table decides (above 512 MiB on the pair it gives
         * the all-gather to the copy engine). */
        struct symmRouteFacts windowed = *f;
        windowed.registered = 1;
        const struct symmRoute w = pick(&windowed, t);
        if (w.zeroCopy) r = w;
        r.zeroCopy = 1;
      }
    }
  }
  if (symmAlgoForwards(r.algo)) {
    /* Remembered too: an identical call forwards again without the tuner. `ncclplain` gives the
     * real NCCL windows' aliases, and is ordered as any forwarded call. */
    struct symmRoute fwd = forward(1);
    fwd.tuned = r.tuned;
    fwd.algo = r.algo;
    fwd.remember = repeatable(f) && !graphCandidate;
    return fwd;
  }
  if (!f->needsStaging) {
    r.when = f->groupDepth > 0 ? SYMM_WHEN_GROUP_END
             : f->peersLive    ? SYMM_WHEN_NOW
                               : SYMM_WHEN_ISSUE;
    r.remember = r.when == SYMM_WHEN_NOW && !graphCandidate;
    return r;
  }
  /* The first call given to our kernels builds staging, on every rank alike (the decision uses
   * only agreed inputs). Not inside a capture: this call forwards, and the next one outside a
   * capture builds it (ranks capture the same calls). */
  if (!(f->have & SYMM_NEED_CAPTURE)) return need(SYMM_NEED_CAPTURE);
  if (f->captured) {
    struct symmRoute fwd = forward(1);
    fwd.tuned = 1;
    fwd.algo = r.algo;
    fwd.note = SYMM_NOTE_CAPTURED_FIRST;
    return fwd;
  }
  /* Never block a non-blocking caller on its peers: this call forwards (on every rank, as they
   * all reach it alike), the staging job follows it (at the outermost group end inside a group),
   * and ncclCommGetAsyncError says ncclInProgress until it is done. */
  r.kind = f->config.blocking ? SYMM_ROUTE_STAGE_LAUNCH : SYMM_ROUTE_FORWARD_STAGE;
  r.when = f->groupDepth > 0 ? SYMM_WHEN_GROUP_END : SYMM_WHEN_NOW;
  return r;
}

/* The larger buffer is looked up first: a smaller one inside its range (in-place calls: the
 * all-gather's input is a slice of its output, the reduce-scatter's output a slice of its
 * input, the all-reduce's are one) moves with it or not at all, so that NCCL still sees the call
 * in place. Any other smaller buffer is looked up on its own. */
int symmPlainBuffers(const struct symmTask* task, int nranks, symmAliasLookup lookup,
                     const void* ctx, struct symmTask* out) {
  *out = *task;
  /* symmArgsCheck made sure that nranks * count * esize does not overflow. */
  const size_t part = task->count * symmTypeSize(task->datatype);
  const size_t whole = part * (size_t)(nranks > 0 ? nranks : 1);
  const size_t sendBytes = task->coll == SYMM_COLL_REDUCESCATTER ? whole : part;
  const size_t recvBytes = task->coll == SYMM_COLL_ALLGATHER ? whole : part;
  const int sendIsLarger = sendBytes > recvBytes;
  const uintptr_t large = (uintptr_t)(sendIsLarger ? task->sendbuff : task->recvbuff);
  const uintptr_t small = (uintptr_t)(sendIsLarger ? task->recvbuff : task->sendbuff);
  const size_t largeBytes = sendIsLarger ? sendBytes : recvBytes;
  const size_t smallBytes = sendIsLarger ? recvBytes : sendBytes;
  void* largeAlias = NULL;
  void* smallAlias = NULL;
  int moved = 0;
  if (large != 0 && lookup(ctx, (const void*)large, largeBytes, &largeAlias)) moved++;
  const int inside =
      small >= large && smallBytes <= largeBytes && small - large <= largeBytes - smallBytes;
  if (inside) {
    if (moved) {
      smallAlias = (char*)largeAlias + (small - large);
      moved++;
    }
  } else if (small != 0 && lookup(ctx, (const void*)small, smallBytes, &smallAlias)) {
    moved++;
  }
  if (largeAlias != NULL) {
    if (sendIsLarger) out->sendbuff = largeAlias;
    else out->recvbuff = largeAlias;
  }
  if (smallAlias != NULL) {
    if (sendIsLarger) out->recvbuff = smallAlias;
    else out->sendbuff = smallAlias;
  }
  return moved;
}
