/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: descriptor passing between forked processes, credential checks, squatting, cleanup,
 * and setup waits that stop at an abort. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
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

#include "fdpass.h"
#include "harness.h"
#include "sendfds.h"
#include "vmm.h"

static int countFds(void) { return harnessCountEntries("/proc/self/fd"); }

/* 1 if /proc/net/unix lists a socket whose name contains `name`. */
static int socketListed(const char* name) {
  FILE* f = fopen("/proc/net/unix", "r");
  if (f == NULL) return -1;
  char line[512];
  int found = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, name)) found = 1;
  fclose(f);
  return found;
}

/* A rendezvous of rank 0 (the caller sets another rank and the members' pids). */
static void freshRendezvous(struct symmFdRendezvous* rv, int nranks, int timeoutMs) {
  memset(rv, 0, sizeof(*rv));
  if (getrandom(rv->secret, sizeof(rv->secret), 0) != (ssize_t)sizeof(rv->secret)) abort();
  rv->tag = 7;
  rv->nranks = nranks;
  rv->uid = (uint32_t)getuid();
  rv->timeoutMs = timeoutMs;
}

static int makeMemfd(const char* content) {
  int fd = memfd_create("symmcoll-test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, content, strlen(content)) != (ssize_t)strlen(content)) return -1;
  return fd;
}

/* Rank 0 serves a memfd holding `text` to the ranks in `mask`; symmFdServerStart must return
 * `want`. The server holds its own duplicate of the memfd. */
static struct symmFdServer* serveText(const struct symmFdRendezvous* rv, const char* text, unsigned mask,
                                      ncclResult_t want) {
  int memfd = makeMemfd(text);
  CHECK(memfd >= 0);
  struct symmFdServer* server = NULL;
  CHECK_EQ_INT(symmFdServerStart(rv, memfd, mask, &server), want);
  close(memfd);
  return server;
}

/* A stranger's socket under rank 0's abstract name for `rv`, listening: its fd, or -1. */
static int listenAsRank0(const struct symmFdRendezvous* rv) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  int len = symmFdSocketName(rv, 0, addr.sun_path + 1, sizeof(addr.sun_path) - 1);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
  if (s < 0 || bind(s, (struct sockaddr*)&addr, alen) != 0 || listen(s, 4) != 0) return -1;
  return s;
}

/* What the parent tells a forked fetcher once every pid is known. */
struct gateMessage {
  struct symmFdRendezvous rv;
  int rank;
  int forgeFirst; /* first try with a wrong authenticator (must fail), then the right one */
};

/* Child side: wait for the gate message, fetch from rank 0 and compare the memfd's contents.
 * Exit 0 = got the expected content, 1 = fetch failed, 2 = wrong content, 4 = not cloexec,
 * 5 = a forged request succeeded. */
static int childFetch(int gate, const char* expect) {
  struct gateMessage m;
  if (read(gate, &m, sizeof(m)) != (ssize_t)sizeof(m)) return 3;
  m.rv.rank = m.rank;
  int fd = -1;
  if (m.forgeFirst) {
    struct symmFdRendezvous forged = m.rv;
    forged.secret[SYMM_SECRET_BYTES - 1] ^= 0x5a; /* same socket name, wrong authenticator */
    if (symmFdFetch(&forged, 0, &fd) == ncclSuccess) return 5;
  }
  if (symmFdFetch(&m.rv, 0, &fd) != ncclSuccess) return 1;
  char buf[128] = {0};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  int flags = fcntl(fd, F_GETFD);
  close(fd);
  if (n < 0 || strcmp(buf, expect) != 0) return 2;
  if (!(flags & FD_CLOEXEC)) return 4;
  return 0;
}

static int waitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Forks a fetcher (before any server thread exists); returns its pid and its gate. */
static pid_t spawnFetcher(const char* expect, int* gateOut) {
  int gate[2];
  if (pipe(gate) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(gate[1]);
    _exit(childFetch(gate[0], expect));
  }
  close(gate[0]);
  *gateOut = gate[1];
  return pid;
}

static void openGate(int gate, const struct symmFdRendezvous* rv, int rank, int forgeFirst) {
  struct gateMessage m;
  memset(&m, 0, sizeof(m));
  m.rv = *rv;
  m.rank = rank;
  m.forgeFirst = forgeFirst;
  if (write(gate, &m, sizeof(m)) != (ssize_t)sizeof(m)) abort();
  close(gate);
}

static void testPassAndCleanup(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 3, 10000);
  int gate1, gate2;
  pid_t c1 = spawnFetcher("hello from rank 0", &gate1);
  pid_t c2 = spawnFetcher("hello from rank 0", &gate2);
  rv.pids[0] = getpid();
  rv.pids[1] = c1;
  rv.pids[2] = c2;
  struct symmFdServer* server = serveText(&rv, "hello from rank 0", (1u << 1) | (1u << 2), ncclSuccess);
  char name[108];
  symmFdSocketName(&rv, 0, name, sizeof(name));
  CHECK_EQ_INT(socketListed(name), 1);
  openGate(gate1, &rv, 1, 0);
  openGate(gate2, &rv, 2, 0);
  /* The fetchers first: a server has no deadline, so a failed fetch must not leave this test
   * waiting for it (cancelled, it still reports success once everyone was served). */
  CHECK_EQ_INT(waitExit(c1), 0);
  CHECK_EQ_INT(waitExit(c2), 0);
  CHECK_EQ_INT(symmFdServerFinish(server, 1), ncclSuccess);
  CHECK_EQ_INT(socketListed(name), 0); /* abstract: nothing left anywhere */
  CHECK_EQ_INT(countFds(), fdsBefore);
}

/* A process whose pid is not a member's is refused even with the right secret and rank; a
 * member's forged request (wrong authenticator) is refused without using up its turn; the
 * member is then served. */
static void testNonMemberRejected(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 10000);
  int gateIntruder, gateMember;
  pid_t intruder = spawnFetcher("member only", &gateIntruder);
  pid_t member = spawnFetcher("member only", &gateMember);
  rv.pids[0] = getpid();
  rv.pids[1] = member;
  struct symmFdServer* server = serveText(&rv, "member only", 1u << 1, ncclSuccess);
  openGate(gateIntruder, &rv, 1, 0);
  CHECK_EQ_INT(waitExit(intruder), 1); /* no descriptor for a non-member */
  openGate(gateMember, &rv, 1, 1);
  CHECK_EQ_INT(waitExit(member), 0);
  CHECK_EQ_INT(symmFdServerFinish(server, 1), ncclSuccess);
  CHECK_EQ_INT(countFds(), fdsBefore);
}

/* Someone else bound our name first: the server refuses to start (fail closed). A client whose
 * peer's name is held by a stranger refuses to talk to it. */
static void testSquatted(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 1000);
  int ready[2], release[2];
  CHECK(pipe(ready) == 0 && pipe(release) == 0);
  pid_t squatter = fork();
  if (squatter == 0) {
    close(ready[0]);
    close(release[1]);
    int s = listenAsRank0(&rv);
    if (s < 0) _exit(2);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    if (read(release[0], &c, 1) != 1) _exit(4);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  char c;
  CHECK(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  rv.pids[0] = getpid();
  rv.pids[1] = squatter + 100000; /* irrelevant */
  CHECK(serveText(&rv, "never served", 1u << 1, ncclSystemError) == NULL);
  /* Client side: rank 0 is recorded with our pid, but the squatter listens there. */
  struct symmFdRendezvous client = rv;
  client.rank = 1;
  client.pids[1] = getpid();
  client.pids[0] = getpid() + 1; /* the member we expect; the squatter is someone else */
  int fd = -1;
  CHECK_EQ_INT(symmFdFetch(&client, 0, &fd), ncclSystemError);
  CHECK_EQ_INT(fd, -1);
  CHECK(write(release[1], &c, 1) == 1);
  close(release[1]);
  CHECK_EQ_INT(waitExit(squatter), 0);
  CHECK_EQ_INT(countFds(), fdsBefore);
}

/* A server that answers with two descriptors (one unexpected): the fetch fails and closes both. */
static void testUnexpectedDescriptors(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 3000);
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t rogue = fork();
  if (rogue == 0) {
    close(ready[0]);
    int s = listenAsRank0(&rv);
    if (s < 0) _exit(2);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    int conn = accept(s, NULL, NULL);
    char req[64];
    if (conn < 0 || recv(conn, req, sizeof(req), 0) <= 0) _exit(4);
    struct {
      uint32_t magic;
      int32_t status;
    } reply = {0x53594d41u, 0};
    int fds[2] = {makeMemfd("a"), makeMemfd("b")};
    if (sendWithFds(conn, &reply, sizeof(reply), fds, 2) < 0) _exit(5);
    char wait;
    (void)!read(conn, &wait, 1); /* until the client closes */
    _exit(0);
  }
  close(ready[1]);
  char c;
  CHECK(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  rv.rank = 1;
  rv.pids[0] = rogue; /* credentials pass: only the message is wrong */
  rv.pids[1] = getpid();
  int fd = -1;
  CHECK_EQ_INT(symmFdFetch(&rv, 0, &fd), ncclSystemError);
  CHECK_EQ_INT(waitExit(rogue), 0);
  CHECK_EQ_INT(countFds(), fdsBefore);
}

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Nobody serves: the fetch gives up within its time budget. Nobody fetches: the server waits
 * (it has no deadline of its own) until its owner cancels it, which then reports the failure. */
static void testTimeouts(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 300);
  rv.rank = 1;
  rv.pids[0] = getpid();
  rv.pids[1] = getpid();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int fd = -1;
  CHECK_EQ_INT(symmFdFetch(&rv, 0, &fd), ncclSystemError);
  const double waited = secondsSince(&t0);
  CHECK(waited >= 0.25 && waited < 3.0);
  rv.rank = 0;
  struct symmFdServer* server = serveText(&rv, "nobody comes", 1u << 1, ncclSuccess);
  CHECK_EQ_INT(symmFdServerFinish(server, 1), ncclSystemError);
  CHECK_EQ_INT(symmFdFetch(&rv, 0, &fd), ncclInternalError); /* from ourselves: a bug */
  CHECK_EQ_INT(countFds(), fdsBefore);
}

/* A member that comes long after the fetch budget (its rank reached the setup's first agreement
 * late) is still served: the server's wait is not the budget. */
static void testLateFetcher(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 200);
  int gate;
  pid_t member = spawnFetcher("served late", &gate);
  rv.pids[0] = getpid();
  rv.pids[1] = member;
  struct symmFdServer* server = serveText(&rv, "served late", 1u << 1, ncclSuccess);
  struct timespec pause = {0, 600 * 1000 * 1000}; /* three budgets */
  nanosleep(&pause, NULL);
  openGate(gate, &rv, 1, 0);
  CHECK_EQ_INT(waitExit(member), 0);
  CHECK_EQ_INT(symmFdServerFinish(server, 1), ncclSuccess);
  CHECK_EQ_INT(countFds(), fdsBefore);
}


/* Raises *flag after 100 ms (what ncclCommAbort does to the abort flag). */
static void* raiseLater(void* flag) {
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  __atomic_store_n((uint32_t*)flag, 1u, __ATOMIC_RELEASE);
  return NULL;
}

/* An abort during a setup wait ends it long before the budget (here 20 s): a fetch from a server
 * that never appears, a server that nobody fetches from, and a wait for a rank of this process
 * that never publishes. Each returns within 2 s of the abort and fails. */
static void testStop(void) {
  int fdsBefore = countFds();
  struct symmFdRendezvous rv;
  freshRendezvous(&rv, 2, 20000);
  uint32_t stop = 0;
  rv.stop = &stop;
  rv.rank = 1;
  rv.pids[0] = getpid();
  rv.pids[1] = getpid();
  pthread_t raiser;
  struct timespec t0;

  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(pthread_create(&raiser, NULL, raiseLater, &stop) == 0);
  int fd = -1;
  CHECK_EQ_INT(symmFdFetch(&rv, 0, &fd), ncclSystemError);
  CHECK(secondsSince(&t0) < 2.0);
  pthread_join(raiser, NULL);

  stop = 0;
  rv.rank = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct symmFdServer* server = serveText(&rv, "nobody comes", 1u << 1, ncclSuccess);
  CHECK(pthread_create(&raiser, NULL, raiseLater, &stop) == 0);
  CHECK_EQ_INT(symmFdServerFinish(server, 0), ncclSystemError);
  CHECK(secondsSince(&t0) < 2.0);
  pthread_join(raiser, NULL);

  /* A flag raised before the call fails it at once. */
  stop = 1;
  rv.rank = 1;
  CHECK_EQ_INT(symmFdFetch(&rv, 0, &fd), ncclSystemError);

  stop = 0;
  struct symmMapKey key;
  memset(&key, 0, sizeof(key));
  memcpy(key.secret, rv.secret, sizeof(key.secret));
  key.tag = 7;
  key.rank = 0;
  struct symmMapping* mapping = NULL;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(pthread_create(&raiser, NULL, raiseLater, &stop) == 0);
  CHECK_EQ_INT(symmRegistryAcquireLocal(&key, 0, 20000, &stop, &mapping), ncclSystemError);
  CHECK(mapping == NULL);
  CHECK(secondsSince(&t0) < 2.0);
  pthread_join(raiser, NULL);
  /* Without a flag the budget still ends it. */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_EQ_INT(symmRegistryAcquireLocal(&key, 0, 200, NULL, &mapping), ncclSystemError);
  CHECK(secondsSince(&t0) >= 0.15);
  CHECK_EQ_INT(countFds(), fdsBefore);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  testPassAndCleanup();
  testNonMemberRejected();
  testSquatted();
  testUnexpectedDescriptors();
  testTimeouts();
  testLateFetcher();
  testStop();
  return harnessReport("transport_cpu_fdpass");
}
