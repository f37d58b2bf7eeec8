/* SPDX-License-Identifier: Apache-2.0 */
/* A tiny test harness: typed checks that print what differed and count failures. */
#ifndef SYMMCOLL_TEST_HARNESS_H
#define SYMMCOLL_TEST_HARNESS_H

#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counters of a binary. A test of one file has them here; a test of several files defines
 * HARNESS_SHARED_COUNTERS before including this header (its own header does that) and defines
 * the two counters in the file with main(). */
#ifdef HARNESS_SHARED_COUNTERS
extern int harnessFailures;
extern int harnessChecks;
#else
static int harnessFailures;
static int harnessChecks;
#endif

/* Entries of a /proc directory (open fds: "/proc/self/fd"; mapped ranges: "/proc/self/map_files"),
 * not counting the descriptor that reads it; -1 when it cannot be read. Leak checks compare two. */
static inline int harnessCountEntries(const char* path) {
  DIR* d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - (strcmp(path, "/proc/self/fd") == 0 ? 1 : 0);
}

/* For a test against a stand-in NCCL named by argv[1] (else `usage` and exit 2): makes it the
 * NCCL libsymmcoll forwards to (SYMMCOLL_NCCL_LIB) and opens it here too, so that the test can
 * read what it recorded. NULL, a failed check, when it does not load. */
static inline void* harnessUseFakeNccl(int argc, char** argv, const char* usage) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s\n", usage);
    exit(2);
  }
  setenv("SYMMCOLL_NCCL_LIB", argv[1], 1);
  void* fake = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (fake == NULL) {
    harnessChecks++;
    harnessFailures++;
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
  }
  return fake;
}

/* Exit code meson reads as "skipped". */
#define TEST_SKIP_CODE 77

#define CHECK(cond)                                                                  \
  do {                                                                               \
    harnessChecks++;                                                                 \
    if (!(cond)) {                                                                   \
      harnessFailures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
    }                                                                                \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                           \
  do {                                                                               \
    long long a_ = (long long)(a), b_ = (long long)(b);                              \
    harnessChecks++;                                                                 \
    if (a_ != b_) {                                                                  \
      harnessFailures++;                                                             \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, a_, b_); \
    }                                                                                \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                           \
  do {                                                                               \
    const char *a_ = (a), *b_ = (b);                                                 \
    harnessChecks++;                                                                 \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                           \
      harnessFailures++;                                                             \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
              a_ ? a_ : "(null)", b_ ? b_ : "(null)");                               \
    }                                                                                \
  } while (0)

/* Thread-safe twins for tests whose checks run on several rank threads: the operands are
 * evaluated BEFORE anything is counted (an operand may be a collective call that waits for
 * another rank's thread), the counters are atomic, and nothing is locked. */
static inline void harnessRecord(int ok, const char* file, int line, const char* what) {
  __atomic_add_fetch(&harnessChecks, 1, __ATOMIC_RELAXED);
  if (!ok) {
    __atomic_add_fetch(&harnessFailures, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
  }
}
#define HARNESS_TCHECK(cond)                                                                 \
  do {                                                                               \
    const int tcheckOk_ = (cond) ? 1 : 0;                                            \
    harnessRecord(tcheckOk_, __FILE__, __LINE__, #cond);                             \
  } while (0)
#define HARNESS_TCHECK_EQ_INT(a, b)                                                          \
  do {                                                                               \
    const long long tcheckA_ = (long long)(a), tcheckB_ = (long long)(b);            \
    __atomic_add_fetch(&harnessChecks, 1, __ATOMIC_RELAXED);                         \
    if (tcheckA_ != tcheckB_) {                                                      \
      __atomic_add_fetch(&harnessFailures, 1, __ATOMIC_RELAXED);                     \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
              tcheckA_, tcheckB_);                                                   \
    }                                                                                \
  } while (0)

/* The same with a printf-style message: "FAIL file:line: message" (stderr held for the line). */
#define HARNESS_TCHECKF(cond, ...)                                                   \
  do {                                                                               \
    const int tcheckOk_ = (cond) ? 1 : 0;                                            \
    __atomic_add_fetch(&harnessChecks, 1, __ATOMIC_RELAXED);                         \
    if (!tcheckOk_) {                                                                \
      __atomic_add_fetch(&harnessFailures, 1, __ATOMIC_RELAXED);                     \
      flockfile(stderr);                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
      funlockfile(stderr);                                                           \
    }                                                                                \
  } while (0)

/* Before any CUDA call in tests that put several ranks on one GPU: CUDA maps streams onto
 * CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default), and two streams sharing a queue
 * run in one order. Ranks that queue several spinning kernels each then deadlock: rank A's call
 * k can sit behind rank B's call k+1, which waits for A's call k+1. One rank per GPU (every real
 * job) cannot meet this; 32 queues cover the tests' 8 ranks x 2 streams plus internal ones. A
 * lower value in the environment (Megatron recipes set 1) is raised, with a line saying so. */
static inline void harnessManyStreamsPerGpu(void) {
  const char* set = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (set != NULL && atoi(set) >= 32) return;
  if (set != NULL)
    fprintf(stderr, "test: CUDA_DEVICE_MAX_CONNECTIONS=%s raised to 32 (several ranks per GPU)\n", set);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
}

/* Ends main(): prints "N passed, N failed" and returns the exit code. */
static inline int harnessReport(const char* name) {
  printf("%s: %d checks, %d failed\n", name, harnessChecks, harnessFailures);
  return harnessFailures == 0 && harnessChecks > 0 ? 0 : 1;
}

#endif
