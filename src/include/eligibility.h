/* SPDX-License-Identifier: Apache-2.0 */
/* The per-rank record exchanged at setup and the pure decision made from the table of records. */
#ifndef SYMMCOLL_ELIGIBILITY_H
#define SYMMCOLL_ELIGIBILITY_H

#include <stddef.h>
#include <stdint.h>

#include "symm_peers.h"
#include "transport.h" /* SYMM_SECRET_BYTES */

#define SYMM_RECORD_VERSION 4u
#define SYMM_RECORD_KNOBS 48 /* hashes of SYMM_PARAM_AGREED knobs a record carries */

/* Flags a rank reports about itself. */
enum {
  SYMM_REC_DISABLED = 1u << 0,       /* SYMMCOLL_DISABLE set on this rank */
  SYMM_REC_VMM = 1u << 1,            /* driver loaded; VMM + POSIX fd handles supported */
  SYMM_REC_MULTICAST = 1u << 2,      /* multicast env guards pass AND device reports support */
  SYMM_REC_SETUP_FAILED = 1u << 3,   /* something local failed before the exchange */
  SYMM_REC_NO_KERNELS = 1u << 4,     /* our kernels have no image for this rank's GPU */
};

/* Fixed layout, all-gathered as bytes over the real communicator (identical binaries on a node). */
struct symmPeerRecord {
  uint32_t version;
  int32_t rank;
  uint64_t hostHash; /* hostname + boot id */
  int32_t pid;
  uint32_t uid;
  int32_t cudaDev;
  int32_t ccMajor, ccMinor;
  uint32_t flags;
  uint64_t granularity; /* VMM allocation granularity of this rank's device */
  char busId[16];
  uint8_t secret[SYMM_SECRET_BYTES]; /* meaningful in rank 0's record only; never logged */
  /* Settings that change which kernel runs or its grid, compared field by field with rank 0's:
   * SYMMCOLL_MAX_RANKS (capped at SYMM_MAX_RANKS), and the communicator's CTA bounds and policy
   * as NCCL reads them (ncclConfig_t's maxCTAs, minCTAs, CTAPolicy; NCCL_MAX_CTAS,
   * NCCL_MIN_CTAS, NCCL_CTA_POLICY win; 0: unset), and whether it is blocking (decides how the
   * first call given to our kernels builds staging: inline, or forwarded with a job behind it;
   * NCCL lets it differ between ranks, our staging may not). */
  int32_t maxRanks;
  int32_t maxCTAs, minCTAs;
  int32_t ctaPolicy;
  int32_t blocking;
  /* Knobs that must agree (symmParamAgreed, sorted by name: identical binaries list the same
   * ones) and the tuning file's identity (hash of its contents, 0 when none is set). */
  uint32_t knobCount;
  uint32_t reserved;
  uint64_t knobHashes[SYMM_RECORD_KNOBS];
  uint64_t tuningFileHash;
};

/* Outcome of the decision; identical on every rank given identical inputs. */
struct symmVerdict {
  int eligible;
  int multicast; /* all ranks asked and capable, >= 4 ranks, distinct devices */
  int mismatch;  /* not eligible because a setting differs between ranks (rank 0 warns) */
  char reason[160];
};

/* Stage 1: from the all-gathered records alone (the world-size limit too: rank 0's
 * SYMMCOLL_MAX_RANKS, once every rank is known to have the same). Returns verdict->eligible. */
int symmDecideFromRecords(const struct symmPeerRecord* records, int nranks,
                          struct symmVerdict* verdict);

/* Stage 1, after symmDecideFromRecords: the first knob on which some rank differs from rank 0
 * (its index in the sorted list; knobCount for the tuning file; also knobCount when the lists
 * themselves differ), or -1 when every rank agrees. *rank: the first rank that differs. */
int symmKnobMismatch(const struct symmPeerRecord* records, int nranks, int* rank);

/* Stage 2: every rank's bit mask of peers its device can access (bit r = rank r reachable).
 * Eligible only if every pair is accessible in both directions. */
int symmDecideFromAccess(const uint32_t* accessMasks, int nranks, struct symmVerdict* verdict);

/* Hash of the hostname and /proc/sys/kernel/random/boot_id (0 if neither can be read). */
uint64_t symmHostHash(void);

#endif
