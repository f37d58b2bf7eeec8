/* SPDX-License-Identifier: Apache-2.0 */
/* Parameters and logging parse as documented: defaults, overrides, bad values, the listing. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "harness.h"
#include "symmcoll.h"

/* NCCL's (deprecated) entry point, which libsymmcoll exports. */
void ncclResetDebugInit(void);

/* The listing, as symmcollPrintParams writes it (free it). */
static char* listing(void) {
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  if (mem == NULL) return NULL;
  symmcollPrintParams(mem);
  fclose(mem);
  return text;
}

/* The current value (first word after "= ") and the default of SYMMCOLL_<name> in `text`. */
static int valueOf(const char* text, const char* name, char* value, char* def, size_t size) {
  char key[96];
  snprintf(key, sizeof(key), "SYMMCOLL_%s ", name);
  const char* line = text != NULL ? strstr(text, key) : NULL;
  if (line == NULL) return 0;
  char fmt[64];
  snprintf(fmt, sizeof(fmt), "%%*s = %%%zus (default %%%zu[^)])", size - 1, size - 1);
  return sscanf(line, fmt, value, def) == 2;
}

static void checkValue(const char* text, const char* name, const char* want, const char* wantDef) {
  char value[64] = "", def[64] = "";
  CHECK(valueOf(text, name, value, def, sizeof(value)));
  CHECK_EQ_STR(value, want);
  if (wantDef != NULL) CHECK_EQ_STR(def, wantDef);
}

int main(int argc, char** argv) {
  /* The listing names every knob with its default. */
  setenv("SYMMCOLL_DISABLE", "1", 1);
  setenv("SYMMCOLL_AR_MAX_BLOCKS", "64", 1);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "oneshot", 1);
  setenv("SYMMCOLL_DEBUG", "WARN", 1);
  setenv("SYMMCOLL_SETUP_TIMEOUT_MS", "-1", 1); /* out of range (1..INT32_MAX): the default */
  unsetenv("SYMMCOLL_MULTIMEM");
  char* text = listing();
  CHECK(text != NULL);
  if (text == NULL) return harnessReport("test_params");
  CHECK(strstr(text, "SYMMCOLL_DISABLE") != NULL);
  CHECK(strstr(text, "SYMMCOLL_NCCL_LIB") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG ") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG_SUBSYS") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG_FILE") != NULL);
  /* The override shows as the current value. */
  char* line = strstr(text, "SYMMCOLL_DISABLE");
  CHECK(line != NULL && strstr(line, "= 1 ") != NULL);
  /* Multicast is opt-in: off by default, and the listing says so. */
  checkValue(text, "MULTIMEM", "0", "0");
  checkValue(text, "AR_MAX_BLOCKS", "64", "128");
  checkValue(text, "ALLREDUCE_ALGO", "oneshot", "auto");
  checkValue(text, "DEBUG", "WARN", "WARN");
  checkValue(text, "SETUP_TIMEOUT_MS", "30000", "30000");
  free(text);

  /* ncclResetDebugInit reads the logging knobs again and nothing else: what changes which
   * kernel runs keeps the value the process read first (its communicators agreed on it). */
  setenv("SYMMCOLL_AR_MAX_BLOCKS", "32", 1);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "lamport", 1);
  setenv("SYMMCOLL_DISABLE", "0", 1);
  setenv("SYMMCOLL_MULTIMEM", "1", 1);
  setenv("SYMMCOLL_DEBUG", "NONE", 1); /* quiet: the search for a real NCCL may warn */
  ncclResetDebugInit();
  text = listing();
  checkValue(text, "AR_MAX_BLOCKS", "64", NULL);
  checkValue(text, "ALLREDUCE_ALGO", "oneshot", NULL);
  checkValue(text, "DISABLE", "1", NULL);
  checkValue(text, "MULTIMEM", "0", NULL);
  checkValue(text, "DEBUG", "NONE", NULL);
  free(text);
  /* The version: the header's, the library's, and meson's project version agree. */
  int version = -1;
  CHECK_EQ_INT(symmcollGetVersion(&version), 0);
  CHECK_EQ_INT(version, SYMMCOLL_VERSION_CODE);
  CHECK_EQ_INT(symmcollGetVersion(NULL), 1);
  if (argc > 1) {
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", SYMMCOLL_VERSION_MAJOR, SYMMCOLL_VERSION_MINOR,
             SYMMCOLL_VERSION_PATCH);
    CHECK_EQ_STR(argv[1], expect);
  }
  return harnessReport("test_params");
}
