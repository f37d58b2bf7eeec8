/* SPDX-License-Identifier: Apache-2.0 */
/* Compare mode: runs the binary itself as child processes, NCCL alone (SYMMCOLL_DISABLE=1) and
 * libsymmcoll, in pairs whose order alternates (the first run of a pair is slower at host-bound
 * sizes), reads their CSV rows, takes per-size medians, prints speedups, plots. */
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
  static const char* const longNames[] = {"--compare", "--compare_reps", "--csv", "--label"};
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

static int sameCase(const struct perfResult* a, const struct perfResult* b) {
  return a->bytes == b->bytes && strcmp(a->type, b->type) == 0 && strcmp(a->op, b->op) == 0 &&
         strcmp(a->coll, b->coll) == 0;
}

static int cmpDouble(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

/* Folds the repetitions of one library into reps[0]: per case and placement the median time
 * (bandwidths scaled to it), and every wrong count added up. The cases are those of the first
 * run; a case missing from a later run has that many fewer samples. */
static void medianOfReps(struct perfResult** reps, const size_t* nReps, int nrep) {
  double t[2][99];
  for (size_t i = 0; i < nReps[0]; i++) {
    struct perfResult* out = &reps[0][i];
    int have[2] = {0, 0};
    int64_t wrong[2] = {out->wrong[0], out->wrong[1]};
    for (int p = 0; p < 2; p++) t[p][have[p]++] = out->usec[p];
    for (int k = 1; k < nrep; k++) {
      for (size_t j = 0; j < nReps[k]; j++) {
        const struct perfResult* r = &reps[k][j];
        if (!sameCase(out, r)) continue;
        for (int p = 0; p < 2; p++) {
          t[p][have[p]++] = r->usec[p];
          if (r->wrong[p] > 0) wrong[p] = (wrong[p] > 0 ? wrong[p] : 0) + r->wrong[p];
        }
        break;
      }
    }
    for (int p = 0; p < 2; p++) {
      qsort(t[p], (size_t)have[p], sizeof(double), cmpDouble);
      const double med = have[p] % 2 ? t[p][have[p] / 2] : 0.5 * (t[p][have[p] / 2 - 1] + t[p][have[p] / 2]);
      if (med > 0 && out->usec[p] > 0) {
        out->algBw[p] *= out->usec[p] / med;
        out->busBw[p] *= out->usec[p] / med;
      }
      out->usec[p] = med;
      out->wrong[p] = wrong[p];
    }
  }
}

int perfCompareMain(const struct perfColl* coll, const struct perfOptions* opt, int argc, char** argv) {
  static const struct {
    const char* label;
    const char* title;
    const char* file;
    int disable;
  } libs[2] = {{"nccl", "NCCL alone (SYMMCOLL_DISABLE=1)", "nccl", 1},
               {"libsymmcoll", "libsymmcoll", "symmcoll", 0}};
  const char* prefix = opt->compareOut;
  const int nrep = opt->compareReps >= 1 && opt->compareReps <= 99 ? opt->compareReps : 2;
  int rc = 0;
  char *combined = NULL, *png = NULL;
  struct perfResult* rows[2][99];
  size_t nRows[2][99];
  memset(rows, 0, sizeof(rows));
  memset(nRows, 0, sizeof(nRows));
  if (asprintf(&combined, "%s.csv", prefix) < 0 || asprintf(&png, "%s.png", prefix) < 0) {
    rc = PERF_EXIT_FAILURE;
    goto free_rows;
  }
  for (int rep = 0; rep < nrep; rep++) {
    for (int step = 0; step < 2; step++) {
      const int k = rep % 2 == 0 ? step : 1 - step; /* NCCL first, then last, then first... */
      char* csv = NULL;
      if (asprintf(&csv, "%s.%s.%d.csv", prefix, libs[k].file, rep + 1) < 0) {
        rc = PERF_EXIT_FAILURE;
        goto free_rows;
      }
      char** args = perfCompareChildArgs(argc, argv, csv, libs[k].label);
      if (args == NULL) {
        free(csv);
        rc = PERF_EXIT_FAILURE;
        goto free_rows;
      }
      printf("# ===== compare run %d/%d: %s =====\n", 2 * rep + step + 1, 2 * nrep, libs[k].title);
      remove(csv);
      int childRc = runChild(args, libs[k].disable);
      free(args);
      if (childRc != 0) {
        fprintf(stderr, "compare: the %s run failed (exit %d)\n", libs[k].label, childRc);
        if (rc == 0) rc = childRc;
      }
      rows[k][rep] = readCsv(csv, &nRows[k][rep]);
      free(csv);
    }
  }
  if (nRows[1][0] == 0) {
    fprintf(stderr, "compare: no results from the libsymmcoll run\n");
    if (rc == 0) rc = PERF_EXIT_FAILURE;
    goto free_rows;
  }
  for (int k = 0; k < 2; k++) medianOfReps(rows[k], nRows[k], nrep);
  if (nrep > 1)
    printf("# medians of %d runs per library, order alternating (per-run CSVs: %s.<lib>.<run>.csv)\n",
           nrep, prefix);
  perfPrintCompare(stdout, rows[0][0], nRows[0][0], rows[1][0], nRows[1][0]);

  FILE* f = fopen(combined, "w");
  if (f == NULL) {
    fprintf(stderr, "compare: cannot write %s: %s\n", combined, strerror(errno));
    if (rc == 0) rc = PERF_EXIT_FAILURE;
    goto free_rows;
  }
  perfCsvHeader(f);
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < nRows[k][0]; i++) perfCsvRow(f, &rows[k][0][i]);
  fclose(f);
  printf("# %s results: %s\n", coll->name, combined);
  plot(combined, png);

free_rows:
  for (int k = 0; k < 2; k++)
    for (int rep = 0; rep < nrep; rep++) free(rows[k][rep]);
  free(combined);
  free(png);
  return rc;
}
