/* SPDX-License-Identifier: Apache-2.0 */
/* Eligibility: a pure function of the all-gathered records, so every rank reaches the same verdict. */
#include "eligibility.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void setReason(struct symmVerdict* v, int mismatch, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void setReason(struct symmVerdict* v, int mismatch, const char* fmt, ...) {
  v->eligible = 0;
  v->multicast = 0;
  v->mismatch = mismatch;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->reason, sizeof(v->reason), fmt, ap);
  va_end(ap);
}

/* A setting that changes which kernel runs or its grid, as every record reports it. */
struct agreedField {
  const char* what; /* names the setting for the warning */
  size_t offset;    /* of an int32_t in struct symmPeerRecord */
};
static const struct agreedField agreedFields[] = {
    {"SYMMCOLL_MAX_RANKS", offsetof(struct symmPeerRecord, maxRanks)},
    {"maxCTAs (ncclConfig_t.maxCTAs, NCCL_MAX_CTAS)", offsetof(struct symmPeerRecord, maxCTAs)},
    {"minCTAs (ncclConfig_t.minCTAs, NCCL_MIN_CTAS)", offsetof(struct symmPeerRecord, minCTAs)},
    {"the CTA policy (ncclConfig_t.CTAPolicy, NCCL_CTA_POLICY)",
     offsetof(struct symmPeerRecord, ctaPolicy)},
    {"blocking (ncclConfig_t.blocking, NCCL_COMM_BLOCKING)", offsetof(struct symmPeerRecord, blocking)},
};

static int32_t fieldOf(const struct symmPeerRecord* rec, const struct agreedField* f) {
  int32_t v;
  memcpy(&v, (const char*)rec + f->offset, sizeof(v));
  return v;
}

/* Every rank's settings against rank 0's: 0 (with the reason) at the first that differs.
 * SYMMCOLL_DISABLE on every rank is a choice, not a mismatch. */
static int settingsAgree(const struct symmPeerRecord* records, int nranks,
                         struct symmVerdict* verdict) {
  int disabled = 0;
  for (int r = 0; r < nranks; r++) disabled += (records[r].flags & SYMM_REC_DISABLED) != 0;
  if (disabled == nranks) {
    setReason(verdict, 0, "SYMMCOLL_DISABLE is set on every rank");
    return 0;
  }
  if (disabled > 0) {
    int on = 0, off = 0;
    while (!(records[on].flags & SYMM_REC_DISABLED)) on++;
    while (records[off].flags & SYMM_REC_DISABLED) off++;
    setReason(verdict, 1, "SYMMCOLL_DISABLE is set on rank %d but not on rank %d", on, off);
    return 0;
  }
  for (size_t f = 0; f < sizeof(agreedFields) / sizeof(agreedFields[0]); f++) {
    const int32_t mine = fieldOf(&records[0], &agreedFields[f]);
    for (int r = 1; r < nranks; r++) {
      const int32_t theirs = fieldOf(&records[r], &agreedFields[f]);
      if (theirs != mine) {
        setReason(verdict, 1, "%s differs between ranks: %d on rank 0, %d on rank %d",
                  agreedFields[f].what, (int)mine, (int)theirs, r);
        return 0;
      }
    }
  }
  return 1;
}

int symmDecideFromRecords(const struct symmPeerRecord* records, int nranks,
                          struct symmVerdict* verdict) {
  memset(verdict, 0, sizeof(*verdict));
  if (nranks < 2) {
    setReason(verdict, 0, "world size %d is below 2", nranks);
    return 0;
  }
  if (nranks > SYMM_MAX_RANKS) {
    setReason(verdict, 0, "world size %d exceeds the limit %d of this build", nranks,
              SYMM_MAX_RANKS);
    return 0;
  }
  /* Records must be readable before any field of theirs is compared. */
  for (int r = 0; r < nranks; r++) {
    const struct symmPeerRecord* rec = &records[r];
    if (rec->version == 0) {
      setReason(verdict, 0, "rank %d could not stage its setup record (empty record)", r);
      return 0;
    }
    if (rec->version != SYMM_RECORD_VERSION) {
      setReason(verdict, 0, "rank %d runs a different libsymmcoll record version (%d)", r,
                (int)rec->version);
      return 0;
    }
    if (rec->rank != r) {
      setReason(verdict, 0, "record %d claims rank %d", r, rec->rank);
      return 0;
    }
  }
  if (!settingsAgree(records, nranks, verdict)) return 0;
  const int maxRanks = records[0].maxRanks; /* the same on every rank now */
  if (nranks > maxRanks) {
    setReason(verdict, 0, "world size %d exceeds the limit %d (SYMMCOLL_MAX_RANKS)", nranks,
              maxRanks);
    return 0;
  }
  int allMulticast = 1, distinctDevices = 1;
  for (int r = 0; r < nranks; r++) {
    const struct symmPeerRecord* rec = &records[r];
    if (rec->flags & SYMM_REC_SETUP_FAILED) {
      setReason(verdict, 0, "rank %d could not prepare its local state", r);
      return 0;
    }
    if (rec->flags & SYMM_REC_NO_KERNELS) {
      setReason(verdict, 0, "libsymmcoll's kernels do not load on the GPU of rank %d (built for "
                "other architectures: -Dgpu_archs)", r);
      return 0;
    }
    if (rec->hostHash != records[0].hostHash || rec->hostHash == 0) {
      setReason(verdict, 0, "rank %d is not on the same host as rank 0", r);
      return 0;
    }
    if (rec->uid != records[0].uid) {
      setReason(verdict, 0, "rank %d runs as another user than rank 0", r);
      return 0;
    }
    if (rec->pid <= 0) {
      setReason(verdict, 0, "rank %d reported no process id", r);
      return 0;
    }
    if (!(rec->flags & SYMM_REC_VMM)) {
      setReason(verdict, 0, "rank %d has no CUDA VMM with POSIX file descriptor handles", r);
      return 0;
    }
    if (rec->ccMajor < 8) {
      setReason(verdict, 0, "rank %d has compute capability %d.x, below 8.0", r, rec->ccMajor);
      return 0;
    }
    if (!(rec->flags & SYMM_REC_MULTICAST)) allMulticast = 0;
    for (int q = 0; q < r; q++)
      if (strncmp(records[q].busId, rec->busId, sizeof(rec->busId)) == 0) distinctDevices = 0;
  }
  verdict->eligible = 1;
  verdict->multicast = allMulticast && distinctDevices && nranks >= 4;
  snprintf(verdict->reason, sizeof(verdict->reason), "%d ranks on one host", nranks);
  return 1;
}

int symmKnobMismatch(const struct symmPeerRecord* records, int nranks, int* rank) {
  const uint32_t count = records[0].knobCount;
  for (int r = 1; r < nranks; r++) {
    *rank = r;
    if (records[r].knobCount != count || count > SYMM_RECORD_KNOBS) return (int)count;
    for (uint32_t k = 0; k < count; k++)
      if (records[r].knobHashes[k] != records[0].knobHashes[k]) return (int)k;
    if (records[r].tuningFileHash != records[0].tuningFileHash) return (int)count;
  }
  *rank = -1;
  return -1;
}

int symmDecideFromAccess(const uint32_t* accessMasks, int nranks, struct symmVerdict* verdict) {
  for (int r = 0; r < nranks; r++) {
    for (int q = 0; q < nranks; q++) {
      if (q == r) continue;
      if (!(accessMasks[r] & (1u << q))) {
        setReason(verdict, 0, "rank %d cannot access the memory of rank %d (no peer access)", r,
                  q);
        return 0;
      }
    }
  }
  return verdict->eligible;
}

/* FNV-1a, good enough to tell hosts apart; not a security boundary (SO_PEERCRED is). */
static uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t symmHostHash(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  int any = 0;
  char buf[256];
  if (gethostname(buf, sizeof(buf)) == 0) {
    buf[sizeof(buf) - 1] = '\0';
    h = fnv1a(h, buf, strlen(buf));
    any = 1;
  }
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      h = fnv1a(h, buf, (size_t)n);
      any = 1;
    }
    close(fd);
  }
  return any ? (h ? h : 1) : 0;
}
