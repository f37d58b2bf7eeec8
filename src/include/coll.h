/* SPDX-License-Identifier: Apache-2.0 */
/* The collectives libsymmcoll may run itself, the algorithms it has for them, and their names. */
#ifndef SYMMCOLL_COLL_H
#define SYMMCOLL_COLL_H

#include <stddef.h>

#include "nccl_api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum symmColl {
  SYMM_COLL_ALLREDUCE = 0,
  SYMM_COLL_ALLGATHER = 1,
  SYMM_COLL_REDUCESCATTER = 2,
  SYMM_NCOLLS = 3
};

/* One numbering for every collective; which algorithm exists for which collective is
 * symmAlgoExists (src/include/algos.h). SYMM_ALGO_NCCL means "forward to the real NCCL";
 * SYMM_ALGO_NCCLPLAIN forwards too, with the buffers that lie in a symmetric window given to
 * NCCL through the window's alias (src/transport/window.c), so that NCCL runs its plain path
 * (rings, trees) instead of its symmetric kernels. Neither has kernels of ours. */
enum symmAlgo {
  SYMM_ALGO_NCCL = 0,
  SYMM_ALGO_LAMPORT = 1,    /* barrier-free: data carries its epoch (AR, AG, RS) */
  SYMM_ALGO_ONESHOT = 2,    /* AR: copy in, one barrier, every rank reduces everything */
  SYMM_ALGO_TWOSHOT = 3,    /* AR: reduce-scatter then all-gather phases, in rounds */
  SYMM_ALGO_PUSH = 4,       /* AG: stores into every peer (no reduce-scatter push: pull) */
  SYMM_ALGO_PULL = 5,       /* RS: loads our slice from every peer, reduces in rank order */
  SYMM_ALGO_COPYENGINE = 6, /* AG: peer copies by the copy engines, no SM kernel */
  SYMM_ALGO_MULTIMEM = 7,   /* NVLink SHARP (or its emulation with peer loads/stores) */
  SYMM_ALGO_NCCLPLAIN = 8,  /* the real NCCL on windows' aliases (AR, AG, RS) */
  SYMM_NALGOS = 9
};

/* The choices that forward to the real NCCL (bits 1u << algo). */
#define SYMM_ALGOS_FORWARDED ((1u << SYMM_ALGO_NCCL) | (1u << SYMM_ALGO_NCCLPLAIN))
static inline int symmAlgoForwards(enum symmAlgo algo) {
  return (unsigned)algo < 32 && (SYMM_ALGOS_FORWARDED >> algo & 1u);
}

/* "allreduce", "allgather", "reducescatter". */
const char* symmCollName(enum symmColl coll);
/* "ncclAllReduce", "ncclAllGather", "ncclReduceScatter". */
const char* symmCollApiName(enum symmColl coll);
/* "nccl", "lamport", "oneshot", "twoshot", "push", "pull", "ce", "multimem", "ncclplain". */
const char* symmAlgoName(enum symmAlgo algo);
/* Parses an algorithm name (case-insensitive): the algorithm, -1 for "auto" or empty/NULL,
 * -2 for anything else. */
int symmAlgoParse(const char* name);

/* The message size nccl-tests reports for a call, which the tuner and its tables use:
 * all-reduce count*esize; all-gather and reduce-scatter the whole buffer, nranks*count*esize
 * (count is NCCL's argument: sendcount for all-gather, recvcount for reduce-scatter). */
static inline size_t symmCollBytes(enum symmColl coll, size_t count, size_t esize, int nranks) {
  return coll == SYMM_COLL_ALLREDUCE ? count * esize : (size_t)nranks * count * esize;
}

#ifdef __cplusplus
}
#endif

#endif
