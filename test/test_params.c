/* SPDX-License-Identifier: Apache-2.0 */
/* Parameters and logging parse as documented: defaults, overrides, bad values, the listing. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "harness.h"
#include "symmcoll.h"

int main(int argc, char** argv) {
  /* The listing names every knob with its default. */
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  setenv("SYMMCOLL_DISABLE", "1", 1);
  symmcollPrintParams(mem);
  fclose(mem);
  CHECK(strstr(text, "SYMMCOLL_DISABLE") != NULL);
  CHECK(strstr(text, "SYMMCOLL_NCCL_LIB") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG ") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG_SUBSYS") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DEBUG_FILE") != NULL);
  /* The override shows as the current value. */
  char* line = strstr(text, "SYMMCOLL_DISABLE");
  CHECK(line != NULL && strstr(line, "= 1 ") != NULL);
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
