/* SPDX-License-Identifier: Apache-2.0 */
/* For the CPU tests of fd passing: one message with descriptors attached (SCM_RIGHTS), as a peer
 * or a rogue process would send it. */
#ifndef SYMMCOLL_TEST_SENDFDS_H
#define SYMMCOLL_TEST_SENDFDS_H

#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SENDFDS_MAX 16

/* `len` bytes of `payload` and `nfds` (at most SENDFDS_MAX) descriptors: sendmsg's result. */
static inline ssize_t sendWithFds(int sock, const void* payload, size_t len, const int* fds, int nfds) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(SENDFDS_MAX * sizeof(int))];
  } control;
  if (nfds < 1 || nfds > SENDFDS_MAX) return -1;
  const size_t bytes = (size_t)nfds * sizeof(int);
  memset(&control, 0, sizeof(control));
  struct iovec iov = {.iov_base = (void*)payload, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = CMSG_SPACE(bytes)};
  struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(bytes);
  memcpy(CMSG_DATA(cm), fds, bytes);
  return sendmsg(sock, &msg, 0);
}

#endif
