/* SPDX-License-Identifier: Apache-2.0 */
/* SYMMCOLL_* knobs: one line each, read once, listed by symmcollPrintParams(). */
#ifndef SYMMCOLL_PARAM_H
#define SYMMCOLL_PARAM_H

#include <stdint.h>
#include <stdio.h>

struct symmParam {
  const char* name; /* without the SYMMCOLL_ prefix */
  const char* help;
  int isString;
  int64_t intDefault;
  const char* strDefault;
  /* cache: 0 = unread, 1 = read */
  int loaded;
  int64_t intValue;
  const char* strValue;
};

int64_t symmParamInt(struct symmParam* p);
const char* symmParamStr(struct symmParam* p); /* NULL when unset and no default */
/* Forget cached values (tests change the environment). */
void symmParamResetAll(void);
void symmParamPrintAll(FILE* out);

/* Each declaration lands in one linker section, so the list of knobs needs no central table. */
#define SYMM_PARAM_SECTION __attribute__((used, section("symmcoll_params"), aligned(8)))

/* SYMMCOLL_PARAM(Name, "ENV_SUFFIX", default, "help") defines int64_t symmParamName(void). */
#define SYMMCOLL_PARAM(fn, env, def, helptext)                                                    \
  static struct symmParam symmParamDesc##fn = {env, helptext, 0, (def), NULL, 0, 0, NULL};        \
  static struct symmParam* symmParamPtr##fn SYMM_PARAM_SECTION = &symmParamDesc##fn;              \
  static inline int64_t symmParam##fn(void) { return symmParamInt(&symmParamDesc##fn); }

#define SYMMCOLL_PARAM_STR(fn, env, def, helptext)                                                \
  static struct symmParam symmParamDesc##fn = {env, helptext, 1, 0, (def), 0, 0, NULL};           \
  static struct symmParam* symmParamPtr##fn SYMM_PARAM_SECTION = &symmParamDesc##fn;              \
  static inline const char* symmParam##fn(void) { return symmParamStr(&symmParamDesc##fn); }

#endif
