/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: the eligibility decision on synthetic tables of all-gathered records. */
#include <stdio.h>
#include <string.h>

#include "eligibility.h"
#include "harness.h"

static void makeTable(struct symmPeerRecord* recs, int n) {
  memset(recs, 0, sizeof(*recs) * (size_t)n);
  for (int r = 0; r < n; r++) {
    recs[r].version = SYMM_RECORD_VERSION;
    recs[r].rank = r;
    recs[r].hostHash = 0x1234567890abcdefull;
    recs[r].pid = 1000 + r;
    recs[r].uid = 500;
    recs[r].cudaDev = r;
    recs[r].ccMajor = 9;
    recs[r].ccMinor = 0;
    recs[r].flags = SYMM_REC_VMM | SYMM_REC_MULTICAST;
    recs[r].granularity = 2u << 20;
    snprintf(recs[r].busId, sizeof(recs[r].busId), "0000:%02x:00.0", 0x10 + r);
    recs[r].maxRanks = 8;
    recs[r].ctaPolicy = 0; /* NCCL_CTA_POLICY_DEFAULT; maxCTAs, minCTAs: 0 (unset) */
  }
}

/* Every rank reporting SYMMCOLL_MAX_RANKS = maxRanks. */
static int decide(struct symmPeerRecord* recs, int n, int maxRanks, struct symmVerdict* v) {
  for (int r = 0; r < n && r < SYMM_MAX_RANKS; r++) recs[r].maxRanks = maxRanks;
  return symmDecideFromRecords(recs, n, v);
}

#define CHECK_REASON(v, needle)                                                        \
  do {                                                                                 \
    CHECK(strstr((v).reason, (needle)) != NULL);                                       \
    if (strstr((v).reason, (needle)) == NULL) fprintf(stderr, "  reason: %s\n", (v).reason); \
  } while (0)

int main(void) {
  struct symmPeerRecord recs[SYMM_MAX_RANKS];
  struct symmVerdict v;

  /* Eligible tables at every size 2..8; multicast only from 4 ranks on distinct devices. */
  for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
    makeTable(recs, n);
    CHECK_EQ_INT(decide(recs, n, 8, &v), 1);
    CHECK_EQ_INT(v.multicast, n >= 4);
  }

  /* Several ranks per GPU (test bootstrap): eligible, but never multicast. */
  makeTable(recs, 4);
  strcpy(recs[3].busId, recs[1].busId);
  recs[3].cudaDev = 1;
  CHECK_EQ_INT(decide(recs, 4, 8, &v), 1);
  CHECK_EQ_INT(v.multicast, 0);

  /* One rank without multicast support turns it off for all. */
  makeTable(recs, 4);
  recs[2].flags &= ~(uint32_t)SYMM_REC_MULTICAST;
  CHECK_EQ_INT(decide(recs, 4, 8, &v), 1);
  CHECK_EQ_INT(v.multicast, 0);

  /* Mixed hosts. */
  makeTable(recs, 4);
  recs[2].hostHash ^= 1;
  CHECK_EQ_INT(decide(recs, 4, 8, &v), 0);
  CHECK_REASON(v, "rank 2 is not on the same host");
  CHECK_EQ_INT(v.multicast, 0);

  /* Unknown host identity is never "the same host". */
  makeTable(recs, 2);
  recs[0].hostHash = recs[1].hostHash = 0;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);

  /* Low compute capability. */
  makeTable(recs, 3);
  recs[1].ccMajor = 7;
  CHECK_EQ_INT(decide(recs, 3, 8, &v), 0);
  CHECK_REASON(v, "compute capability 7.x");

  /* 8.0 is enough. */
  makeTable(recs, 3);
  recs[1].ccMajor = 8;
  CHECK_EQ_INT(decide(recs, 3, 8, &v), 1);

  /* Too many ranks for the configured limit (the same on every rank), and for the compiled one. */
  makeTable(recs, 5);
  CHECK_EQ_INT(decide(recs, 5, 4, &v), 0);
  CHECK_REASON(v, "world size 5 exceeds the limit 4 (SYMMCOLL_MAX_RANKS)");
  CHECK_EQ_INT(v.mismatch, 0);
  CHECK_EQ_INT(decide(recs, 9, 16, &v), 0);
  CHECK_REASON(v, "world size 9 exceeds the limit 8");
  CHECK_EQ_INT(decide(recs, 1, 8, &v), 0);
  CHECK_REASON(v, "below 2");

  /* SYMMCOLL_DISABLE on any rank: a mismatch (rank 0 warns), named. */
  makeTable(recs, 4);
  recs[3].flags |= SYMM_REC_DISABLED;
  CHECK_EQ_INT(decide(recs, 4, 8, &v), 0);
  CHECK_REASON(v, "SYMMCOLL_DISABLE is set on rank 3 but not on rank 0");
  CHECK_EQ_INT(v.mismatch, 1);
  /* ... also as a disabled rank sends it: nothing but the settings (no device facts). */
  makeTable(recs, 2);
  memset(&recs[0], 0, sizeof(recs[0]));
  recs[0].version = SYMM_RECORD_VERSION;
  recs[0].maxRanks = 8;
  recs[0].flags = SYMM_REC_DISABLED;
  CHECK_EQ_INT(symmDecideFromRecords(recs, 2, &v), 0);
  CHECK_REASON(v, "SYMMCOLL_DISABLE is set on rank 0 but not on rank 1");
  CHECK_EQ_INT(v.mismatch, 1);
  /* On every rank: a choice, not a mismatch (INFO only). */
  makeTable(recs, 3);
  for (int r = 0; r < 3; r++) recs[r].flags |= SYMM_REC_DISABLED;
  CHECK_EQ_INT(decide(recs, 3, 8, &v), 0);
  CHECK_REASON(v, "SYMMCOLL_DISABLE is set on every rank");
  CHECK_EQ_INT(v.mismatch, 0);

  /* Settings that change which kernel runs or its grid: records that differ only in one of
   * them forward, naming it; the verdict is a mismatch (one WARN, on rank 0). */
  makeTable(recs, 2);
  recs[1].maxCTAs = 8; /* NCCL_MAX_CTAS=8 on rank 1 only */
  CHECK_EQ_INT(symmDecideFromRecords(recs, 2, &v), 0);
  CHECK_REASON(v, "maxCTAs (ncclConfig_t.maxCTAs, NCCL_MAX_CTAS) differs between ranks: 0 on "
               "rank 0, 8 on rank 1");
  CHECK_EQ_INT(v.mismatch, 1);
  makeTable(recs, 4);
  recs[2].minCTAs = 3;
  CHECK_EQ_INT(symmDecideFromRecords(recs, 4, &v), 0);
  CHECK_REASON(v, "minCTAs (ncclConfig_t.minCTAs, NCCL_MIN_CTAS) differs between ranks: 0 on "
               "rank 0, 3 on rank 2");
  CHECK_EQ_INT(v.mismatch, 1);
  makeTable(recs, 3);
  recs[1].ctaPolicy = 2; /* NCCL_CTA_POLICY_ZERO */
  CHECK_EQ_INT(symmDecideFromRecords(recs, 3, &v), 0);
  CHECK_REASON(v, "CTA policy (ncclConfig_t.CTAPolicy, NCCL_CTA_POLICY) differs between ranks: "
               "0 on rank 0, 2 on rank 1");
  CHECK_EQ_INT(v.mismatch, 1);
  makeTable(recs, 2);
  recs[0].blocking = 1; /* NCCL_COMM_BLOCKING=0 on rank 1 only: its first call would forward */
  CHECK_EQ_INT(symmDecideFromRecords(recs, 2, &v), 0);
  CHECK_REASON(v, "blocking (ncclConfig_t.blocking, NCCL_COMM_BLOCKING) differs between ranks: "
               "1 on rank 0, 0 on rank 1");
  CHECK_EQ_INT(v.mismatch, 1);
  makeTable(recs, 3);
  recs[2].maxRanks = 2; /* SYMMCOLL_MAX_RANKS=2 on rank 2: it would stay out alone */
  CHECK_EQ_INT(symmDecideFromRecords(recs, 3, &v), 0);
  CHECK_REASON(v, "SYMMCOLL_MAX_RANKS differs between ranks: 8 on rank 0, 2 on rank 2");
  CHECK_EQ_INT(v.mismatch, 1);
  /* The same values everywhere, set or not: eligible. */
  makeTable(recs, 4);
  for (int r = 0; r < 4; r++) {
    recs[r].maxCTAs = 16;
    recs[r].minCTAs = 2;
    recs[r].ctaPolicy = 1;
    recs[r].maxRanks = 4;
  }
  CHECK_EQ_INT(symmDecideFromRecords(recs, 4, &v), 1);
  CHECK_EQ_INT(v.mismatch, 0);
  /* A mismatch is named even where something else would forward as well. */
  makeTable(recs, 2);
  recs[1].maxCTAs = 4;
  recs[1].ccMajor = 7;
  CHECK_EQ_INT(symmDecideFromRecords(recs, 2, &v), 0);
  CHECK_REASON(v, "NCCL_MAX_CTAS");
  CHECK_EQ_INT(v.mismatch, 1);
  /* Nothing else is a mismatch. */
  makeTable(recs, 2);
  recs[1].ccMajor = 7;
  CHECK_EQ_INT(symmDecideFromRecords(recs, 2, &v), 0);
  CHECK_EQ_INT(v.mismatch, 0);

  /* No VMM / POSIX fd handles. */
  makeTable(recs, 2);
  recs[1].flags &= ~(uint32_t)SYMM_REC_VMM;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  CHECK_REASON(v, "no CUDA VMM");

  /* Another user. */
  makeTable(recs, 2);
  recs[1].uid = 0;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  CHECK_REASON(v, "another user");

  /* Local failure, bad version, shuffled ranks. */
  makeTable(recs, 2);
  recs[0].flags |= SYMM_REC_SETUP_FAILED;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  CHECK_REASON(v, "rank 0 could not prepare");
  makeTable(recs, 2);
  recs[1].flags |= SYMM_REC_NO_KERNELS;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  CHECK_REASON(v, "kernels do not load on the GPU of rank 1");
  makeTable(recs, 2);
  recs[1].version = 99;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  /* What a rank that could not stage its setup exchange sends (symmExchange): all zeros. */
  makeTable(recs, 2);
  memset(&recs[1], 0, sizeof(recs[1]));
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);
  CHECK_REASON(v, "rank 1 could not stage its setup record");
  for (int r = 0; r < 4; r++) {
    uint32_t masks[SYMM_MAX_RANKS] = {0xf, 0xf, 0xf, 0xf};
    masks[r] = 0; /* ... and its empty peer-access mask */
    CHECK_EQ_INT(symmDecideFromAccess(masks, 4, &v), 0);
  }
  makeTable(recs, 2);
  recs[1].rank = 0;
  CHECK_EQ_INT(decide(recs, 2, 8, &v), 0);

  /* Peer access, stage 2: every pair both ways. */
  uint32_t masks[SYMM_MAX_RANKS];
  makeTable(recs, 4);
  CHECK_EQ_INT(decide(recs, 4, 8, &v), 1);
  for (int r = 0; r < 4; r++) masks[r] = 0xf;
  CHECK_EQ_INT(symmDecideFromAccess(masks, 4, &v), 1);
  masks[2] &= ~(1u << 0); /* rank 2 cannot reach rank 0 */
  CHECK_EQ_INT(symmDecideFromAccess(masks, 4, &v), 0);
  CHECK_REASON(v, "rank 2 cannot access the memory of rank 0");
  CHECK_EQ_INT(v.multicast, 0);
  /* A rank's own bit does not matter; a stage-1 ineligible verdict stays ineligible. */
  makeTable(recs, 2);
  recs[1].ccMajor = 6;
  decide(recs, 2, 8, &v);
  masks[0] = masks[1] = 0x3;
  CHECK_EQ_INT(symmDecideFromAccess(masks, 2, &v), 0);

  /* Identical inputs give identical verdicts (what every rank relies on). */
  struct symmVerdict v2;
  makeTable(recs, 6);
  recs[4].ccMajor = 7;
  decide(recs, 6, 8, &v);
  decide(recs, 6, 8, &v2);
  CHECK(memcmp(&v, &v2, sizeof(v)) == 0);

  /* The host identity is readable here and stable. */
  uint64_t h = symmHostHash();
  CHECK(h != 0);
  CHECK(h == symmHostHash());

  return harnessReport("transport_cpu_eligibility");
}
