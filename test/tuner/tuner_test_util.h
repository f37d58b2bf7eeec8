/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the tuner's CPU tests: inputs, a clean environment, counting log lines. */
#ifndef SYMMCOLL_TUNER_TEST_UTIL_H
#define SYMMCOLL_TUNER_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"
#include "tune_table.h"
#include "tuner.h"

#define B(algo) (1u << (algo))
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* A call on an H200-like communicator: sm_90, NVLink, 64 MiB of staging, built-in table. */
static inline struct symmTuneInput tin(enum symmColl coll, int nranks, ncclDataType_t dt,
                                       ncclRedOp_t op, size_t bytes) {
  struct symmTuneInput in;
  memset(&in, 0, sizeof(in));
  in.coll = coll;
  in.nranks = nranks;
  in.datatype = dt;
  in.op = op;
  in.bytes = bytes;
  in.arch = 90;
  in.link = SYMM_LINK_NVLINK;
  in.stagingBytes = (size_t)64 << 20;
  return in;
}

static const char* const tunerKnobs[] = {
    "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO",
    "SYMMCOLL_MULTIMEM",       "SYMMCOLL_MULTIMEM_EMULATE", "SYMMCOLL_ZERO_COPY_MAX_BYTES",
    "SYMMCOLL_ZERO_COPY_MIN_BYTES", "SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES", "SYMMCOLL_TUNING_FILE"};

static inline void tunerCleanEnv(void) {
  for (size_t i = 0; i < sizeof(tunerKnobs) / sizeof(tunerKnobs[0]); i++) unsetenv(tunerKnobs[i]);
  symmParamResetAll();
  symmTunerResetForTests();
}

static inline void tunerSetEnv(const char* name, const char* value) {
  setenv(name, value, 1);
  symmParamResetAll();
}

/* Log lines go to `path` (truncated) from now on, at `level`. */
static inline void tunerLogTo(const char* path, const char* level) {
  FILE* f = fopen(path, "w");
  if (f) fclose(f);
  setenv("SYMMCOLL_DEBUG_FILE", path, 1);
  setenv("SYMMCOLL_DEBUG", level, 1);
  symmParamResetAll();
  symmLogReset();
}

/* Lines of `path` that contain every one of the given substrings (NULL-terminated list). */
static inline int tunerCountLines(const char* path, const char* a, const char* b) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, a) && (b == NULL || strstr(line, b))) n++;
  fclose(f);
  return n;
}

#endif
