/* SPDX-License-Identifier: Apache-2.0 */
/* Reads SYMMCOLL_* knobs once each and lists them all from their linker section. */
#define _GNU_SOURCE
#include "param.h"

#include <errno.h>
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
      char* end = NULL;
      errno = 0;
      long long v = strtoll(value, &end, 0);
      if (errno != 0 || end == value || *end != '\0' || v < p->minValue || v > p->maxValue) {
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

static void ensureLoaded(struct symmParam* p) {
  if (__atomic_load_n(&p->loaded, __ATOMIC_ACQUIRE)) return;
  enum paramNote note = NOTE_NONE;
  const char* raw = NULL;
  pthread_mutex_lock(&paramLock);
  if (!p->loaded) note = loadParam(p, &raw);
  pthread_mutex_unlock(&paramLock);
  if (note == NOTE_INVALID)
    WARN("invalid value '%s' for SYMMCOLL_%s, using default %lld", raw, p->name,
         (long long)p->intDefault);
  else if (note == NOTE_SET)
    INFO(SYMM_ENV, "SYMMCOLL_%s set to %lld", p->name, (long long)p->intValue);
}

int64_t symmParamInt(struct symmParam* p) {
  ensureLoaded(p);
  return p->intValue;
}

const char* symmParamStr(struct symmParam* p) {
  ensureLoaded(p);
  return p->strValue;
}

void symmParamResetAll(void) {
  pthread_mutex_lock(&paramLock);
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
