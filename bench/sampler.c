/* SPDX-License-Identifier: Apache-2.0 */
/* A sampling profiler to preload, for machines without perf or gdb (meson builds it as
 * build/bench/sampler.so on x86-64):
 *   LD_PRELOAD=$PWD/build/bench/sampler.so SAMPLER_OUT=/tmp/prof <program>
 *   python3 bench/sampler_report.py /tmp/prof.<pid> <calls per kind per rank> <ranks>
 * SIGPROF on the process's CPU time (one sample per scheduler tick, about 4 ms) records the
 * interrupted instruction and up to 23 return addresses (glibc backtrace, which unwinds
 * through code without frame pointers); at exit it writes one line per sample, leaf first,
 * "module+offset ...", to $SAMPLER_OUT.<pid>, after a line with the process's CPU seconds.
 * Processes that took no sample (a timeout(1) in front, say) write nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>
#define N (1 << 17)
#define D 24
static void* frames[N][D];
static int depth[N];
static long n;
static void handler(int sig, siginfo_t* si, void* uc) {
  (void)sig; (void)si;
  long i = __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED);
  if (i >= N) return;
  frames[i][0] = (void*)((ucontext_t*)uc)->uc_mcontext.gregs[REG_RIP];
  void* bt[D + 2];
  int k = backtrace(bt, D + 2); /* bt[0] handler, bt[1] the signal trampoline */
  int d = 1;
  for (int j = 2; j < k && d < D; j++) frames[i][d++] = bt[j];
  depth[i] = d;
}
__attribute__((constructor)) static void start(void) {
  if (!getenv("SAMPLER_OUT")) return;
  void* warm[4];
  backtrace(warm, 4); /* loads libgcc_s now, not in a handler */
  struct sigaction sa = {0};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_PROF, &it, NULL);
}
__attribute__((destructor)) static void stop(void) {
  if (!getenv("SAMPLER_OUT")) return;
  struct itimerval it = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &it, NULL);
  if (n == 0) return; /* a parent like timeout(1) */
  char name[512];
  snprintf(name, sizeof(name), "%s.%d", getenv("SAMPLER_OUT"), (int)getpid());
  FILE* f = fopen(name, "w");
  if (!f) return;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fprintf(f, "# cpu %.3f samples %ld\n", ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec), n);
  for (long i = 0; i < n && i < N; i++) {
    for (int j = 0; j < depth[i]; j++) {
      Dl_info d;
      /* return addresses point after the call: -1 keeps them inside the caller */
      char* pc = (char*)frames[i][j] - (j > 0);
      if (dladdr(pc, &d) && d.dli_fname)
        fprintf(f, "%s+0x%lx ", d.dli_fname, (unsigned long)(pc - (char*)d.dli_fbase));
      else
        fprintf(f, "?+0x0 ");
    }
    fputc('\n', f);
  }
  fclose(f);
}
