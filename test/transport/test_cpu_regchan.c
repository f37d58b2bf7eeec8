/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: the ncclCommRegister channel (unnamed datagram pairs): a member's MAP arrives with its
 * fd; non-members, wrong tokens, wrong descriptor counts and oversized messages are dropped with
 * every fd closed; there is no name to squat; a full queue never blocks the sender. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "sendfds.h"
#include "regchan.h"

static int countFds(void) { return harnessCountEntries("/proc/self/fd"); }

static int makeMemfd(const char* content) {
  int fd = memfd_create("symmcoll-regchan-test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, content, strlen(content)) != (ssize_t)strlen(content)) abort();
  return fd;
}

static int waitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Receiving rank 0 of 3: rank 1 is this process, rank 2 is filled in per test. */
static void freshPeers(struct symmRegChanPeers* who) {
  memset(who, 0, sizeof(*who));
  who->rank = 0;
  who->nranks = 3;
  who->pids[0] = getpid();
  who->pids[1] = getpid();
  who->pids[2] = -1;
  who->uid = (uint32_t)getuid();
  if (getrandom(who->auth, sizeof(who->auth), 0) != (ssize_t)sizeof(who->auth)) abort();
}

static void message(const struct symmRegChanPeers* who, uint32_t type, int rank,
                    struct symmRegMsg* m) {
  memset(m, 0, sizeof(*m));
  m->type = type;
  m->rank = rank;
  m->slot = 5;
  m->generation = 77;
  m->allocBytes = 2u << 20;
  memcpy(m->auth, who->auth, sizeof(m->auth));
}

/* One pending message: GOT/DROPPED/EMPTY, the fd closed (content checked when `expect`: MAP, or
 * another type expected to carry one). */
static int receiveOne(int rx, const struct symmRegChanPeers* who, const char* expect) {
  struct symmRegMsg m;
  int fd = -1;
  enum symmRegRecv got = symmRegChanReceive(rx, who, &m, &fd);
  if (got == SYMM_REGRECV_GOT && (m.type == SYMM_REGMSG_MAP || expect != NULL)) {
    CHECK(fd >= 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    CHECK_EQ_INT(m.slot, 5);
    CHECK_EQ_INT(m.generation, 77);
    CHECK_EQ_INT(m.allocBytes, 2u << 20);
    if (expect != NULL) {
      char buf[64] = {0};
      CHECK(pread(fd, buf, sizeof(buf) - 1, 0) >= 0);
      CHECK_EQ_STR(buf, expect);
    }
  } else {
    CHECK_EQ_INT(fd, -1);
  }
  if (fd >= 0) close(fd);
  return got;
}

/* One test's channel: the members, both ends, and how many descriptors were open before. */
struct chan {
  struct symmRegChanPeers who;
  int rx, tx, fdsBefore;
};

static void chanOpen(struct chan* ch) {
  ch->fdsBefore = countFds();
  freshPeers(&ch->who);
  ch->rx = ch->tx = -1;
  CHECK_EQ_INT(symmRegChanCreate(&ch->rx, &ch->tx), ncclSuccess);
}

/* Both ends closed: every descriptor the test opened is gone. */
static void chanClose(struct chan* ch) {
  close(ch->rx);
  close(ch->tx);
  CHECK_EQ_INT(countFds(), ch->fdsBefore);
}

/* In-process members: MAP with its fd, ACK and UNMAP without; the channel has no name. */
static void testMemberInProcess(void) {
  struct chan ch;
  chanOpen(&ch);
  struct sockaddr_un addr;
  socklen_t len = sizeof(addr);
  CHECK(getsockname(ch.rx, (struct sockaddr*)&addr, &len) == 0);
  CHECK_EQ_INT(len, sizeof(sa_family_t)); /* unnamed: nothing anyone could bind first */
  len = sizeof(addr);
  CHECK(getsockname(ch.tx, (struct sockaddr*)&addr, &len) == 0);
  CHECK_EQ_INT(len, sizeof(sa_family_t));
  CHECK(fcntl(ch.rx, F_GETFD) & FD_CLOEXEC);
  CHECK(fcntl(ch.tx, F_GETFD) & FD_CLOEXEC);

  struct symmRegMsg m;
  int memfd = makeMemfd("region of rank 1");
  message(&ch.who, SYMM_REGMSG_MAP, 1, &m);
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  close(memfd);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, "region of rank 1"), SYMM_REGRECV_GOT);
  message(&ch.who, SYMM_REGMSG_ACK, 1, &m);
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_GOT);
  message(&ch.who, SYMM_REGMSG_UNMAP, 1, &m);
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_GOT);
  /* Graph zero copy's two messages, without fds; their payload arrives whole. */
  for (uint32_t type = SYMM_REGMSG_GRAPH_OFFER; type <= SYMM_REGMSG_GRAPH_DONE; type++) {
    message(&ch.who, type, 1, &m);
    m.seq = 0x1122334455667788ull + type;
    m.ok = 1;
    m.offset = 4096;
    m.allocBytes = 1u << 30;
    for (int i = 0; i < SYMM_REGCHAN_IPC_BYTES; i++) m.ipc[i] = (uint8_t)(i * 7 + type);
    const struct symmRegMsg sent = m;
    CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
    struct symmRegMsg got;
    int fd = -2;
    CHECK_EQ_INT(symmRegChanReceive(ch.rx, &ch.who, &got, &fd), SYMM_REGRECV_GOT);
    CHECK_EQ_INT(fd, -1);
    CHECK_EQ_INT((int)got.type, (int)type);
    CHECK(got.seq == sent.seq && got.ok == 1 && got.offset == 4096 && got.allocBytes == 1u << 30);
    CHECK(memcmp(got.ipc, sent.ipc, sizeof(got.ipc)) == 0);
  }
  /* A graph offer of VMM memory carries its fd. */
  message(&ch.who, SYMM_REGMSG_GRAPH_OFFER, 1, &m);
  int offered = makeMemfd("offered allocation");
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, offered), 1);
  close(offered);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, "offered allocation"), SYMM_REGRECV_GOT);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_EMPTY);
  chanClose(&ch);
}

/* Everything a member (our own pid) could get wrong: each dropped, each fd closed. */
static void testMalformedDropped(void) {
  struct chan ch;
  chanOpen(&ch);
  struct symmRegMsg m;
  int memfd = makeMemfd("never accepted");

  message(&ch.who, SYMM_REGMSG_MAP, 1, &m);
  m.auth[3] ^= 0x40; /* wrong token */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  message(&ch.who, SYMM_REGMSG_MAP, 0, &m); /* claims the receiver's own rank */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  message(&ch.who, SYMM_REGMSG_MAP, 2, &m); /* rank 2's pid is not ours */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  message(&ch.who, SYMM_REGMSG_MAP, 7, &m); /* no such rank */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  message(&ch.who, SYMM_REGMSG_MAP, 1, &m); /* MAP without its fd */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  message(&ch.who, SYMM_REGMSG_ACK, 1, &m); /* ACK with an fd */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  message(&ch.who, SYMM_REGMSG_UNMAP, 1, &m);
  m.slot = SYMM_USER_REG_SLOTS; /* out of range */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  message(&ch.who, 99, 1, &m); /* unknown type */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  message(&ch.who, SYMM_REGMSG_GRAPH_DONE + 1, 1, &m); /* the first type past the known ones */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  message(&ch.who, SYMM_REGMSG_GRAPH_DONE, 1, &m); /* a graph answer with an fd */
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, memfd), 1);
  for (int i = 0; i < 10; i++) CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_DROPPED);

  /* Raw datagrams: bad magic, too long (truncated), too short, and a MAP with 12 fds (more
   * than the receiver's control buffer: the kernel closes the excess, we close the rest). */
  message(&ch.who, SYMM_REGMSG_MAP, 1, &m);
  struct symmRegMsg raw = m;
  raw.magic = 0x12345678u;
  CHECK(send(ch.tx, &raw, sizeof(raw), 0) == (ssize_t)sizeof(raw));
  char big[sizeof(m) + 16];
  memset(big, 0, sizeof(big));
  CHECK(send(ch.tx, big, sizeof(big), 0) == (ssize_t)sizeof(big));
  CHECK(send(ch.tx, &raw, sizeof(raw) - 4, 0) == (ssize_t)sizeof(raw) - 4);
  {
    int fds[12];
    for (int i = 0; i < 12; i++) fds[i] = memfd;
    raw.magic = SYMM_REGCHAN_MAGIC;
    CHECK(sendWithFds(ch.tx, &raw, sizeof(raw), fds, 12) == (ssize_t)sizeof(raw));
  }
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_DROPPED);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_EMPTY);
  close(memfd);
  chanClose(&ch);
}

/* Another process holding the sending end (a forked child inherits it): accepted only once its
 * pid is a member's; as a non-member its fd is closed unread. Exit codes: 0 sent, 1 not. */
static void testOtherProcess(void) {
  struct chan ch;
  chanOpen(&ch);
  for (int asMember = 0; asMember < 2; asMember++) {
    int gate[2];
    CHECK(pipe(gate) == 0);
    pid_t child = fork();
    if (child == 0) {
      close(gate[1]);
      char c;
      if (read(gate[0], &c, 1) != 1) _exit(3);
      struct symmRegMsg m;
      message(&ch.who, SYMM_REGMSG_MAP, 2, &m);
      int fd = makeMemfd(asMember ? "from member 2" : "from a stranger");
      _exit(symmRegChanSend(ch.tx, &m, fd) ? 0 : 1);
    }
    close(gate[0]);
    if (asMember) ch.who.pids[2] = child;
    CHECK(write(gate[1], "g", 1) == 1);
    close(gate[1]);
    CHECK_EQ_INT(waitExit(child), 0);
    CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, asMember ? "from member 2" : NULL),
                 asMember ? SYMM_REGRECV_GOT : SYMM_REGRECV_DROPPED);
    CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_EMPTY);
    CHECK_EQ_INT(countFds(), ch.fdsBefore + 2);
  }
  /* Another uid, same pid as a member (only testable as root): dropped. */
  if (geteuid() == 0) {
    pid_t child = fork();
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      struct symmRegMsg m;
      message(&ch.who, SYMM_REGMSG_ACK, 1, &m);
      _exit(symmRegChanSend(ch.tx, &m, -1) ? 0 : 1);
    }
    ch.who.pids[1] = child;
    CHECK_EQ_INT(waitExit(child), 0);
    CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_DROPPED);
  }
  chanClose(&ch);
}

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Nobody reads: sends fill the queue and then report "not sent" at once, never block; what was
 * queued is delivered intact afterwards, fds included. */
static void testQueueFull(void) {
  struct chan ch;
  chanOpen(&ch);
  int small = 4096;
  CHECK(setsockopt(ch.tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
  int memfd = makeMemfd("queued");
  struct symmRegMsg m;
  message(&ch.who, SYMM_REGMSG_MAP, 1, &m);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int sent = 0, refused = 0;
  for (int i = 0; i < 100000 && refused < 3; i++) {
    if (symmRegChanSend(ch.tx, &m, memfd)) sent++;
    else refused++;
  }
  CHECK(secondsSince(&t0) < 2.0);
  CHECK(sent > 0);
  CHECK_EQ_INT(refused, 3);
  close(memfd);
  int got = 0;
  while (receiveOne(ch.rx, &ch.who, "queued") == SYMM_REGRECV_GOT) got++;
  CHECK_EQ_INT(got, sent);
  /* Room again. */
  message(&ch.who, SYMM_REGMSG_ACK, 1, &m);
  CHECK_EQ_INT(symmRegChanSend(ch.tx, &m, -1), 1);
  CHECK_EQ_INT(receiveOne(ch.rx, &ch.who, NULL), SYMM_REGRECV_GOT);
  chanClose(&ch);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  testMemberInProcess();
  testMalformedDropped();
  testOtherProcess();
  testQueueFull();
  return harnessReport("transport_cpu_regchan");
}
