/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs and logging parse as documented: SYMMCOLL_DEBUG levels, SYMMCOLL_DEBUG_SUBSYS lists and
 * ^exclusions, SYMMCOLL_DEBUG_FILE with %h/%p, invalid integers, and the listing of all knobs.
 * White-box: links the internal library and drives WARN/INFO/TRACE directly. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "debug.h"
#include "forward.h"
#include "harness.h"
#include "param.h"
#include "symmcoll.h"

/* A knob declared here lands in the same list as the library's own. */
SYMMCOLL_PARAM(TestKnob, "TEST_KNOB", 42, "test only: an integer knob")

extern struct symmParam* __start_symmcoll_params[] __attribute__((visibility("hidden")));
extern struct symmParam* __stop_symmcoll_params[] __attribute__((visibility("hidden")));

static char logPath[256];

/* Sets the logging knobs (NULL: unset), re-reads them and empties the log file. */
static void configure(const char* level, const char* subsys) {
  if (level) setenv("SYMMCOLL_DEBUG", level, 1);
  else unsetenv("SYMMCOLL_DEBUG");
  if (subsys) setenv("SYMMCOLL_DEBUG_SUBSYS", subsys, 1);
  else unsetenv("SYMMCOLL_DEBUG_SUBSYS");
  setenv("SYMMCOLL_DEBUG_FILE", logPath, 1);
  unlink(logPath);
  symmParamResetAll();
  symmLogReset();
}

/* The log file's content (caller frees). */
static char* readLog(void) {
  FILE* f = fopen(logPath, "r");
  if (f == NULL) return strdup("");
  char* text = calloc(1, 1 << 16);
  size_t n = text ? fread(text, 1, (1 << 16) - 1, f) : 0;
  (void)n;
  fclose(f);
  return text ? text : strdup("");
}

static int countLines(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* One message per level and subsystem of interest. */
static void emitAll(void) {
  WARN("msg-warn");
  INFO(SYMM_INIT, "msg-info-init");
  INFO(SYMM_COLL, "msg-info-coll");
  INFO(SYMM_TUNER, "msg-info-tuner");
  TRACE(SYMM_INIT, "msg-trace-init");
  TRACE(SYMM_TRANSPORT, "msg-trace-transport");
}

struct expect {
  const char *level, *subsys;
  int warn, infoInit, infoColl, infoTuner, traceInit, traceTransport;
};

static void checkFilter(const struct expect* e) {
  configure(e->level, e->subsys);
  emitAll();
  char* text = readLog();
  const char* what = e->level ? e->level : "(unset)";
  int got[6] = {countLines(text, "msg-warn"), countLines(text, "msg-info-init"),
                countLines(text, "msg-info-coll"), countLines(text, "msg-info-tuner"),
                countLines(text, "msg-trace-init"), countLines(text, "msg-trace-transport")};
  int want[6] = {e->warn, e->infoInit, e->infoColl, e->infoTuner, e->traceInit, e->traceTransport};
  for (int i = 0; i < 6; i++) {
    if (got[i] != want[i])
      fprintf(stderr, "SYMMCOLL_DEBUG=%s SYMMCOLL_DEBUG_SUBSYS=%s: message %d logged %d times, want %d\n",
              what, e->subsys ? e->subsys : "(unset)", i, got[i], want[i]);
    CHECK_EQ_INT(got[i], want[i]);
  }
  free(text);
}

static void checkLevelsAndSubsystems(void) {
  static const struct expect cases[] = {
      {NULL, NULL, 1, 0, 0, 0, 0, 0},          /* silent by default except warnings */
      {"WARN", NULL, 1, 0, 0, 0, 0, 0},
      {"NONE", NULL, 0, 0, 0, 0, 0, 0},
      {"INFO", NULL, 1, 1, 1, 1, 0, 0},
      {"info", NULL, 1, 1, 1, 1, 0, 0},        /* case does not matter */
      {"TRACE", NULL, 1, 1, 1, 1, 1, 1},
      {"bogus", NULL, 1, 0, 0, 0, 0, 0},       /* unknown level: WARN */
      {"INFO", "INIT", 1, 1, 0, 0, 0, 0},
      {"INFO", "init,COLL", 1, 1, 1, 0, 0, 0},
      {"INFO", "^INIT", 1, 0, 1, 1, 0, 0},
      {"TRACE", "^INIT,TUNER", 1, 0, 1, 0, 0, 1},
      {"TRACE", "ALL", 1, 1, 1, 1, 1, 1},
      {"TRACE", "TRANSPORT", 1, 0, 0, 0, 0, 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) checkFilter(&cases[i]);
}

/* Lines look like NCCL's: "host:pid:tid SYMMCOLL LEVEL [file:line ]message". */
static void checkLineFormat(void) {
  configure("INFO", NULL);
  WARN("format-warn %d", 7);
  INFO(SYMM_INIT, "format-info %s", "x");
  char* text = readLog();
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char prefix[128];
  snprintf(prefix, sizeof(prefix), "%s:%d:", host, (int)getpid());
  CHECK(strncmp(text, prefix, strlen(prefix)) == 0);
  CHECK(strstr(text, " SYMMCOLL WARN test_logging.c:") != NULL);
  CHECK(strstr(text, "format-warn 7\n") != NULL);
  CHECK(strstr(text, " SYMMCOLL INFO format-info x\n") != NULL);
  free(text);
}

/* %h and %p expand to the host name and pid; without a file, lines go to stdout. */
static void checkFileAndStdout(void) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char* dot = strchr(host, '.');
  if (dot) *dot = '\0';
  char expanded[512];
  snprintf(expanded, sizeof(expanded), "%s/symmcoll-log-%s-%d.txt", P_tmpdir, host, (int)getpid());
  unlink(expanded);
  setenv("SYMMCOLL_DEBUG_FILE", P_tmpdir "/symmcoll-log-%h-%p.txt", 1);
  setenv("SYMMCOLL_DEBUG", "WARN", 1);
  symmParamResetAll();
  symmLogReset();
  WARN("pattern-file");
  FILE* f = fopen(expanded, "r");
  CHECK(f != NULL);
  if (f != NULL) {
    char line[1024] = {0};
    CHECK(fgets(line, sizeof(line), f) != NULL && strstr(line, "pattern-file") != NULL);
    fclose(f);
  }
  unlink(expanded);

  /* stdout: point fd 1 at a temporary file for the duration. */
  char outPath[] = P_tmpdir "/symmcoll-stdout-XXXXXX";
  int tmp = mkstemp(outPath);
  CHECK(tmp >= 0);
  if (tmp < 0) return;
  fflush(stdout);
  int saved = dup(1);
  dup2(tmp, 1);
  unsetenv("SYMMCOLL_DEBUG_FILE");
  symmParamResetAll();
  symmLogReset();
  WARN("to-stdout");
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  char buf[1024] = {0};
  ssize_t n = pread(tmp, buf, sizeof(buf) - 1, 0);
  CHECK(n > 0 && strstr(buf, "to-stdout") != NULL);
  close(tmp);
  unlink(outPath);
}

/* Integers: decimal or 0x hex, with an optional binary K/M/G/T suffix; anything else warns
 * once and keeps the default. */
static void checkIntegers(void) {
  static const struct {
    const char* value;
    long long want;
    int warns;
  } cases[] = {{NULL, 42, 0}, {"", 42, 0},     {"7", 7, 0},     {"-3", -3, 0},      {"0x10", 16, 0},
               {"abc", 42, 1}, {"12abc", 42, 1}, {" 5x", 42, 1}, {"99999999999999999999", 42, 1},
               {"2K", 2048, 0}, {"1g", 1ll << 30, 0}, {"3KiB", 3072, 0}, {"8Mx", 42, 1},
               {"9999999999T", 42, 1}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    configure("WARN", NULL);
    if (cases[i].value) setenv("SYMMCOLL_TEST_KNOB", cases[i].value, 1);
    else unsetenv("SYMMCOLL_TEST_KNOB");
    symmParamResetAll();
    CHECK_EQ_INT(symmParamTestKnob(), cases[i].want);
    CHECK_EQ_INT(symmParamTestKnob(), cases[i].want); /* cached: no second warning */
    char* text = readLog();
    int warns = countLines(text, "invalid value");
    if (warns != cases[i].warns) fprintf(stderr, "SYMMCOLL_TEST_KNOB='%s': %d warnings\n", cases[i].value, warns);
    CHECK_EQ_INT(warns, cases[i].warns);
    if (cases[i].warns) CHECK(strstr(text, "SYMMCOLL_TEST_KNOB") != NULL && strstr(text, "default 42") != NULL);
    free(text);
  }
  unsetenv("SYMMCOLL_TEST_KNOB");

  /* The library's own switch behaves the same, and logging an accepted value does not deadlock. */
  configure("INFO", NULL);
  setenv("SYMMCOLL_DISABLE", "yes", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmDisabled(), 0);
  setenv("SYMMCOLL_DISABLE", "1", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmDisabled(), 1);
  char* text = readLog();
  CHECK(strstr(text, "invalid value 'yes' for SYMMCOLL_DISABLE") != NULL);
  CHECK(strstr(text, "SYMMCOLL_DISABLE set to 1") != NULL);
  free(text);
  unsetenv("SYMMCOLL_DISABLE");
  symmParamResetAll();
}

/* Every SYMMCOLL_* variable is checked at the first read of any knob: unknown names (with a
 * suggestion), sizes with suffixes, values outside a knob's range; NCCL_DEBUG stands in for an
 * unset SYMMCOLL_DEBUG, and an unknown level or subsystem name warns without muting warnings. */
static void checkValidation(void) {
  unlink(logPath);
  setenv("SYMMCOLL_DEBUG_FILE", logPath, 1);
  setenv("SYMMCOLL_DEBUG", "INFO", 1);
  setenv("SYMMCOLL_DEBUG_SUBSYS", "ENV", 1);
  setenv("SYMMCOLL_DISABLEE", "1", 1);
  setenv("SYMMCOLL_NOT_A_KNOB_AT_ALL", "1", 1);
  setenv("SYMMCOLL_TEST_ANYTHING", "1", 1);
  setenv("SYMMCOLL_TEST_KNOB", "3M", 1);
  symmParamResetAll();
  symmLogReset();
  CHECK_EQ_INT(symmParamTestKnob(), 3 << 20);
  char* text = readLog();
  CHECK(strstr(text, "SYMMCOLL_DISABLEE is not a libsymmcoll knob (did you mean SYMMCOLL_DISABLE?)") != NULL);
  CHECK(strstr(text, "SYMMCOLL_NOT_A_KNOB_AT_ALL is not a libsymmcoll knob; ignored") != NULL);
  CHECK(strstr(text, "SYMMCOLL_TEST_ANYTHING") == NULL); /* the tests' own namespace */
  free(text);
  unsetenv("SYMMCOLL_DISABLEE");
  unsetenv("SYMMCOLL_NOT_A_KNOB_AT_ALL");
  unsetenv("SYMMCOLL_TEST_ANYTHING");
  unsetenv("SYMMCOLL_TEST_KNOB");

  /* NCCL_DEBUG drives our level when SYMMCOLL_DEBUG is unset. */
  unlink(logPath);
  unsetenv("SYMMCOLL_DEBUG");
  unsetenv("SYMMCOLL_DEBUG_SUBSYS");
  setenv("NCCL_DEBUG", "INFO", 1);
  symmParamResetAll();
  symmLogReset();
  CHECK_EQ_INT(symmLogLevel(), SYMM_LOG_INFO);
  unsetenv("NCCL_DEBUG");
  /* An unknown level warns (and means WARN); an unknown subsystem warns and mutes nothing. */
  setenv("SYMMCOLL_DEBUG", "LOUD", 1);
  setenv("SYMMCOLL_DEBUG_SUBSYS", "NOPE", 1);
  symmParamResetAll();
  symmLogReset();
  CHECK_EQ_INT(symmLogLevel(), SYMM_LOG_WARN);
  WARN("a warning still shows");
  text = readLog();
  CHECK(strstr(text, "SYMMCOLL_DEBUG=LOUD is not one of") != NULL);
  CHECK(strstr(text, "a warning still shows") != NULL);
  free(text);
  unsetenv("SYMMCOLL_DEBUG");
  unsetenv("SYMMCOLL_DEBUG_SUBSYS");
  symmParamResetAll();
  symmLogReset();
}

/* The listing names every knob of the section once, with its help text. */
static void checkListing(void) {
  setenv("SYMMCOLL_TEST_KNOB", "9", 1);
  symmParamResetAll();
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  symmcollPrintParams(mem);
  fclose(mem);
  int knobs = 0, testKnobs = 0;
  for (struct symmParam** p = __start_symmcoll_params; p < __stop_symmcoll_params; p++)
    ((*p)->flags & SYMM_PARAM_TEST) ? testKnobs++ : knobs++;
  CHECK(knobs >= 6);
  CHECK(testKnobs >= 1);
  CHECK_EQ_INT(countLines(text, "\n"), knobs);
  for (struct symmParam** p = __start_symmcoll_params; p < __stop_symmcoll_params; p++) {
    char name[128];
    snprintf(name, sizeof(name), "SYMMCOLL_%s ", (*p)->name);
    /* Test-only knobs are not shown to users. */
    CHECK_EQ_INT(countLines(text, name), ((*p)->flags & SYMM_PARAM_TEST) ? 0 : 1);
    if (!((*p)->flags & SYMM_PARAM_TEST))
      CHECK((*p)->help != NULL && (*p)->help[0] != '\0' && strstr(text, (*p)->help) != NULL);
  }
  const char* line = strstr(text, "SYMMCOLL_TEST_KNOB ");
  CHECK(line != NULL && strstr(line, "= 9 ") != NULL && strstr(line, "(default 42)") != NULL);
  printf("symmcollPrintParams lists %d knobs:\n%s", knobs, text);
  free(text);
  unsetenv("SYMMCOLL_TEST_KNOB");
}

int main(void) {
  snprintf(logPath, sizeof(logPath), "%s/symmcoll-test-logging.%d.log", P_tmpdir, (int)getpid());
  checkLevelsAndSubsystems();
  checkLineFormat();
  checkIntegers();
  checkFileAndStdout();
  checkValidation();
  checkListing();
  unlink(logPath);
  unsetenv("SYMMCOLL_DEBUG_FILE");
  symmLogReset();
  return harnessReport("test_logging");
}
