/* SPDX-License-Identifier: Apache-2.0 */
/* SYMMCOLL_* knobs (read once each per process, listed from their linker section) and the
 * NCCL-style log lines they configure ("host:pid:tid SYMMCOLL LEVEL msg", filtered by level and
 * subsystem). One file because each uses the other: the log reads its own knobs
 * (SYMMCOLL_DEBUG*), and reading a knob logs what it refused. */
#define _GNU_SOURCE
#include "param.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"

/* ---- knobs ----------------------------------------------------------------------------------- */

static pthread_mutex_t paramLock = PTHREAD_MUTEX_INITIALIZER;

/* Provided by the linker for the section that SYMMCOLL_PARAM fills. */
extern struct symmParam* __start_symmcoll_params[] __attribute__((visibility("hidden")));
extern struct symmParam* __stop_symmcoll_params[] __attribute__((visibility("hidden")));

/* What reading a knob has to report; logged only after paramLock is released, because the
 * logger reads its own knobs (SYMMCOLL_DEBUG*) through symmParamStr (below). */
enum paramNote { NOTE_NONE, NOTE_SET, NOTE_INVALID };

/* A number with an optional binary suffix (K, M, G, T: 2^10..2^40), decimal or 0x hex. */
static int parseSize(const char* value, long long* out) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(value, &end, 0);
  if (errno != 0 || end == value) return 0;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++; /* KiB-style spellings */
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return 0;
  if (shift > 0 && (v > (LLONG_MAX >> shift) || v < (LLONG_MIN >> shift))) return 0;
  *out = v * (1ll << shift);
  return 1;
}

static enum paramNote loadParam(struct symmParam* p, const char** raw) {
  char env[128];
  snprintf(env, sizeof(env), "SYMMCOLL_%s", p->name);
  const char* value = getenv(env);
  enum paramNote note = NOTE_NONE;
  *raw = value;
  if (p->isString) {
    p->strValue = (value != NULL) ? value : p->strDefault;
  } else {
    p->intValue = p->intDefault;
    if (value != NULL && value[0] != '\0') {
      long long v = 0;
      if (!parseSize(value, &v) || v < p->minValue || v > p->maxValue) {
        note = NOTE_INVALID;
      } else {
        p->intValue = v;
        note = NOTE_SET;
      }
    }
  }
  __atomic_store_n(&p->loaded, 1, __ATOMIC_RELEASE);
  return note;
}

static void reportLoad(const struct symmParam* p, enum paramNote note, const char* raw) {
  if (note == NOTE_INVALID && p->minValue == INT64_MIN && p->maxValue == INT64_MAX)
    WARN("invalid value '%s' for SYMMCOLL_%s (a number, K/M/G suffixes allowed), using default "
         "%lld", raw, p->name, (long long)p->intDefault);
  else if (note == NOTE_INVALID)
    WARN("invalid value '%s' for SYMMCOLL_%s (a number in %lld..%lld, K/M/G suffixes allowed), "
         "using default %lld", raw, p->name, (long long)p->minValue, (long long)p->maxValue,
         (long long)p->intDefault);
  else if (note == NOTE_SET)
    INFO(SYMM_ENV, "SYMMCOLL_%s set to %lld", p->name, (long long)p->intValue);
}

/* Edit distance of two short names (for "did you mean"). */
static int editDistance(const char* a, const char* b) {
  int prev[64], cur[64];
  const int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 62 || lb > 62) return 99;
  for (int j = 0; j <= lb; j++) prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      const int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      const int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

/* At the first read of any knob: every SYMMCOLL_* variable of the environment is checked once,
 * so a typo shows even if its code path never runs. SYMMCOLL_TEST_* names belong to the tests. */
static int scanned; /* guarded by paramLock; symmParamResetAll re-arms it */
static char* scanNotes; /* newline-separated warnings, printed after the scan */

static void addNote(const char* line) {
  const size_t old = scanNotes ? strlen(scanNotes) : 0, add = strlen(line);
  char* grown = realloc(scanNotes, old + add + 2);
  if (grown == NULL) return;
  memcpy(grown + old, line, add);
  grown[old + add] = '\n';
  grown[old + add + 1] = '\0';
  scanNotes = grown;
}

extern char** environ;

static void scanEnvironment(void) {
  for (char** e = environ; e && *e; e++) {
    if (strncmp(*e, "SYMMCOLL_", 9) != 0) continue;
    const char* name = *e + 9;
    const char* eq = strchr(name, '=');
    if (eq == NULL) continue;
    char key[96];
    const size_t len = (size_t)(eq - name) < sizeof(key) - 1 ? (size_t)(eq - name) : sizeof(key) - 1;
    memcpy(key, name, len);
    key[len] = '\0';
    if (strncmp(key, "TEST_", 5) == 0) continue;
    struct symmParam* best = NULL;
    int bestDistance = 99, known = 0;
    for (struct symmParam** it = __start_symmcoll_params; it < __stop_symmcoll_params; it++) {
      if (strcmp((*it)->name, key) == 0) {
        known = 1;
        break;
      }
      const int d = editDistance(key, (*it)->name);
      if (d < bestDistance) {
        bestDistance = d;
        best = *it;
      }
    }
    if (known) continue;
    char line[256];
    if (best != NULL && bestDistance <= 3)
      snprintf(line, sizeof(line), "SYMMCOLL_%s is not a libsymmcoll knob (did you mean "
               "SYMMCOLL_%s?); ignored", key, best->name);
    else
      snprintf(line, sizeof(line), "SYMMCOLL_%s is not a libsymmcoll knob; ignored (the list: "
               "symmcoll-run --print-params)", key);
    addNote(line);
  }
}

static void scanOnceAndReport(void) {
  if (!__atomic_load_n(&scanned, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&paramLock);
    if (!scanned) {
      scanEnvironment();
      __atomic_store_n(&scanned, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&paramLock);
  }
  char* notes = __atomic_exchange_n(&scanNotes, NULL, __ATOMIC_ACQ_REL);
  if (notes == NULL) return;
  char* save = NULL;
  for (char* line = strtok_r(notes, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
    WARN("%s", line);
  free(notes);
  /* Values of every knob that is set, checked now too. */
  for (struct symmParam** it = __start_symmcoll_params; it < __stop_symmcoll_params; it++)
    (void)symmParamIsSet(*it);
}

static void ensureLoaded(struct symmParam* p) {
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return;
  scanOnceAndReport();
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return;
  enum paramNote note = NOTE_NONE;
  const char* raw = NULL;
  pthread_mutex_lock(&paramLock);
  if (!p->loaded) note = loadParam(p, &raw);
  pthread_mutex_unlock(&paramLock);
  reportLoad(p, note, raw);
}

int symmParamIsSet(struct symmParam* p) {
  char env[128];
  snprintf(env, sizeof(env), "SYMMCOLL_%s", p->name);
  if (getenv(env) == NULL) return 0;
  ensureLoaded(p);
  return 1;
}

int64_t symmParamInt(struct symmParam* p) {
  ensureLoaded(p);
  return p->intValue;
}

const char* symmParamStr(struct symmParam* p) {
  ensureLoaded(p);
  return p->strValue;
}

static uint64_t generation;

uint64_t symmParamGeneration(void) { return __atomic_load_n(&generation, __ATOMIC_ACQUIRE); }

void symmParamResetLogging(void) {
  pthread_mutex_lock(&paramLock);
  for (struct symmParam** it = __start_symmcoll_params; it < __stop_symmcoll_params; it++)
    if ((*it)->flags & SYMM_PARAM_LOGGING) __atomic_store_n(&(*it)->loaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&paramLock);
}

void symmParamResetAll(void) {
  __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&paramLock);
  __atomic_store_n(&scanned, 0, __ATOMIC_RELEASE);
  for (struct symmParam** it = __start_symmcoll_params; it < __stop_symmcoll_params; it++)
    __atomic_store_n(&(*it)->loaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&paramLock);
}

static int byName(const void* a, const void* b) {
  return strcmp((*(struct symmParam* const*)a)->name, (*(struct symmParam* const*)b)->name);
}

/* FNV-1a: stable across processes and builds (no pointers, no seeds). */
static uint64_t hashBytes(uint64_t h, const void* data, size_t n) {
  const unsigned char* b = data;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int symmParamAgreed(const char** names, uint64_t* hashes, int max) {
  const size_t total = (size_t)(__stop_symmcoll_params - __start_symmcoll_params);
  struct symmParam** sorted = malloc((total ? total : 1) * sizeof(*sorted));
  if (sorted == NULL) return 0;
  size_t n = 0;
  for (struct symmParam** it = __start_symmcoll_params; it < __stop_symmcoll_params; it++)
    if ((*it)->flags & SYMM_PARAM_AGREED) sorted[n++] = *it;
  qsort(sorted, n, sizeof(*sorted), byName);
  for (size_t i = 0; i < n && (int)i < max; i++) {
    struct symmParam* p = sorted[i];
    ensureLoaded(p);
    uint64_t h = hashBytes(0xcbf29ce484222325ull, p->name, strlen(p->name) + 1);
    if (p->isString) {
      const char* v = p->strValue ? p->strValue : "";
      h = hashBytes(h, v, strlen(v) + 1);
    } else {
      h = hashBytes(h, &p->intValue, sizeof(p->intValue));
    }
    if (names) names[i] = p->name;
    if (hashes) hashes[i] = h;
  }
  free(sorted);
  return (int)n;
}

void symmParamPrintAll(FILE* out) {
  size_t n = (size_t)(__stop_symmcoll_params - __start_symmcoll_params);
  struct symmParam** sorted = malloc(n * sizeof(*sorted));
  if (sorted == NULL) return;
  memcpy(sorted, __start_symmcoll_params, n * sizeof(*sorted));
  qsort(sorted, n, sizeof(*sorted), byName);
  for (size_t i = 0; i < n; i++) {
    struct symmParam* p = sorted[i];
    if ((p->flags & SYMM_PARAM_TEST) && getenv("SYMMCOLL_TEST_LIST_ALL") == NULL) continue;
    ensureLoaded(p);
    if (p->isString)
      fprintf(out, "SYMMCOLL_%-28s = %-12s (default %s)  %s\n", p->name,
              p->strValue ? p->strValue : "<unset>", p->strDefault ? p->strDefault : "<unset>", p->help);
    else
      fprintf(out, "SYMMCOLL_%-28s = %-12lld (default %lld)  %s\n", p->name, (long long)p->intValue,
              (long long)p->intDefault, p->help);
  }
  free(sorted);
}

/* ---- logging --------------------------------------------------------------------------------- */

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
  if (symmAsciiCaseEqual(s, "NONE")) return SYMM_LOG_NONE;
  if (symmAsciiCaseEqual(s, "WARN") || symmAsciiCaseEqual(s, "VERSION")) return SYMM_LOG_WARN;
  if (symmAsciiCaseEqual(s, "INFO")) return SYMM_LOG_INFO;
  if (symmAsciiCaseEqual(s, "TRACE")) return SYMM_LOG_TRACE;
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
    if (symmAsciiCaseEqual(tok, map[i].name)) return map[i].bit;
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
      if (symmAsciiCaseEqual(tok, subsysNames[i].name)) bit = subsysNames[i].bit;
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

int symmAsciiCaseEqual(const char* a, const char* b) {
  for (;; a++, b++) {
    const unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
    const unsigned char lx = x >= 'A' && x <= 'Z' ? (unsigned char)(x + 32) : x;
    const unsigned char ly = y >= 'A' && y <= 'Z' ? (unsigned char)(y + 32) : y;
    if (lx != ly) return 0;
    if (x == '\0') return 1;
  }
}

/* ---- NCCL's configuration files ----------------------------------------------------------- */

/* NAME=VALUE lines into the environment, an existing variable kept, as NCCL reads them: a line
 * starting with '#' is skipped, its newline dropped, split at the first '=', name and value
 * each cut at 1023 characters; a line without '=' is skipped. */
static void loadNcclConfFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return;
  char* line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) != -1) {
    if (len == 0 || line[0] == '#') continue;
    if (line[len - 1] == '\n') line[len - 1] = '\0';
    char* eq = strchr(line, '=');
    if (eq == NULL) continue;
    char name[1024], value[1024];
    const size_t n = (size_t)(eq - line) < sizeof(name) - 1 ? (size_t)(eq - line) : sizeof(name) - 1;
    memcpy(name, line, n);
    name[n] = '\0';
    snprintf(value, sizeof(value), "%s", eq + 1);
    if (name[0] != '\0') (void)setenv(name, value, 0);
  }
  free(line);
  fclose(f);
}

static void loadNcclConfFiles(void) {
  char path[1024];
  const char* userFile = getenv("NCCL_CONF_FILE");
  if (userFile != NULL && userFile[0] != '\0') {
    snprintf(path, sizeof(path), "%s", userFile);
    loadNcclConfFile(path);
  } else {
    const struct passwd* pw = getpwuid(getuid());
    if (pw != NULL && pw->pw_dir != NULL) {
      snprintf(path, sizeof(path), "%s/.nccl.conf", pw->pw_dir);
      loadNcclConfFile(path);
    }
  }
  loadNcclConfFile("/etc/nccl.conf");
}

const char* symmNcclGetEnv(const char* name) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  (void)pthread_once(&once, loadNcclConfFiles);
  return getenv(name);
}

int64_t symmNcclParam(const char* name, int64_t deflt) {
  const char* v = symmNcclGetEnv(name);
  if (v == NULL || v[0] == '\0') return deflt;
  errno = 0;
  const long long n = strtoll(v, NULL, 0);
  return errno != 0 ? deflt : (int64_t)n;
}

/* Our knob when set, else NCCL's (so NCCL_DEBUG=INFO recipes show our lines too). */
static const char* knobOrNccl(const char* ours, const char* ncclName, int* fromNccl) {
  *fromNccl = 0;
  if (ours != NULL) return ours;
  const char* v = symmNcclGetEnv(ncclName);
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
  /* A reset (ncclResetDebugInit on another thread) may have closed the file since ensureInit:
   * the line goes to stdout, NCCL's default, rather than through a NULL stream. */
  FILE* out = logFile != NULL ? logFile : stdout;
  fprintf(out, "%s\n", msg);
  fflush(out);
  pthread_mutex_unlock(&logLock);
}
