/* SPDX-License-Identifier: Apache-2.0 */
/* For GPU tests that fork rank processes: whole-buffer pipe I/O and a GPU count that leaves the
 * calling process CUDA-free (a process that initialised CUDA cannot use it in forked children). */
#ifndef SYMMCOLL_TEST_PROCS_H
#define SYMMCOLL_TEST_PROCS_H

#include <cuda_runtime.h>
#include <errno.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* All n bytes, retrying on EINTR: 0, or -1 when the pipe failed or was closed early. */
static inline int procsMoveAll(int fd, char* p, size_t n, int writing) {
  while (n > 0) {
    const ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}
static inline int procsWriteAll(int fd, const void* buf, size_t n) {
  return procsMoveAll(fd, (char*)buf, n, 1);
}
static inline int procsReadAll(int fd, void* buf, size_t n) { return procsMoveAll(fd, (char*)buf, n, 0); }

/* The number of GPUs (at most 100), asked in a forked child. */
static inline int procsCountGpus(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

#endif
