/* SPDX-License-Identifier: Apache-2.0 */
/* Which all-reduce algorithm runs: what can run here (available), and which is fastest (pick). */
#ifndef SYMMCOLL_TUNER_H
#define SYMMCOLL_TUNER_H

#include <stddef.h>

#include "algos.h"

/* Everything the decision depends on. Every field must be identical on all ranks of the
 * communicator (sizes, types, the comm-wide multicast decision, params users set uniformly). */
struct symmTuneInput {
  int nranks;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  size_t bytes;           /* count * element size */
  int registered;         /* input lies in a registered symmetric window on every rank */
  int multicastReady;     /* symmTransportMulticastReady(comm) */
  int arch;               /* comm-wide compute capability * 10 (e.g. 90), 0 if unknown */
  size_t stagingBytes;    /* symmPeers.bufferBytes (same on all ranks) */
};

/* Bit (1u << algo) for every algorithm that can run for `in` (SYMM_AR_NCCL always). Reads
 * SYMMCOLL_MULTIMEM_EMULATE (multimem allowed without multicast). */
unsigned symmTunerAvailable(const struct symmTuneInput* in);

/* The algorithm to run: SYMMCOLL_ALLREDUCE_ALGO if set and available, else the table (with the
 * byte-threshold knobs applied). Logs the choice at INFO once per distinct case. */
enum symmArAlgo symmTunerPick(const struct symmTuneInput* in);

/* 1 when `algo` should read a registered input in place (zero-copy) rather than through the
 * staging buffer: only the two-shot can, and only up to SYMMCOLL_ZERO_COPY_MAX_BYTES (measured:
 * above 4 MiB its pull reduce-scatter is slower than the push path). Same on all ranks. */
int symmTunerZeroCopy(const struct symmTuneInput* in, enum symmArAlgo algo);

/* 1 when the ranks should tell each other, inside the kernel, which inputs lie in memory they
 * registered with ncclCommRegister (rank-local, so no rank knows the others' in advance): where
 * symmTunerZeroCopy would read a window in place, for inputs outside windows. Same on all ranks. */
int symmTunerUserZeroCopy(const struct symmTuneInput* in, enum symmArAlgo algo);

/* The table's thresholds for `in` after knobs (tests, logging). */
struct symmTuneThresholds {
  size_t lamportMax;   /* Lamport one-shot for bytes <= this (checked first) */
  size_t oneshotMax;   /* one-shot for bytes <= this */
  size_t multimemMin;  /* multimem for multimemMin <= bytes <= multimemMax */
  size_t multimemMax;
  size_t twoshotMax;   /* two-shot for bytes <= this (after the above); above: NCCL */
};
void symmTunerThresholds(const struct symmTuneInput* in, struct symmTuneThresholds* out);

const char* symmArAlgoName(enum symmArAlgo algo);
/* Parses oneshot|twoshot|multimem|lamport|nccl|auto; returns -1 for auto/unset, -2 for unknown. */
int symmArAlgoParse(const char* name);

#endif
