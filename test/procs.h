/* SPDX-License-Identifier: Apache-2.0 */
/* For GPU tests that fork rank processes: whole-buffer pipe I/O, a GPU count that leaves the
 * calling process CUDA-free (a process that initialised CUDA cannot use it in forked children),
 * and rank processes that share an ncclUniqueId and a barrier. */
#ifndef SYMMCOLL_TEST_PROCS_H
#define SYMMCOLL_TEST_PROCS_H

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
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

/* In a rank process: a failed CUDA or NCCL call ends it (exit 2) with `rank` and the call. */
#define PROCS_CUDA_OK(rank, call)                                                              \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s:%d %s: %s\n", (rank), __FILE__, __LINE__, #call,            \
              cudaGetErrorString(e_));                                                         \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)
#define PROCS_NCCL_OK(rank, call)                                                              \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s:%d %s: %s\n", (rank), __FILE__, __LINE__, #call,            \
              ncclGetErrorString(r_));                                                         \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

/* ---- rank processes with a barrier (procsRunRanks) ---------------------------------------- */

/* A rank process's ends of its two pipes to the parent, which relays the barrier: [0] up,
 * [1] down. */
static inline int* procsBarrierFds(void) {
  static int fds[2] = {-1, -1};
  return fds;
}

/* Returns once every rank process of procsRunRanks has called it as often; exits 2 when the
 * parent or a rank is gone (the barrier ends instead of hanging). */
static inline void procsBarrier(void) {
  char c = 'b';
  const int* fds = procsBarrierFds();
  if (procsWriteAll(fds[0], &c, 1) != 0 || procsReadAll(fds[1], &c, 1) != 0) exit(2);
}

/* Forks n rank processes (2..8) that run rankMain(r, n, idFd): rank 0 draws the ncclUniqueId
 * and every rank reads it from idFd. Relays procsBarrier until a rank ends, then waits for all.
 * Exit codes 0 (passed), 77 (skipped) or anything else (failed, reported). Returns 0 when none
 * failed and not all skipped, 77 (meson's "skipped") when all skipped, 1 when one failed, 2
 * when the processes could not be started. */
static inline int procsRunRanks(const char* name, int n, int (*rankMain)(int r, int n, int idFd)) {
  int up[8][2], down[8][2], ids[8][2];
  if (n < 1 || n > 8) return 2;
  for (int r = 0; r < n; r++)
    if (pipe(up[r]) != 0 || pipe(down[r]) != 0 || pipe(ids[r]) != 0) return 2;
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) return 2;
    if (pids[r] == 0) {
      /* Only our own ends stay open, so that a rank that dies ends the barrier, not hangs it. */
      for (int q = 0; q < n; q++) {
        close(up[q][0]);
        close(down[q][1]);
        if (q != r) {
          close(up[q][1]);
          close(down[q][0]);
          close(ids[q][0]);
        }
        if (r != 0) close(ids[q][1]);
      }
      procsBarrierFds()[0] = up[r][1];
      procsBarrierFds()[1] = down[r][0];
      if (r == 0) { /* rank 0 draws the id for every rank, itself included */
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(2);
        for (int q = 0; q < n; q++)
          if (procsWriteAll(ids[q][1], &id, sizeof(id)) != 0) _exit(2);
        for (int q = 0; q < n; q++) close(ids[q][1]);
      }
      _exit(rankMain(r, n, ids[r][0]));
    }
  }
  for (int r = 0; r < n; r++) {
    close(up[r][1]);
    close(down[r][0]);
    close(ids[r][0]);
    close(ids[r][1]);
  }
  /* The barrier: every rank writes a byte, then each gets one back; a rank that died ends it. */
  for (;;) {
    int alive = 1;
    char c;
    for (int r = 0; r < n && alive; r++) alive = procsReadAll(up[r][0], &c, 1) == 0;
    if (!alive) break;
    for (int r = 0; r < n; r++) (void)procsWriteAll(down[r][1], &c, 1);
  }
  for (int r = 0; r < n; r++) close(down[r][1]);
  int failed = 0, skipped = 0;
  for (int r = 0; r < n; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    skipped += code == 77;
    if (code != 0 && code != 77) {
      fprintf(stderr, "rank %d ended with status %d\n", r, status);
      failed++;
    }
  }
  printf("%s: %d processes, %d failed%s\n", name, n, failed,
         skipped ? " (our kernels not set up: skipped)" : "");
  if (failed) return 1;
  return skipped == n ? 77 : 0;
}

#endif
