/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL-style logging: WARN always, INFO/TRACE by SYMMCOLL_DEBUG and SYMMCOLL_DEBUG_SUBSYS. */
#ifndef SYMMCOLL_DEBUG_H
#define SYMMCOLL_DEBUG_H

#include <stdio.h>

enum symmLogLevel { SYMM_LOG_NONE = 0, SYMM_LOG_WARN = 1, SYMM_LOG_INFO = 2, SYMM_LOG_TRACE = 3 };

enum symmLogSubsys {
  SYMM_INIT = 1u << 0,
  SYMM_COLL = 1u << 1,
  SYMM_TRANSPORT = 1u << 2,
  SYMM_TUNER = 1u << 3,
  SYMM_ALLOC = 1u << 4,
  SYMM_ENV = 1u << 5,
  SYMM_ALL = 0x7fffffff,
};

void symmLog(enum symmLogLevel level, unsigned subsys, const char* file, int line, const char* fmt,
             ...) __attribute__((format(printf, 5, 6)));
/* Current level and mask, after the environment was read once. */
enum symmLogLevel symmLogLevel(void);
unsigned symmLogSubsysMask(void);
/* Re-read SYMMCOLL_DEBUG* (tests, ncclResetDebugInit). */
void symmLogReset(void);

#define WARN(...) symmLog(SYMM_LOG_WARN, SYMM_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(subsys, ...)                                                           \
  do {                                                                              \
    if (symmLogLevel() >= SYMM_LOG_INFO && (symmLogSubsysMask() & (subsys)))        \
      symmLog(SYMM_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__);           \
  } while (0)
#define TRACE(subsys, ...)                                                          \
  do {                                                                              \
    if (symmLogLevel() >= SYMM_LOG_TRACE && (symmLogSubsysMask() & (subsys)))       \
      symmLog(SYMM_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__);          \
  } while (0)

#endif
