/* SPDX-License-Identifier: Apache-2.0 */
/* Reads SYMMCOLL_* knobs once each per process and lists them all from their linker section. */
#define _GNU_SOURCE
#include "param.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

static pthread_mutex_t paramLock = PTHREAD_MUTEX_INITIALIZER;

/* Provided by the linker for the section that SYMMCOLL_PARAM fills. */
extern struct symmParam* __start_symmcoll_params[] __attribute__((visibility("hidden")));
extern struct symmParam* __stop_symmcoll_params[] __attribute__((visibility("hidden")));

/* What reading a knob has to report; logged only after paramLock is released, because the
 * logger reads its own knobs (SYMMCOLL_DEBUG*) through this file. */
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
