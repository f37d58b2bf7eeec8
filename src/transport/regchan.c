/* SPDX-License-Identifier: Apache-2.0 */
/* Registration channel: unnamed SOCK_DGRAM pairs, SCM_RIGHTS, SCM_CREDENTIALS, token check. */
#define _GNU_SOURCE
#include "regchan.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "debug.h"
#include "fdpass.h"

#define REGCHAN_MAX_FDS 8

ncclResult_t symmRegChanCreate(int* rxFd, int* txFd) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != 0) {
    WARN("user registration: socketpair() failed: %s", strerror(errno));
    return ncclSystemError;
  }
  /* The kernel then attaches the sender's pid/uid to every datagram; it cannot be forged
   * without privileges. */
  int one = 1;
  if (setsockopt(pair[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
    WARN("user registration: SO_PASSCRED failed: %s", strerror(errno));
    close(pair[0]);
    close(pair[1]);
    return ncclSystemError;
  }
  *rxFd = pair[0];
  *txFd = pair[1];
  return ncclSuccess;
}

int symmRegChanSend(int txFd, const struct symmRegMsg* msg, int fd) {
  struct symmRegMsg m = *msg;
  m.magic = SYMM_REGCHAN_MAGIC;
  ssize_t n;
  do {
    n = symmSendWithFd(txFd, &m, sizeof(m), fd, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  memset(&m, 0, sizeof(m)); /* the token */
  return n == (ssize_t)sizeof(m);
}

enum symmRegRecv symmRegChanReceive(int rxFd, const struct symmRegChanPeers* who,
                                    struct symmRegMsg* msg, int* fdOut) {
  *fdOut = -1;
  struct symmRegMsg m;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * REGCHAN_MAX_FDS)];
  } control;
  struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
  struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof(control.buf)};
  ssize_t n;
  do {
    n = recvmsg(rxFd, &hdr, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SYMM_REGRECV_EMPTY;
  /* Collect everything first: whatever the verdict, no descriptor may leak. Descriptors beyond
   * the control buffer (MSG_CTRUNC) were already closed by the kernel. */
  int fds[REGCHAN_MAX_FDS], nfds = 0, haveCred = 0;
  struct ucred cred = {0, (uid_t)-1, (gid_t)-1};
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&hdr); c; c = CMSG_NXTHDR(&hdr, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k && nfds < REGCHAN_MAX_FDS; i++)
        memcpy(&fds[nfds++], CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
    } else if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(cred))) {
      memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      haveCred = 1;
    }
  }
  const char* why = NULL;
  if (!haveCred) why = "no credentials";
  else if (cred.uid != who->uid) why = "not our uid";
  else if (hdr.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) why = "truncated";
  else if (n != (ssize_t)sizeof(m) || m.magic != SYMM_REGCHAN_MAGIC) why = "malformed";
  else if (m.rank < 0 || m.rank >= who->nranks || m.rank == who->rank ||
           who->pids[m.rank] != cred.pid)
    why = "not a member (pid/rank)";
  else if (!symmConstantTimeEqual(m.auth, who->auth, sizeof(m.auth))) why = "bad token";
  else if (m.slot >= SYMM_USER_REG_SLOTS) why = "bad slot";
  else if (m.type < SYMM_REGMSG_MAP || m.type > SYMM_REGMSG_GRAPH_DONE ||
           (nfds != (m.type == SYMM_REGMSG_MAP) &&
            !(m.type == SYMM_REGMSG_GRAPH_OFFER && nfds == 1)))
    why = "bad type or descriptor count";
  memset(m.auth, 0, sizeof(m.auth));
  if (why != NULL) {
    for (int i = 0; i < nfds; i++) close(fds[i]);
    INFO(SYMM_TRANSPORT, "user registration: dropped a message from pid %d uid %d: %s",
         haveCred ? (int)cred.pid : -1, haveCred ? (int)cred.uid : -1, why);
    return SYMM_REGRECV_DROPPED;
  }
  *msg = m;
  if (nfds == 1) *fdOut = fds[0];
  return SYMM_REGRECV_GOT;
}
