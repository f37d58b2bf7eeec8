/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL-style log lines "host:pid:tid SYMMCOLL LEVEL msg", filtered by level and subsystem. */
#define _GNU_SOURCE
#include "debug.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "param.h"

/* The only knobs ncclResetDebugInit reads again (SYMM_PARAM_LOGGING). */
SYMMCOLL_PARAM_STR_FULL(Debug, "DEBUG", "WARN", SYMM_PARAM_LOGGING,
                        "log level: NONE, WARN, INFO or TRACE")
SYMMCOLL_PARAM_STR_FULL(DebugSubsys, "DEBUG_SUBSYS", "ALL", SYMM_PARAM_LOGGING,
                        "comma list of INIT,COLL,TRANSPORT,TUNER,ALLOC,ENV,ALL; a leading ^ "
                        "excludes")
SYMMCOLL_PARAM_STR_FULL(DebugFile, "DEBUG_FILE", NULL, SYMM_PARAM_LOGGING,
                        "write log lines to this file (%h = host name, %p = pid) instead of "
                        "stdout")
/* When SYMMCOLL_DEBUG, _SUBSYS or _FILE is unset, NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
 * NCCL_DEBUG_FILE stand in, so existing NCCL recipes show our lines too. */

static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static int logReady; /* guarded by logLock, read atomically */
static enum symmLogLevel level = SYMM_LOG_WARN;
static unsigned subsysMask = SYMM_ALL;
static FILE* logFile;
static char hostName[64];

static const struct {
  const char* name;
  unsigned bit;
} subsysNames[] = {
    {"INIT", SYMM_INIT}, {"COLL", SYMM_COLL}, {"TRANSPORT", SYMM_TRANSPORT}, {"TUNER", SYMM_TUNER},
    {"ALLOC", SYMM_ALLOC}, {"ENV", SYMM_ENV}, {"ALL", SYMM_ALL},
};

/* Problems found while reading the log knobs, reported once the logger is up. */
static char setupNote[256];

static enum symmLogLevel parseLevel(const char* s, const char* knob) {
  if (s == NULL || s[0] == '\0') return SYMM_LOG_WARN;
  if (strcasecmp(s, "NONE") == 0) return SYMM_LOG_NONE;
  if (strcasecmp(s, "WARN") == 0 || strcasecmp(s, "VERSION") == 0) return SYMM_LOG_WARN;
  if (strcasecmp(s, "INFO") == 0) return SYMM_LOG_INFO;
  if (strcasecmp(s, "TRACE") == 0) return SYMM_LOG_TRACE;
  if (knob != NULL)
    snprintf(setupNote, sizeof(setupNote), "%s=%s is not one of NONE, WARN, INFO, TRACE; using WARN",
             knob, s);
  return SYMM_LOG_WARN;
}

/* NCCL_DEBUG_SUBSYS names that mean one of ours (the rest are NCCL's own and select nothing). */
static unsigned ncclSubsys(const char* tok) {
  static const struct {
    const char* name;
    unsigned bit;
  } map[] = {{"TUNING", SYMM_TUNER}, {"P2P", SYMM_TRANSPORT}, {"NVLS", SYMM_TRANSPORT},
             {"REG", SYMM_TRANSPORT}, {"CALL", SYMM_COLL}};
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (strcasecmp(tok, map[i].name) == 0) return map[i].bit;
  return 0;
}

static unsigned parseSubsys(const char* s, int fromNccl) {
  if (s == NULL || s[0] == '\0') return SYMM_ALL;
  int invert = (s[0] == '^');
  if (invert) s++;
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
      if (strcasecmp(tok, subsysNames[i].name) == 0) bit = subsysNames[i].bit;
    if (bit == 0 && fromNccl) bit = ncclSubsys(tok);
    if (bit == 0 && !fromNccl && setupNote[0] == '\0')
      snprintf(setupNote, sizeof(setupNote),
               "SYMMCOLL_DEBUG_SUBSYS: unknown subsystem '%s' (known: INIT, COLL, TRANSPORT, "
               "TUNER, ALLOC, ENV, ALL); ignored", tok);
    mask |= bit;
  }
  return invert ? ~mask : mask;
}

/* Expands %h and %p in the SYMMCOLL_DEBUG_FILE pattern, like NCCL_DEBUG_FILE. */
static FILE* openLogFile(const char* pattern) {
  char path[4096];
  size_t n = 0;
  for (const char* c = pattern; *c && n + 1 < sizeof(path); c++) {
    if (c[0] == '%' && c[1] == 'h') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%s", hostName);
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
      c++;
    } else {
      path[n++] = *c;
    }
    if (n >= sizeof(path)) n = sizeof(path) - 1;
  }
  path[n] = '\0';
  FILE* f = fopen(path, "a");
  if (f) setvbuf(f, NULL, _IOLBF, 0);
  return f;
}

/* Our knob when set, else NCCL's (so NCCL_DEBUG=INFO recipes show our lines too). */
static const char* knobOrNccl(const char* ours, const char* ncclName, int* fromNccl) {
  *fromNccl = 0;
  if (ours != NULL) return ours;
  const char* v = getenv(ncclName);
  if (v != NULL && v[0] != '\0') *fromNccl = 1;
  return v;
}

static void initLocked(void) {
  if (logReady) return;
  gethostname(hostName, sizeof(hostName) - 1);
  char* dot = strchr(hostName, '.');
  if (dot) *dot = '\0';
  int fromNccl = 0;
  const char* lvl = knobOrNccl(getenv("SYMMCOLL_DEBUG") ? symmParamDebug() : NULL, "NCCL_DEBUG",
                               &fromNccl);
  level = parseLevel(lvl, fromNccl ? NULL : "SYMMCOLL_DEBUG");
  const char* sub = knobOrNccl(getenv("SYMMCOLL_DEBUG_SUBSYS") ? symmParamDebugSubsys() : NULL,
                               "NCCL_DEBUG_SUBSYS", &fromNccl);
  subsysMask = parseSubsys(sub, fromNccl);
  const char* file = knobOrNccl(symmParamDebugFile(), "NCCL_DEBUG_FILE", &fromNccl);
  logFile = (file != NULL && file[0] != '\0') ? openLogFile(file) : NULL;
  if (logFile == NULL) logFile = stdout;
  __atomic_store_n(&logReady, 1, __ATOMIC_RELEASE);
}

static void ensureInit(void) {
  if (__atomic_load_n(&logReady, __ATOMIC_ACQUIRE)) return;
  /* Read our knobs before taking the lock: the first read of any knob checks the environment
   * and may log warnings, which come back here. */
  (void)symmParamDebug();
  (void)symmParamDebugSubsys();
  (void)symmParamDebugFile();
  pthread_mutex_lock(&logLock);
  const int fresh = !logReady;
  initLocked();
  pthread_mutex_unlock(&logLock);
  if (fresh && setupNote[0] != '\0') symmLog(SYMM_LOG_WARN, SYMM_ALL, __FILE__, __LINE__, "%s", setupNote);
}

enum symmLogLevel symmLogLevel(void) {
  ensureInit();
  return level;
}

unsigned symmLogSubsysMask(void) {
  ensureInit();
  return subsysMask;
}

void symmLogReset(void) {
  pthread_mutex_lock(&logLock);
  if (logFile != NULL && logFile != stdout) fclose(logFile);
  logFile = NULL;
  setupNote[0] = '\0';
  __atomic_store_n(&logReady, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&logLock);
}

void symmLog(enum symmLogLevel lvl, unsigned subsys, const char* file, int line, const char* fmt,
             ...) {
  ensureInit();
  /* Warnings are never filtered by subsystem. */
  if (lvl > level || (lvl > SYMM_LOG_WARN && !(subsys & subsysMask))) return;
  static const char* const names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024];
  int n;
  if (lvl == SYMM_LOG_WARN || lvl == SYMM_LOG_TRACE) {
    const char* base = strrchr(file, '/');
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld SYMMCOLL %s %s:%d ", hostName, (int)getpid(),
                 (long)syscall(SYS_gettid), names[lvl], base ? base + 1 : file, line);
  } else {
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld SYMMCOLL %s ", hostName, (int)getpid(),
                 (long)syscall(SYS_gettid), names[lvl]);
  }
  if (n < 0) n = 0;
  if ((size_t)n < sizeof(msg)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_lock(&logLock);
  fprintf(logFile, "%s\n", msg);
  fflush(logFile);
  pthread_mutex_unlock(&logLock);
}
