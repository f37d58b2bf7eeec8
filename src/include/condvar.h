/* SPDX-License-Identifier: Apache-2.0 */
/* Condition variables whose timed waits take CLOCK_MONOTONIC deadlines, so that a step of the
 * wall clock neither cuts a wait short nor stretches it. Header-only: the test bootstrap (a
 * stand-in libnccl that links nothing of ours) uses it too. */
#ifndef SYMMCOLL_CONDVAR_H
#define SYMMCOLL_CONDVAR_H

#include <pthread.h>
#include <time.h>

static inline void symmCondInitMonotonic(pthread_cond_t* cond) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
}

#endif
