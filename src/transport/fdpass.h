/* SPDX-License-Identifier: Apache-2.0 */
/* Passing one file descriptor per (communicator, tag, rank) to member processes over abstract
 * unix sockets, with SO_PEERCRED checks both ways. Plain POSIX: testable without a GPU. */
#ifndef SYMMCOLL_TRANSPORT_FDPASS_H
#define SYMMCOLL_TRANSPORT_FDPASS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport.h" /* SYMM_SECRET_BYTES */
#include "nccl_api.h"

/* What both ends agree on, all learned from the setup all-gather. */
struct symmFdRendezvous {
  uint8_t secret[SYMM_SECRET_BYTES]; /* never logged */
  uint32_t tag;                      /* which object: staging memory, a window, multicast */
  int rank, nranks;                  /* this end's rank */
  int32_t pids[SYMM_MAX_RANKS];      /* member pids, as seen by each member */
  uint32_t uid;                      /* everyone's uid (checked equal at eligibility) */
  int timeoutMs;                     /* budget of one fetch, and of one connected member's
                                      * request at the server (which has no deadline itself) */
  /* When non-NULL and nonzero (the communicator's abort flag), every wait ends early and fails:
   * an abort must not sit out the budget behind a peer that will never come. */
  const volatile uint32_t* stop;
};

struct symmFdServer;

/* Binds rank rv->rank's socket now (fails closed with a WARN if the name is already taken) and
 * serves a duplicate of `fd` from a thread, once to each rank in `clientMask`. */
ncclResult_t symmFdServerStart(const struct symmFdRendezvous* rv, int fd, uint32_t clientMask,
                               struct symmFdServer** out);
/* Waits for the server to finish (served everyone, or stopped through rv->stop); with `cancel`
 * it stops at once. The server never gives up by itself: its owner cancels it once an agreement
 * says the fetches are over.
 * Returns ncclSuccess only if every expected client was served. Closes everything. */
ncclResult_t symmFdServerFinish(struct symmFdServer* server, int cancel);

/* Connects to rank `fromRank`'s server, checks its credentials and obtains its descriptor
 * (close-on-exec). Retries until the server appears, rv->timeoutMs passes or rv->stop rises. */
ncclResult_t symmFdFetch(const struct symmFdRendezvous* rv, int fromRank, int* fdOut);

/* 1 if the `n` bytes at `a` and `b` are equal, in a time that does not depend on where they
 * differ (for tokens). */
int symmConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

/* One sendmsg of `bytes` from `buf` on `sock` with `flags`, carrying descriptor `fd`
 * (SCM_RIGHTS) unless fd < 0. Returns what sendmsg returned. */
ssize_t symmSendWithFd(int sock, const void* buf, size_t bytes, int fd, int flags);

/* SipHash-2-4 of `len` bytes under a 16-byte key. */
uint64_t symmSipHash24(const uint8_t key[16], const void* data, size_t len);

/* The abstract socket name of `rank` (without the leading NUL): a keyed hash of (tag, rank)
 * under the first half of the secret, so names do not reveal one another. Returns its length. */
int symmFdSocketName(const struct symmFdRendezvous* rv, int rank, char* out, size_t outBytes);

#endif
