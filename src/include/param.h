/* SPDX-License-Identifier: Apache-2.0 */
/* SYMMCOLL_* knobs: one line each, read once per process, listed by symmcollPrintParams(). */
#ifndef SYMMCOLL_PARAM_H
#define SYMMCOLL_PARAM_H

#include <stdint.h>
#include <stdio.h>

/* Flags of a knob. */
#define SYMM_PARAM_AGREED 1u /* must be equal on every rank: hashed into the setup record */
#define SYMM_PARAM_TEST 2u   /* for tests only: not listed to users */
#define SYMM_PARAM_LOGGING 4u /* logging only: read again by ncclResetDebugInit */

struct symmParam {
  const char* name; /* without the SYMMCOLL_ prefix */
  const char* help;
  int isString;
  int64_t intDefault;
  const char* strDefault;
  unsigned flags;            /* SYMM_PARAM_* */
  int64_t minValue, maxValue; /* integer knobs: values outside are refused (default kept) */
  /* cache: 0 = unread, 1 = read */
  int loaded;
  int64_t intValue;
  const char* strValue;
};

/* Names compared case-insensitively in ASCII only: the process's locale (tr_TR folds 'I' to a
 * dotless i) must not make ranks read the same text differently. */
int symmAsciiCaseEqual(const char* a, const char* b);
/* NCCL_* variables as the real NCCL sees them: its configuration files (NCCL_CONF_FILE, else
 * ~/.nccl.conf; then /etc/nccl.conf) are loaded into the environment first, once per process and
 * without overwriting what is set, as NCCL does at its first call; we may read before that. */
const char* symmNcclGetEnv(const char* name);
/* An NCCL_* integer as NCCL_PARAM reads it: strtoll in base 0, text after the number ignored, a
 * range error or an unset/empty variable gives `deflt`. */
int64_t symmNcclParam(const char* name, int64_t deflt);

int64_t symmParamInt(struct symmParam* p);
const char* symmParamStr(struct symmParam* p); /* NULL when unset and no default */
/* 1 when SYMMCOLL_<name> is in the environment (its value is then read and checked). */
int symmParamIsSet(struct symmParam* p);
/* Knobs flagged SYMM_PARAM_AGREED, sorted by name: names[i] and a hash of each one's value as
 * read (identical values give identical hashes on every rank). Returns how many there are
 * (fills at most `max`). */
int symmParamAgreed(const char** names, uint64_t* hashes, int max);
/* Every knob but the logging ones is read once per process and never again: what changes which
 * kernel runs must not move on one rank alone after its communicators agreed on it.
 * ncclResetDebugInit: only the SYMM_PARAM_LOGGING knobs are read again at their next use. */
void symmParamResetLogging(void);
/* Tests only (they change the environment between cases): forget every cached value. */
void symmParamResetAll(void);
/* Changes at every symmParamResetAll (never otherwise): what was computed from knobs may be
 * stale. */
uint64_t symmParamGeneration(void);
void symmParamPrintAll(FILE* out);

/* Each declaration lands in one linker section, so the list of knobs needs no central table. */
#define SYMM_PARAM_SECTION __attribute__((used, section("symmcoll_params"), aligned(8)))

/* SYMMCOLL_PARAM_FULL(Name, "ENV_SUFFIX", default, min, max, flags, "help") defines
 * int64_t symmParamName(void); SYMMCOLL_PARAM is the unbounded, unflagged shorthand. */
#define SYMMCOLL_PARAM_FULL(fn, env, def, lo, hi, fl, helptext)                                   \
  static struct symmParam symmParamDesc##fn = {env, helptext, 0, (def), NULL, (fl), (lo), (hi),    \
                                               0, 0, NULL};                                       \
  static struct symmParam* symmParamPtr##fn SYMM_PARAM_SECTION = &symmParamDesc##fn;              \
  static inline int64_t symmParam##fn(void) { return symmParamInt(&symmParamDesc##fn); }

#define SYMMCOLL_PARAM(fn, env, def, helptext) \
  SYMMCOLL_PARAM_FULL(fn, env, def, INT64_MIN, INT64_MAX, 0u, helptext)

#define SYMMCOLL_PARAM_STR_FULL(fn, env, def, fl, helptext)                                       \
  static struct symmParam symmParamDesc##fn = {env, helptext, 1, 0, (def), (fl), 0, 0, 0, 0, NULL}; \
  static struct symmParam* symmParamPtr##fn SYMM_PARAM_SECTION = &symmParamDesc##fn;              \
  static inline const char* symmParam##fn(void) { return symmParamStr(&symmParamDesc##fn); }

#define SYMMCOLL_PARAM_STR(fn, env, def, helptext) SYMMCOLL_PARAM_STR_FULL(fn, env, def, 0u, helptext)

#endif
