/* SPDX-License-Identifier: Apache-2.0 */
/* Compare mode: runs the binary itself twice as child processes (NCCL alone through
 * SYMMCOLL_DISABLE=1, then libsymmcoll), reads their CSV rows, prints speedups, plots. */
#define _GNU_SOURCE
#include "compare.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PERF_PLOT_SCRIPT
#define PERF_PLOT_SCRIPT ""
#endif
#ifndef PERF_PLOT_SCRIPT_SRC
#define PERF_PLOT_SCRIPT_SRC ""
#endif

/* Does argv[i] carry one of our options? Returns how many argv entries it spans (0: not ours). */
static int ownOption(int argc, char** argv, int i) {
  static const char* const longNames[] = {"--compare", "--csv", "--label"};
  const char* a = argv[i];
  if (strcmp(a, "-X") == 0) return i + 1 < argc ? 2 : 1;
  if (strncmp(a, "-X", 2) == 0) return 1; /* -Xprefix */
  for (size_t k = 0; k < sizeof(longNames) / sizeof(longNames[0]); k++) {
    size_t n = strlen(longNames[k]);
    if (strncmp(a, longNames[k], n) != 0) continue;
    if (a[n] == '\0') return i + 1 < argc ? 2 : 1;
    if (a[n] == '=') return 1;
  }
  return 0;
}

char** perfCompareChildArgs(int argc, char** argv, const char* csv, const char* label) {
  char** out = calloc((size_t)argc + 5, sizeof(char*));
  if (out == NULL) return NULL;
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (i > 0 && strcmp(argv[i], "--") == 0) { /* getopt stops here; so do we */
      for (; i < argc; i++) out[n++] = argv[i];
      break;
    }
    int skip = i > 0 ? ownOption(argc, argv, i) : 0;
    if (skip) {
      i += skip - 1;
      continue;
    }
    out[n++] = argv[i];
  }
  out[n++] = (char*)"--csv";
  out[n++] = (char*)csv;
  out[n++] = (char*)"--label";
  out[n++] = (char*)label;
  out[n] = NULL;
  return out;
}

/* Runs this executable with args; `disable` sets or clears SYMMCOLL_DISABLE in the child. */
static int runChild(char** args, int disable) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "compare: fork failed: %s\n", strerror(errno));
    return PERF_EXIT_FAILURE;
  }
  if (pid == 0) {
    if (disable)
      setenv("SYMMCOLL_DISABLE", "1", 1);
    else
      unsetenv("SYMMCOLL_DISABLE");
    execv("/proc/self/exe", args);
    fprintf(stderr, "compare: cannot re-execute %s: %s\n", args[0], strerror(errno));
    _exit(PERF_EXIT_FAILURE);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "compare: waitpid failed: %s\n", strerror(errno));
      return PERF_EXIT_FAILURE;
    }
  }
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "compare: child killed by signal %d\n", WTERMSIG(status));
    return PERF_EXIT_FAILURE;
  }
  return WEXITSTATUS(status);
}

/* Reads every data row of a CSV written by perfCsvRow. */
static struct perfResult* readCsv(const char* path, size_t* n) {
  *n = 0;
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  struct perfResult* rows = NULL;
  size_t cap = 0;
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    struct perfResult r;
    if (perfCsvParse(line, &r) != 0) continue; /* the header */
    if (*n == cap) {
      size_t newCap = cap ? 2 * cap : 64;
      struct perfResult* grown = realloc(rows, newCap * sizeof(*rows));
      if (grown == NULL) break;
      rows = grown;
      cap = newCap;
    }
    rows[(*n)++] = r;
  }
  fclose(f);
  return rows;
}

static const char* findPlotScript(void) {
  const char* env = getenv("SYMMCOLL_PERF_PLOT");
  if (env && *env) return env;
  if (PERF_PLOT_SCRIPT[0] && access(PERF_PLOT_SCRIPT, R_OK) == 0) return PERF_PLOT_SCRIPT;
  if (PERF_PLOT_SCRIPT_SRC[0] && access(PERF_PLOT_SCRIPT_SRC, R_OK) == 0) return PERF_PLOT_SCRIPT_SRC;
  return NULL;
}

static void plot(const char* csv, const char* png) {
  const char* script = findPlotScript();
  if (script == NULL) {
    printf("# plot: plot.py not found (set SYMMCOLL_PERF_PLOT); CSV written to %s\n", csv);
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return;
  if (pid == 0) {
    const char* python = getenv("SYMMCOLL_PERF_PYTHON");
    if (python == NULL || *python == '\0') python = "python3";
    execlp(python, python, script, "--out", png, csv, (char*)NULL);
    fprintf(stderr, "# plot: cannot run %s (%s); CSV written to %s\n", python, strerror(errno), csv);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    printf("# plot: %s\n", png);
  else
    printf("# plot: no PNG (see the message above); CSV written to %s\n", csv);
}

int perfCompareMain(const struct perfColl* coll, const struct perfOptions* opt, int argc, char** argv) {
  static const struct {
    const char* label;
    const char* title;
    int disable;
  } runs[2] = {{"nccl", "NCCL alone (SYMMCOLL_DISABLE=1)", 1}, {"libsymmcoll", "libsymmcoll", 0}};
  const char* prefix = opt->compareOut;
  int rc = 0;
  char* csvPaths[2] = {NULL, NULL};
  char *combined = NULL, *png = NULL;
  struct perfResult* rows[2] = {NULL, NULL};
  size_t nRows[2] = {0, 0};
  if (asprintf(&csvPaths[0], "%s.nccl.csv", prefix) < 0 || asprintf(&csvPaths[1], "%s.symmcoll.csv", prefix) < 0 ||
      asprintf(&combined, "%s.csv", prefix) < 0 || asprintf(&png, "%s.png", prefix) < 0) {
    rc = PERF_EXIT_FAILURE;
    goto free_paths;
  }
  for (int k = 0; k < 2; k++) {
    char** args = perfCompareChildArgs(argc, argv, csvPaths[k], runs[k].label);
    if (args == NULL) {
      rc = PERF_EXIT_FAILURE;
      goto free_paths;
    }
    printf("# ===== compare run %d/2: %s =====\n", k + 1, runs[k].title);
    remove(csvPaths[k]);
    int childRc = runChild(args, runs[k].disable);
    free(args);
    if (childRc != 0) {
      fprintf(stderr, "compare: the %s run failed (exit %d)\n", runs[k].label, childRc);
      if (rc == 0) rc = childRc;
    }
    rows[k] = readCsv(csvPaths[k], &nRows[k]);
  }
  if (nRows[1] == 0) {
    fprintf(stderr, "compare: no results from the libsymmcoll run\n");
    if (rc == 0) rc = PERF_EXIT_FAILURE;
    goto free_rows;
  }
  perfPrintCompare(stdout, rows[0], nRows[0], rows[1], nRows[1]);

  FILE* f = fopen(combined, "w");
  if (f == NULL) {
    fprintf(stderr, "compare: cannot write %s: %s\n", combined, strerror(errno));
    if (rc == 0) rc = PERF_EXIT_FAILURE;
    goto free_rows;
  }
  perfCsvHeader(f);
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < nRows[k]; i++) perfCsvRow(f, &rows[k][i]);
  fclose(f);
  printf("# %s results: %s\n", coll->name, combined);
  plot(combined, png);

free_rows:
  free(rows[0]);
  free(rows[1]);
free_paths:
  free(csvPaths[0]);
  free(csvPaths[1]);
  free(combined);
  free(png);
  return rc;
}
