/* SPDX-License-Identifier: Apache-2.0 */
/* Descriptor passing: connected SOCK_SEQPACKET abstract sockets, SCM_RIGHTS, SO_PEERCRED. */
#define _GNU_SOURCE
#include "fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"

#define FDPASS_MAGIC_REQUEST 0x53594d52u /* "SYMR" */
#define FDPASS_MAGIC_REPLY 0x53594d41u   /* "SYMA" */
#define AUTH_BYTES (SYMM_SECRET_BYTES / 2)

struct fdRequest {
  uint32_t magic, tag;
  int32_t rank;
  uint8_t auth[AUTH_BYTES]; /* second half of the secret: proves knowledge beyond the name */
};

struct fdReply {
  uint32_t magic;
  int32_t status;
};

struct symmFdServer {
  struct symmFdRendezvous rv;
  int listenFd, offerFd, stopFd;
  uint32_t pending; /* ranks still to serve */
  ncclResult_t result;
  pthread_t thread;
};

static int64_t nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits are cut into slices this long so that they notice rv->stop. */
#define STOP_POLL_MS 20

static int stopped(const struct symmFdRendezvous* rv) {
  return rv->stop != NULL && __atomic_load_n(rv->stop, __ATOMIC_ACQUIRE) != 0;
}

static int remainingMs(int64_t deadline) {
  int64_t left = deadline - nowMs();
  return left < 0 ? 0 : (int)(left > 1000000 ? 1000000 : left);
}

/* poll() on `pfds` until one is ready, the deadline passes (0) or rv->stop rises (-1, errno
 * ECANCELED). */
static int pollUntil(const struct symmFdRendezvous* rv, struct pollfd* pfds, nfds_t n,
                     int64_t deadline) {
  for (;;) {
    if (stopped(rv)) {
      errno = ECANCELED;
      return -1;
    }
    const int left = remainingMs(deadline);
    const int ready = poll(pfds, n, left < STOP_POLL_MS ? left : STOP_POLL_MS);
    if (ready > 0 || (ready < 0 && errno != EINTR)) return ready;
    if (ready == 0 && left <= STOP_POLL_MS) return 0;
  }
}

/* SipHash-2-4 (Aumasson and Bernstein): a keyed hash, so that knowing some names reveals
 * nothing about the others without the key. */
#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                  \
  do {                                                            \
    v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32); \
    v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2;                      \
    v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0;                      \
    v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32); \
  } while (0)

static uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint64_t symmSipHash24(const uint8_t key[16], const void* data, size_t len) {
  const uint8_t* in = data;
  const uint64_t k0 = load64(key), k1 = load64(key + 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  const size_t whole = len & ~(size_t)7;
  for (size_t i = 0; i < whole; i += 8) {
    const uint64_t m = load64(in + i);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t last = (uint64_t)(len & 0xff) << 56;
  for (size_t i = 0; i < (len & 7); i++) last |= (uint64_t)in[whole + i] << (8 * i);
  v3 ^= last;
  SIPROUND;
  SIPROUND;
  v0 ^= last;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

int symmFdSocketName(const struct symmFdRendezvous* rv, int rank, char* out, size_t outBytes) {
  /* 128 bits of SipHash keyed by the first half of the secret over (part, tag, rank): names of
   * other tags and ranks cannot be derived from a name seen in /proc/net/unix. */
  uint8_t msg[12];
  const uint32_t tag = rv->tag, who = (uint32_t)rank;
  memcpy(msg + 4, &tag, 4);
  memcpy(msg + 8, &who, 4);
  uint64_t part[2];
  for (uint32_t i = 0; i < 2; i++) {
    memcpy(msg, &i, 4);
    part[i] = symmSipHash24(rv->secret, msg, sizeof(msg));
  }
  return snprintf(out, outBytes, "symmcoll-%016llx%016llx", (unsigned long long)part[0],
                  (unsigned long long)part[1]);
}

/* Abstract address of `rank`: leading NUL, no file in any directory, gone with the socket. */
static socklen_t makeAddress(const struct symmFdRendezvous* rv, int rank, struct sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  int len = symmFdSocketName(rv, rank, addr->sun_path + 1, sizeof(addr->sun_path) - 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

int symmConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++) diff |= (uint8_t)(a[i] ^ b[i]);
  return diff == 0;
}

ssize_t symmSendWithFd(int sock, const void* buf, size_t bytes, int fd, int flags) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof(control));
  struct iovec iov = {.iov_base = (void*)buf, .iov_len = bytes};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof(control.buf);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &msg, flags);
}

/* Credentials of the process at the other end of a connected socket. */
static int peerCred(int fd, struct ucred* cred) {
  socklen_t len = sizeof(*cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 && len == sizeof(*cred) ? 0 : -1;
}

/* Receives one message; closes every descriptor that came with it (none are expected). */
static ssize_t recvNoFds(int fd, void* buf, size_t bytes) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 8)];
  } control;
  struct iovec iov = {.iov_base = buf, .iov_len = bytes};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof(control.buf)};
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return n;
  int unexpected = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      int fds[8];
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)(count > 8 ? 8 : count));
      for (int i = 0; i < count && i < 8; i++) close(fds[i]);
      unexpected = 1;
    }
  }
  if (unexpected || (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
    errno = EPROTO;
    return -1;
  }
  return n;
}

/* Handles one accepted connection: returns the rank served, or -1 (connection rejected). */
static int serveOne(struct symmFdServer* s, int conn, int64_t deadline) {
  struct ucred cred;
  if (peerCred(conn, &cred) != 0) {
    WARN("symmetric memory: cannot read the credentials of a connecting process: %s",
         strerror(errno));
    return -1;
  }
  if (cred.uid != s->rv.uid) {
    WARN("symmetric memory: rejected a connection from uid %u (pid %d): not our uid",
         (unsigned)cred.uid, (int)cred.pid);
    return -1;
  }
  int memberRank = -1;
  for (int r = 0; r < s->rv.nranks; r++)
    if ((s->pending & (1u << r)) && s->rv.pids[r] == cred.pid) memberRank = r;
  if (memberRank < 0) {
    WARN("symmetric memory: rejected a connection from pid %d: not a member awaiting a handle",
         (int)cred.pid);
    return -1;
  }
  struct pollfd pfd = {.fd = conn, .events = POLLIN};
  if (pollUntil(&s->rv, &pfd, 1, deadline) <= 0) {
    if (!stopped(&s->rv))
      WARN("symmetric memory: member pid %d connected but sent no request in time", (int)cred.pid);
    return -1;
  }
  struct fdRequest req;
  ssize_t n = recvNoFds(conn, &req, sizeof(req));
  if (n != (ssize_t)sizeof(req) || req.magic != FDPASS_MAGIC_REQUEST || req.tag != s->rv.tag ||
      req.rank < 0 || req.rank >= s->rv.nranks || !(s->pending & (1u << req.rank)) ||
      s->rv.pids[req.rank] != cred.pid ||
      !symmConstantTimeEqual(req.auth, s->rv.secret + AUTH_BYTES, AUTH_BYTES)) {
    WARN("symmetric memory: rejected a malformed or unauthenticated request from pid %d",
         (int)cred.pid);
    return -1;
  }
  struct fdReply reply = {.magic = FDPASS_MAGIC_REPLY, .status = 0};
  if (symmSendWithFd(conn, &reply, sizeof(reply), s->offerFd, MSG_NOSIGNAL) !=
      (ssize_t)sizeof(reply)) {
    WARN("symmetric memory: sending a handle to rank %d failed: %s", req.rank, strerror(errno));
    return -1;
  }
  return req.rank;
}

/* Serves until every member fetched, the stop flag rises or the owner cancels: no deadline of
 * its own. A server starts before the agreement that brings its peers (who may arrive much
 * later, a slow rank's first call) and its owner always cancels it after the agreement that ends
 * the fetches, so a clock here could only expire under a peer that was still coming. Only one
 * connected member's request has a deadline (from its connection on). */
static void* serverMain(void* arg) {
  struct symmFdServer* s = arg;
  while (s->pending != 0) {
    struct pollfd pfds[2] = {{.fd = s->listenFd, .events = POLLIN}, {.fd = s->stopFd, .events = POLLIN}};
    int ready = pollUntil(&s->rv, pfds, 2, INT64_MAX);
    if (ready < 0 && stopped(&s->rv)) break; /* aborted */
    if (ready <= 0) {
      WARN("symmetric memory: rank %d's handle server stopped waiting: %s", s->rv.rank,
           strerror(errno));
      break;
    }
    if (pfds[1].revents) break; /* cancelled: the setup failed elsewhere */
    int conn = accept4(s->listenFd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) {
      /* Out of descriptors (EMFILE, ENFILE, ENOBUFS) leaves the connection queued and poll
       * ready again at once: pause instead of spinning; the member retries until its deadline. */
      if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
      }
      continue;
    }
    int served = serveOne(s, conn, nowMs() + s->rv.timeoutMs);
    close(conn);
    if (served >= 0) s->pending &= ~(1u << served);
  }
  s->result = s->pending == 0 ? ncclSuccess : ncclSystemError;
  return NULL;
}

ncclResult_t symmFdServerStart(const struct symmFdRendezvous* rv, int fd, uint32_t clientMask,
                               struct symmFdServer** out) {
  ncclResult_t res = ncclSystemError;
  struct symmFdServer* s = calloc(1, sizeof(*s));
  if (s == NULL) {
    WARN("symmetric memory: out of host memory for a handle server");
    return ncclSystemError;
  }
  s->rv = *rv;
  s->pending = clientMask;
  s->listenFd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s->listenFd < 0) {
    WARN("symmetric memory: socket() failed: %s", strerror(errno));
    goto free_server;
  }
  struct sockaddr_un addr;
  socklen_t addrLen = makeAddress(rv, rv->rank, &addr);
  if (bind(s->listenFd, (struct sockaddr*)&addr, addrLen) != 0) {
    if (errno == EADDRINUSE)
      WARN("symmetric memory: the socket name of rank %d is already taken by another process "
           "(squatted?); refusing to share memory on this communicator", rv->rank);
    else
      WARN("symmetric memory: bind() failed: %s", strerror(errno));
    goto close_listen;
  }
  if (listen(s->listenFd, 2 * SYMM_MAX_RANKS) != 0) {
    WARN("symmetric memory: listen() failed: %s", strerror(errno));
    goto close_listen;
  }
  s->offerFd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (s->offerFd < 0) {
    WARN("symmetric memory: dup of a handle descriptor failed: %s", strerror(errno));
    goto close_listen;
  }
  s->stopFd = eventfd(0, EFD_CLOEXEC);
  if (s->stopFd < 0) {
    WARN("symmetric memory: eventfd() failed: %s", strerror(errno));
    goto close_offer;
  }
  int err = pthread_create(&s->thread, NULL, serverMain, s);
  if (err != 0) {
    WARN("symmetric memory: cannot start the handle server thread: %s", strerror(err));
    goto close_stop;
  }
  *out = s;
  return ncclSuccess;
close_stop:
  close(s->stopFd);
close_offer:
  close(s->offerFd);
close_listen:
  close(s->listenFd);
free_server:
  free(s);
  return res;
}

ncclResult_t symmFdServerFinish(struct symmFdServer* s, int cancel) {
  if (s == NULL) return ncclSuccess;
  if (cancel) {
    uint64_t one = 1;
    if (write(s->stopFd, &one, sizeof(one)) != (ssize_t)sizeof(one))
      WARN("symmetric memory: cannot stop the handle server: %s", strerror(errno));
  }
  pthread_join(s->thread, NULL);
  ncclResult_t res = s->result;
  close(s->stopFd);
  close(s->offerFd);
  close(s->listenFd);
  free(s);
  return res;
}

/* Connects (retrying while the peer's server is not up yet) and checks who listens there. */
static int connectToRank(const struct symmFdRendezvous* rv, int fromRank, int64_t deadline) {
  struct sockaddr_un addr;
  socklen_t addrLen = makeAddress(rv, fromRank, &addr);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      WARN("symmetric memory: socket() failed: %s", strerror(errno));
      return -1;
    }
    if (connect(fd, (struct sockaddr*)&addr, addrLen) == 0) return fd;
    int err = errno;
    close(fd);
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN) {
      WARN("symmetric memory: connecting to rank %d failed: %s", fromRank, strerror(err));
      return -1;
    }
    if (stopped(rv)) return -1; /* aborted */
    if (remainingMs(deadline) == 0) {
      WARN("symmetric memory: rank %d's handle server did not appear in time", fromRank);
      return -1;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

ncclResult_t symmFdFetch(const struct symmFdRendezvous* rv, int fromRank, int* fdOut) {
  if (fromRank < 0 || fromRank >= rv->nranks || fromRank == rv->rank) return ncclInternalError;
  int64_t deadline = nowMs() + rv->timeoutMs;
  int conn = connectToRank(rv, fromRank, deadline);
  if (conn < 0) return ncclSystemError;
  ncclResult_t res = ncclSystemError;
  struct ucred cred = {.pid = -1, .uid = (uid_t)-1, .gid = (gid_t)-1};
  if (peerCred(conn, &cred) != 0 || cred.uid != rv->uid || cred.pid != rv->pids[fromRank]) {
    WARN("symmetric memory: the socket of rank %d is held by another process (pid %d uid %u); "
         "refusing it", fromRank, (int)cred.pid, (unsigned)cred.uid);
    goto close_conn;
  }
  struct fdRequest req = {.magic = FDPASS_MAGIC_REQUEST, .tag = rv->tag, .rank = rv->rank};
  memcpy(req.auth, rv->secret + AUTH_BYTES, AUTH_BYTES);
  ssize_t sent = send(conn, &req, sizeof(req), MSG_NOSIGNAL);
  memset(&req, 0, sizeof(req));
  if (sent != (ssize_t)sizeof(req)) {
    WARN("symmetric memory: sending a request to rank %d failed: %s", fromRank, strerror(errno));
    goto close_conn;
  }
  struct pollfd pfd = {.fd = conn, .events = POLLIN};
  if (pollUntil(rv, &pfd, 1, deadline) <= 0) {
    if (!stopped(rv)) WARN("symmetric memory: rank %d did not answer in time", fromRank);
    goto close_conn;
  }
  struct fdReply reply;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 8)];
  } control;
  struct iovec iov = {.iov_base = &reply, .iov_len = sizeof(reply)};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof(control.buf)};
  ssize_t n = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  int received[8], count = 0;
  if (n >= 0) {
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k && count < 8; i++)
        memcpy(&received[count++], CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
    }
  }
  if (n != (ssize_t)sizeof(reply) || (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || count != 1 ||
      reply.magic != FDPASS_MAGIC_REPLY || reply.status != 0) {
    WARN("symmetric memory: bad answer from rank %d (%s)", fromRank,
         n < 0 ? strerror(errno) : (msg.msg_flags & MSG_CTRUNC) ? "descriptors truncated"
                                                                 : "unexpected message");
    for (int i = 0; i < count; i++) close(received[i]);
    goto close_conn;
  }
  *fdOut = received[0];
  res = ncclSuccess;
close_conn:
  close(conn);
  return res;
}
