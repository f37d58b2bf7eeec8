/* SPDX-License-Identifier: Apache-2.0 */
/* Names of the collectives and algorithms (logs, knobs, tuning files). */
#include "coll.h"

#include "param.h"

static const char* const collNames[SYMM_NCOLLS] = {"allreduce", "allgather", "reducescatter"};
static const char* const collApiNames[SYMM_NCOLLS] = {"ncclAllReduce", "ncclAllGather",
                                                      "ncclReduceScatter"};
static const char* const algoNames[SYMM_NALGOS] = {
    "nccl", "lamport", "oneshot", "twoshot", "push", "pull", "ce", "multimem", "ncclplain"};

const char* symmCollName(enum symmColl coll) {
  return (unsigned)coll < SYMM_NCOLLS ? collNames[coll] : "unknown";
}

const char* symmCollApiName(enum symmColl coll) {
  return (unsigned)coll < SYMM_NCOLLS ? collApiNames[coll] : "unknown";
}

const char* symmAlgoName(enum symmAlgo algo) {
  return (unsigned)algo < SYMM_NALGOS ? algoNames[algo] : "unknown";
}

int symmAlgoParse(const char* name) {
  if (name == NULL || name[0] == '\0' || symmAsciiCaseEqual(name, "auto")) return -1;
  for (int a = 0; a < SYMM_NALGOS; a++)
    if (symmAsciiCaseEqual(name, algoNames[a])) return a;
  return -2;
}
