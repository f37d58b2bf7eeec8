/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: the graph zero-copy mailbox (graphpeers.c) keeps nothing of finished exchanges. A
 * rank that says no (plain buffers: every rank does, at every captured call) never collects
 * its peers' letters; each exchange drops those of the exchanges before it, descriptors closed,
 * and keeps those of its own and later ones. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "internal.h"
#include "regchan.h"

static int countFds(void) { return harnessCountEntries("/proc/self/fd"); }

static int neverFailed(struct symmComm* comm) {
  (void)comm;
  return 0;
}

/* A letter from rank 1 for exchange `seq`, carrying a fresh memfd (the mailbox takes it). */
static void post(struct symmTransport* t, uint64_t seq) {
  struct symmRegMsg m;
  memset(&m, 0, sizeof(m));
  m.type = SYMM_REGMSG_GRAPH_OFFER;
  m.seq = seq;
  m.rank = 1;
  m.ok = 1;
  const int fd = memfd_create("symmcoll-graphmail-test", MFD_CLOEXEC);
  CHECK(fd >= 0);
  t->graphMail(t, &m, fd);
}

/* One exchange of this rank (rank 0 of 2) that says no. The communicator is marked gone, so
 * the send to the peer (no channel here) gives up at once, as after a lost peer. */
static void sayNo(struct symmComm* comm, struct symmTransport* t) {
  void* peerPtrs[SYMM_MAX_RANKS];
  CHECK_EQ_INT(symmTransportGraphPeers(comm, t, NULL, 0, 0, NULL, neverFailed, peerPtrs), 0);
}

int main(void) {
  static uint32_t hostWords[SYMM_HOST_SLOT_BYTES / sizeof(uint32_t)];
  struct symmComm* comm = calloc(1, sizeof(*comm));
  struct symmTransport* t = calloc(1, sizeof(*t));
  CHECK(comm != NULL && t != NULL);
  if (comm == NULL || t == NULL) return harnessReport("transport_cpu_graphmail");
  comm->gone = 1;
  t->flags.host = hostWords;
  t->peers.nranks = 2;
  t->peers.rank = 0;
  const int fdsBefore = countFds();
  CHECK_EQ_INT(symmGraphPeersCreate(t), ncclSuccess);

  sayNo(comm, t); /* exchange 0 */
  enum { LETTERS = 200 };
  for (int i = 0; i < LETTERS; i++) post(t, 0); /* the peer's offers of exchange 0, late */
  post(t, 1);                                  /* and of exchanges 1 and 5, early */
  post(t, 5);
  CHECK_EQ_INT(countFds(), fdsBefore + LETTERS + 2);
  sayNo(comm, t); /* exchange 1: exchange 0's letters go */
  CHECK_EQ_INT(countFds(), fdsBefore + 2);
  sayNo(comm, t); /* exchange 2: exchange 1's letter goes, exchange 5's stays */
  CHECK_EQ_INT(countFds(), fdsBefore + 1);
  symmGraphPeersFree(t);
  CHECK_EQ_INT(countFds(), fdsBefore);
  free(t);
  free(comm);
  return harnessReport("transport_cpu_graphmail");
}
