/* SPDX-License-Identifier: Apache-2.0 */
/* Hang watchdog for GPU tests: after a deadline, every thread of the process prints its stack
 * (raw addresses plus the executable mappings, to symbolize with addr2line) and the process
 * exits 124 instead of hanging silently. Linux/glibc only. */
#ifndef SYMMCOLL_TEST_WATCHDOG_H
#define SYMMCOLL_TEST_WATCHDOG_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void watchdogStackHandler(int sig) {
  (void)sig;
  void* frames[48];
  const int n = backtrace(frames, 48);
  char line[64];
  const int len = snprintf(line, sizeof(line), "watchdog: thread %ld stack:\n", (long)syscall(SYS_gettid));
  if (write(2, line, (size_t)len) < 0) return;
  backtrace_symbols_fd(frames, n, 2);
}

/* Set by a test: what it can say about its own state when the deadline passes (it runs in a
 * thread of its own; the stacks follow after it returns or after 5 s). */
static void (*watchdogReport)(void);

static void* watchdogReportThread(void* done) {
  watchdogReport();
  __atomic_store_n((int*)done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void* watchdogThread(void* arg) {
  const long seconds = (long)(intptr_t)arg;
  struct timespec ts = {seconds, 0};
  while (nanosleep(&ts, &ts) != 0) {}
  fprintf(stderr, "watchdog: still running after %ld s\n", seconds);
  static int reported;
  pthread_t reporter;
  if (watchdogReport != NULL &&
      pthread_create(&reporter, NULL, watchdogReportThread, &reported) == 0) {
    pthread_detach(reporter);
    for (int i = 0; i < 500 && !__atomic_load_n(&reported, __ATOMIC_ACQUIRE); i++) {
      struct timespec tick = {0, 10 * 1000 * 1000};
      nanosleep(&tick, NULL);
    }
  }
  fprintf(stderr, "watchdog: stacks follow\n");
  FILE* maps = fopen("/proc/self/maps", "r");
  char buf[512];
  while (maps != NULL && fgets(buf, sizeof(buf), maps) != NULL)
    if (strstr(buf, " r-xp ") != NULL) fputs(buf, stderr);
  if (maps) fclose(maps);
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  const long self = (long)syscall(SYS_gettid);
  while (d != NULL && (e = readdir(d)) != NULL) {
    const long tid = atol(e->d_name);
    if (tid <= 0 || tid == self) continue;
    syscall(SYS_tgkill, (long)getpid(), tid, SIGUSR2);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  if (d) closedir(d);
  fflush(stderr);
  _exit(124);
  return NULL;
}

/* A crash under the watchdog prints the crashing thread's stack and the executable mappings,
 * then the signal takes its default course. */
static void watchdogCrashHandler(int sig) {
  char line[64];
  const int len = snprintf(line, sizeof(line), "watchdog: fatal signal %d\n", sig);
  if (write(2, line, (size_t)len) < 0) return;
  watchdogStackHandler(sig);
  const int maps = open("/proc/self/maps", O_RDONLY);
  char buf[4096];
  ssize_t n;
  while (maps >= 0 && (n = read(maps, buf, sizeof(buf))) > 0)
    if (write(2, buf, (size_t)n) < 0) break;
  if (maps >= 0) close(maps);
  raise(sig);
}

/* Arms the watchdog: SYMMCOLL_TEST_WATCHDOG_S seconds (0 or unset: `seconds`; negative: off). */
static inline void watchdogArm(long seconds) {
  const char* env = getenv("SYMMCOLL_TEST_WATCHDOG_S");
  if (env != NULL && env[0] != '\0') seconds = atol(env);
  if (seconds <= 0) return;
  void* warm[1];
  (void)backtrace(warm, 1); /* loads libgcc now, not inside the signal handler */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = watchdogStackHandler;
  sigaction(SIGUSR2, &sa, NULL);
  sa.sa_handler = watchdogCrashHandler;
  sa.sa_flags = (int)SA_RESETHAND;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, watchdogThread, (void*)(intptr_t)seconds) == 0) pthread_detach(t);
}

#endif
