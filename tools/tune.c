/* SPDX-License-Identifier: Apache-2.0 */
/* symmcoll-tune: measures every algorithm of ours against NCCL on this machine with the perf
 * binaries (CUDA graphs, data check on, order alternating, medians) and writes a tuning file
 * (src/tuner/README.md) that picks ours only where it beats NCCL by a margin. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "tune.h"

struct tuneOptions {
  int nranks, reps, multimem, dryRun;
  int registrations[2], nregs; /* -R: 0 (plain buffers), 2 (symmetric windows), or both */
  double margin;
  const char* machineLine; /* --machine: instead of probing (tests) */
  const char *out, *perfDir, *minBytes, *maxBytes, *factor, *iters, *warmup, *graph;
  int colls[SYMM_NCOLLS], ncolls;
  int types[PERF_NUM_TYPES], ntypes;
};

static const char* const perfBinaries[SYMM_NCOLLS] = {"all_reduce_perf", "all_gather_perf",
                                                      "reduce_scatter_perf"};
static const char* const algoEnv[SYMM_NCOLLS] = {
    "SYMMCOLL_ALLREDUCE_ALGO", "SYMMCOLL_ALLGATHER_ALGO", "SYMMCOLL_REDUCESCATTER_ALGO"};

static void usage(FILE* f) {
  fprintf(f,
          "usage: symmcoll-tune -o FILE [-P ranks] [--colls allreduce,allgather,reducescatter]\n"
          "         [-d bfloat16,float] [-b 8] [-e 1G] [-f 2] [-n 20] [-w 5] [-G 20] [--reps 3]\n"
          "         [--margin 0.03] [-R 0|2|0,2] [--multimem] [--perf-dir DIR] [--dry-run]\n"
          "         [--machine 'gpu=... arch=... link=... gpus=... driver=... nccl=...']\n"
          "Runs <perf-dir>/{all_reduce,all_gather,reduce_scatter}_perf -P ranks for NCCL alone\n"
          "(SYMMCOLL_DISABLE=1) and for each algorithm of ours (forced), --reps times each in\n"
          "alternating order, and writes FILE for SYMMCOLL_TUNING_FILE. Child output: FILE.log.\n"
          "-R 0,2 measures plain buffers and symmetric windows in one run (rows reg=0, reg=1);\n"
          "with windows also ncclplain (NCCL given the windows' aliases, forced).\n"
          "--machine writes that fingerprint instead of this machine's (tests).\n");
}

/* On a copy: the command line is printed into the file as it was given. */
static int parseList(const char* text, int* out, int max, int (*parse)(const char*)) {
  char* copy = strdup(text);
  if (copy == NULL) return -1;
  int n = 0;
  char* save = NULL;
  for (char* tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    const int v = parse(tok);
    if (v < 0 || n == max) {
      n = -1;
      break;
    }
    out[n++] = v;
  }
  free(copy);
  return n;
}

static int registrationFromText(const char* text) {
  return strcmp(text, "0") == 0 ? 0 : strcmp(text, "2") == 0 ? 2 : -1;
}

static int collFromName(const char* name) {
  for (int c = 0; c < SYMM_NCOLLS; c++)
    if (strcmp(name, symmCollName((enum symmColl)c)) == 0) return c;
  return -1;
}

static int typeFromName(const char* name) {
  const int t = perfTypeFromName(name);
  return t == PERF_ALL ? -1 : t;
}

static int parseOptions(int argc, char** argv, struct tuneOptions* o) {
  static const struct option longs[] = {
      {"colls", 1, NULL, 'c'},    {"reps", 1, NULL, 'r'},     {"margin", 1, NULL, 'm'},
      {"multimem", 0, NULL, 'M'}, {"perf-dir", 1, NULL, 'p'}, {"dry-run", 0, NULL, 'D'},
      {"machine", 1, NULL, 'X'},  {"help", 0, NULL, 'h'},     {NULL, 0, NULL, 0}};
  *o = (struct tuneOptions){.reps = 3,
                            .margin = 0.03,
                            .minBytes = "8",
                            .maxBytes = "1G",
                            .factor = "2",
                            .iters = "20",
                            .warmup = "5",
                            .graph = "20",
                            .ncolls = SYMM_NCOLLS,
                            .ntypes = 2,
                            .nregs = 1};
  for (int c = 0; c < SYMM_NCOLLS; c++) o->colls[c] = c;
  o->types[0] = PERF_BF16;
  o->types[1] = PERF_FLOAT;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "o:P:d:b:e:f:n:w:G:R:h", longs, NULL)) != -1) {
    char* end = NULL;
    switch (ch) {
      case 'o': o->out = optarg; break;
      case 'P': o->nranks = (int)strtol(optarg, &end, 10); break;
      case 'c': o->ncolls = parseList(optarg, o->colls, SYMM_NCOLLS, collFromName); break;
      case 'd': o->ntypes = parseList(optarg, o->types, PERF_NUM_TYPES, typeFromName); break;
      case 'b': o->minBytes = optarg; break;
      case 'e': o->maxBytes = optarg; break;
      case 'f': o->factor = optarg; break;
      case 'n': o->iters = optarg; break;
      case 'w': o->warmup = optarg; break;
      case 'G': o->graph = optarg; break;
      case 'R': o->nregs = parseList(optarg, o->registrations, 2, registrationFromText); break;
      case 'r': o->reps = (int)strtol(optarg, &end, 10); break;
      case 'm': o->margin = strtod(optarg, &end); break;
      case 'M': o->multimem = 1; break;
      case 'p': o->perfDir = optarg; break;
      case 'D': o->dryRun = 1; break;
      case 'X': o->machineLine = optarg; break;
      case 'h': usage(stdout); return 1;
      default: usage(stderr); return -1;
    }
    if (end != NULL && *end != '\0') {
      fprintf(stderr, "symmcoll-tune: bad number '%s'\n", optarg);
      return -1;
    }
  }
  if (o->out == NULL || optind != argc || o->ncolls <= 0 || o->ntypes <= 0 || o->reps < 1 ||
      o->reps > 99 || o->margin < 0 || o->margin >= 1 || o->nregs <= 0 ||
      (o->nregs == 2 && o->registrations[0] == o->registrations[1])) {
    usage(stderr);
    return -1;
  }
  return 0;
}

/* ---- running the perf binaries -------------------------------------------------------------- */

struct run {
  const char* binary;
  const char* csv;
  const char* log;
  enum symmColl coll;
  enum symmAlgo algo; /* NCCL: SYMMCOLL_DISABLE=1 */
  const char* forwardFile;
  char* argv[40];
};

static int runChild(const struct run* r, int dryRun) {
  if (r->algo == SYMM_ALGO_NCCL)
    printf("#   SYMMCOLL_DISABLE=1 %s", r->binary);
  else
    printf("#   %s=%s SYMMCOLL_TUNING_FILE=%s %s", algoEnv[r->coll], symmAlgoName(r->algo),
           r->forwardFile, r->binary);
  for (int i = 1; r->argv[i]; i++) printf(" %s", r->argv[i]);
  printf("\n");
  fflush(stdout);
  if (dryRun) return 0;
  remove(r->csv);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    if (r->algo == SYMM_ALGO_NCCL) {
      setenv("SYMMCOLL_DISABLE", "1", 1);
    } else {
      unsetenv("SYMMCOLL_DISABLE");
      setenv(algoEnv[r->coll], symmAlgoName(r->algo), 1);
      /* Where the forced algorithm cannot run a call, the table decides: make that NCCL, so
       * that such sizes time NCCL and never look like a win of ours. */
      setenv("SYMMCOLL_TUNING_FILE", r->forwardFile, 1);
    }
    execv(r->binary, r->argv);
    fprintf(stderr, "symmcoll-tune: cannot run %s: %s\n", r->binary, strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Adds each out-of-place time of the CSV to samples[size index][rep]. */
static void readTimes(const char* csv, const size_t* sizes, size_t n, double* samples, int reps,
                      int rep) {
  FILE* f = fopen(csv, "r");
  if (f == NULL) return;
  char line[1024];
  struct perfResult r;
  while (fgets(line, sizeof(line), f))
    if (perfCsvParse(line, &r) == 0 && r.wrong[0] <= 0 && r.usec[0] > 0)
      for (size_t i = 0; i < n; i++)
        if (sizes[i] == r.bytes) samples[i * (size_t)reps + (size_t)rep] = r.usec[0];
  fclose(f);
}

/* The sweep's -b, -e and -f as numbers; 0 when one of them does not parse (or -f < 2). */
static int sweepBounds(const struct tuneOptions* o, size_t* lo, size_t* hi, size_t* factor) {
  *factor = (size_t)strtoull(o->factor, NULL, 10);
  return perfParseSize(o->minBytes, lo) == 0 && perfParseSize(o->maxBytes, hi) == 0 && *factor >= 2;
}

/* The largest sweep size (before nccl-tests rounds them to whole elements) of -b lo -e hi -f
 * factor up to which `algo` fits (SYMM_ALGO_NCCL: every size). 0 when it fits none. */
static size_t largestFittingIn(size_t lo, size_t hi, size_t factor, int nranks,
                               enum symmColl coll, enum symmAlgo algo) {
  size_t best = 0;
  for (size_t s = lo; s > 0 && s <= hi; s = s > hi / factor ? 0 : s * factor)
    if (algo == SYMM_ALGO_NCCL || symmAlgoFits(coll, algo, s, nranks, (size_t)1 << 40)) best = s;
  return best;
}

/* The same for the options' sweep: the forced sweep of an algorithm stops there. */
static size_t largestFitting(const struct tuneOptions* o, enum symmColl coll, enum symmAlgo algo) {
  size_t lo = 0, hi = 0, factor = 0;
  if (!sweepBounds(o, &lo, &hi, &factor)) return 0;
  return largestFittingIn(lo, hi, factor, o->nranks, coll, algo);
}

/* When -b x -f^k never lands on -e, the file's rows end at the largest size below it and larger
 * calls forward: the line that says so (and names a -b that reaches -e) goes into `note`, for
 * the console and the file; empty when the sweep lands on -e. */
static void sweepTopNote(const struct tuneOptions* o, char* note, size_t noteBytes) {
  note[0] = '\0';
  size_t lo = 0, hi = 0, factor = 0;
  if (!sweepBounds(o, &lo, &hi, &factor)) return;
  const size_t top = largestFittingIn(lo, hi, factor, o->nranks, SYMM_COLL_ALLREDUCE, SYMM_ALGO_NCCL);
  if (top == 0 || top == hi) return;
  char topText[32], hiText[32], reach[64] = "";
  symmTuneFormatSize(top, topText, sizeof(topText));
  symmTuneFormatSize(hi, hiText, sizeof(hiText));
  size_t b = hi; /* the smallest -b, not below the one given, from which -f steps land on -e */
  while (b % factor == 0 && b / factor >= lo) b /= factor;
  if (b != hi) {
    char bText[32];
    symmTuneFormatSize(b, bText, sizeof(bText));
    snprintf(reach, sizeof(reach), "; -b %s reaches -e", bText);
  }
  snprintf(note, noteBytes,
           "# the sweep's largest size is %s (-b %s -f %s), below -e %s: rows end there and "
           "larger calls forward to NCCL%s\n",
           topText, o->minBytes, o->factor, hiText, reach);
}

static int cmpSize(const void* x, const void* y) {
  const size_t a = *(const size_t*)x, b = *(const size_t*)y;
  return a < b ? -1 : a > b;
}

/* The sizes NCCL's CSV reports, ascending. */
static size_t csvSizes(const char* csv, size_t* sizes, size_t cap) {
  FILE* f = fopen(csv, "r");
  if (f == NULL) return 0;
  char line[1024];
  struct perfResult r;
  size_t n = 0;
  while (n < cap && fgets(line, sizeof(line), f))
    if (perfCsvParse(line, &r) == 0) sizes[n++] = r.bytes;
  fclose(f);
  qsort(sizes, n, sizeof(size_t), cmpSize);
  return n;
}

#define MAX_SIZES 64

/* Measures one collective and element type, on plain buffers or in symmetric windows
 * (`registration` 0 or 2, perf's -R); appends the row (with its evidence as comments) to `rows`.
 * Returns 0, or -1 when NCCL's sweep gave nothing. */
static int tuneOne(const struct tuneOptions* o, const struct symmTuneMachine* m, enum symmColl coll,
                   int type, int registration, const char* tmp, const char* forwardFile,
                   const char* logPath, FILE* rows) {
  const ncclDataType_t dt = (ncclDataType_t)type; /* perf's type list follows NCCL's order */
  enum symmAlgo configs[SYMM_NALGOS];
  size_t emax[SYMM_NALGOS];
  int nconf = 0;
  configs[nconf++] = SYMM_ALGO_NCCL;
  for (int a = SYMM_ALGO_NCCL + 1; a < SYMM_NALGOS; a++) {
    if (!symmTuneCollHasAlgo(coll, (enum symmAlgo)a) || (a == SYMM_ALGO_MULTIMEM && !o->multimem))
      continue;
    /* The real NCCL given the windows' aliases: its plain path on windowed buffers, against its
     * symmetric kernels (NCCL -R 2). On plain buffers it is NCCL itself: not measured. */
    if (a == SYMM_ALGO_NCCLPLAIN) {
      if (!registration) continue;
      emax[nconf] = largestFitting(o, coll, SYMM_ALGO_NCCL);
      if (emax[nconf] > 0) configs[nconf++] = SYMM_ALGO_NCCLPLAIN;
      continue;
    }
    emax[nconf] = largestFitting(o, coll, (enum symmAlgo)a);
    if (!symmAlgoExists(coll, (enum symmAlgo)a, dt, ncclSum) || emax[nconf] == 0) {
      printf("# %s %s: %s has no kernel for this type or fits no size: not measured\n",
             symmCollName(coll), perfTypeName(type), symmAlgoName((enum symmAlgo)a));
      continue;
    }
    configs[nconf++] = (enum symmAlgo)a;
  }
  if (nconf == 1) {
    fprintf(rows, "\n# %s, %s: no algorithm of ours to measure: no row\n", symmCollName(coll),
            perfTypeName(type));
    printf("# %s %s: nothing of ours to measure, skipped\n", symmCollName(coll),
           perfTypeName(type));
    return 0;
  }
  size_t sizes[MAX_SIZES], n = 0;
  double* samples = calloc((size_t)SYMM_NALGOS * MAX_SIZES * (size_t)o->reps, sizeof(double));
  if (samples == NULL) return -1;
  char typeArg[32], csv[4200], eArg[32];
  snprintf(typeArg, sizeof(typeArg), "%s", perfTypeName(type));
  for (int rep = 0; rep < o->reps; rep++) {
    for (int k = 0; k < nconf; k++) {
      const int c = rep % 2 == 0 ? k : nconf - 1 - k; /* NCCL first, then last, ... */
      char perfPath[4200], label[32], ranksArg[8];
      snprintf(perfPath, sizeof(perfPath), "%s/%s", o->perfDir, perfBinaries[coll]);
      snprintf(csv, sizeof(csv), "%s/%s.%s.%s.%d.csv", tmp, symmCollName(coll), typeArg,
               symmAlgoName(configs[c]), rep);
      snprintf(label, sizeof(label), "%s", c == 0 ? "nccl" : symmAlgoName(configs[c]));
      snprintf(ranksArg, sizeof(ranksArg), "%d", o->nranks);
      if (c > 0) symmTuneFormatSize(emax[c], eArg, sizeof(eArg));
      struct run r = {.binary = perfPath,
                      .csv = csv,
                      .log = logPath,
                      .coll = coll,
                      .algo = configs[c],
                      .forwardFile = forwardFile};
      char* args[] = {perfPath,
                      "-P",
                      ranksArg,
                      "-d",
                      typeArg,
                      "-b",
                      (char*)o->minBytes,
                      "-e",
                      c > 0 ? eArg : (char*)o->maxBytes,
                      "-f",
                      (char*)o->factor,
                      "-w",
                      (char*)o->warmup,
                      "-n",
                      (char*)o->iters,
                      "-c",
                      "1",
                      "-G",
                      (char*)o->graph,
                      "-R",
                      registration ? "2" : "0",
                      "--csv",
                      csv,
                      "--label",
                      label,
                      NULL};
      memcpy(r.argv, args, sizeof(args));
      const int rc = runChild(&r, o->dryRun);
      if (rc != 0) printf("#   exit %d (its correct rows still count; see %s)\n", rc, logPath);
      if (o->dryRun) continue;
      if (rep == 0 && c == 0) n = csvSizes(csv, sizes, MAX_SIZES);
      readTimes(csv, sizes, n, samples + (size_t)c * MAX_SIZES * (size_t)o->reps, o->reps, rep);
      remove(csv);
    }
  }
  if (o->dryRun) {
    free(samples);
    return 0;
  }
  if (n == 0) {
    fprintf(rows, "# %s %s: no results from NCCL's sweep (see %s): no row\n", symmCollName(coll),
            typeArg, logPath);
    free(samples);
    return -1;
  }
  double med[SYMM_NALGOS][MAX_SIZES];
  struct tuneTimes t = {.n = n, .sizes = sizes, .nccl = med[0]};
  for (int c = 0; c < nconf; c++) {
    for (size_t i = 0; i < n; i++) {
      double v[99];
      size_t nv = 0;
      for (int rep = 0; rep < o->reps; rep++) {
        const double x = samples[((size_t)c * MAX_SIZES + i) * (size_t)o->reps + (size_t)rep];
        if (x > 0) v[nv++] = x;
      }
      med[c][i] = tuneMedian(v, nv);
    }
    if (c > 0) t.ours[configs[c]] = med[c];
  }
  enum symmAlgo choice[MAX_SIZES];
  tuneChoose(&t, o->margin, choice);
  struct symmTuneRow row = {
      .coll = coll,
      .minRanks = o->nranks,
      .maxRanks = o->nranks,
      .elemSize = coll == SYMM_COLL_ALLGATHER ? SYMM_TUNE_ANY : perfTypeSize(type),
      .arch = m->arch,
      .link = m->link,
      .registered = registration ? 1 : 0};
  row.nsteps = tuneSteps(&t, o->margin, choice, row.steps, SYMM_TUNE_MAX_STEPS);
  if (row.nsteps == 0) row.steps[row.nsteps++] = (struct symmTuneStep){SIZE_MAX, SYMM_ALGO_NCCL};
  fprintf(rows, "\n# %s, %s, %d ranks%s: median us of %d runs (CUDA graphs), chosen\n#%12s",
          symmCollName(coll), typeArg, o->nranks, registration ? ", registered windows" : "",
          o->reps, "bytes");
  for (int c = 0; c < nconf; c++) fprintf(rows, " %9s", c == 0 ? "nccl" : symmAlgoName(configs[c]));
  fprintf(rows, "\n");
  for (size_t i = 0; i < n; i++) {
    fprintf(rows, "#%12zu", sizes[i]);
    for (int c = 0; c < nconf; c++) {
      if (med[c][i] > 0)
        fprintf(rows, " %9.2f", med[c][i]);
      else
        fprintf(rows, " %9s", "-");
    }
    fprintf(rows, "  %s\n", symmAlgoName(choice[i]));
  }
  char line[SYMM_TUNE_MAX_LINE];
  symmTuneFormatRow(&row, line, sizeof(line));
  fprintf(rows, "%s\n", line);
  printf("%s\n", line);
  free(samples);
  return 0;
}

/* The weakest link among the GPUs the ranks use (rank p on device p, as perf -P does). */
static int probeMachine(int nranks, struct symmTuneMachine* m) {
  memset(m, 0, sizeof(*m));
  if (symmTunerProbeMachine(0, m) != ncclSuccess) return -1;
  if (nranks > m->gpus) {
    fprintf(stderr, "symmcoll-tune: %d ranks need %d GPUs, %d visible\n", nranks, nranks, m->gpus);
    return -1;
  }
  m->link = SYMM_LINK_NVLINK;
  for (int a = 0; a < nranks; a++) {
    for (int b = 0; b < nranks; b++) {
      if (a == b) continue;
      const enum symmLink l = symmProbeLink(a, b, NULL);
      if (l == SYMM_LINK_UNKNOWN || (l == SYMM_LINK_PCIE && m->link == SYMM_LINK_NVLINK))
        m->link = l;
    }
    struct symmTuneMachine other;
    if (symmTunerProbeMachine(a, &other) != ncclSuccess || strcmp(other.gpu, m->gpu) != 0 ||
        other.arch != m->arch) {
      fprintf(stderr, "symmcoll-tune: GPUs 0 and %d differ; tune on one kind of GPU\n", a);
      return -1;
    }
  }
  if (m->link == SYMM_LINK_UNKNOWN) {
    fprintf(stderr, "symmcoll-tune: some GPUs have no peer access to each other\n");
    return -1;
  }
  return ncclGetVersion(&m->nccl) == ncclSuccess ? 0 : -1;
}

/* "gpu=... arch=..." as a machine line has it, through the file parser. */
static int machineFromText(const char* text, struct symmTuneMachine* m) {
  char* file = NULL;
  struct symmTuneFile* parsed = malloc(sizeof(*parsed));
  int line = 0, rc = -1;
  char err[256];
  if (parsed != NULL &&
      asprintf(&file, "symmcoll-tuning %d\nmachine %s\n", SYMM_TUNE_VERSION, text) > 0 &&
      symmTuneParse(file, strlen(file), parsed, &line, err, sizeof(err)) == 0 &&
      parsed->anyFields == 0) {
    *m = parsed->machine;
    rc = 0;
  }
  free(file);
  free(parsed);
  return rc;
}

/* The file must read back as this library reads it. */
static int selfCheck(const char* text, size_t len) {
  struct symmTuneFile* parsed = malloc(sizeof(*parsed));
  int line = 0;
  char err[256];
  const int rc = parsed ? symmTuneParse(text, len, parsed, &line, err, sizeof(err)) : -1;
  if (rc != 0)
    fprintf(stderr, "symmcoll-tune: the file does not parse (line %d: %s)\n", line,
            parsed ? err : "");
  free(parsed);
  return rc;
}

/* Installed, the perf binaries sit beside symmcoll-tune (libexec/symmcoll); in a build tree
 * they are in ../perf from build/tools. */
static const char* defaultPerfDir(void) {
  static char self[4096], sibling[4200];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[len > 0 ? len : 0] = '\0';
  const char* dir = dirname(self);
  char probe[4300];
  snprintf(probe, sizeof(probe), "%s/%s", dir, perfBinaries[0]);
  if (access(probe, X_OK) == 0) return dir;
  snprintf(sibling, sizeof(sibling), "%s/../perf", dir);
  snprintf(probe, sizeof(probe), "%s/%s", sibling, perfBinaries[0]);
  return access(probe, X_OK) == 0 ? sibling : dir;
}

int main(int argc, char** argv) {
  struct tuneOptions o;
  const int parsed = parseOptions(argc, argv, &o);
  if (parsed != 0) return parsed > 0 ? PERF_EXIT_OK : PERF_EXIT_USAGE;
  if (o.perfDir == NULL) o.perfDir = defaultPerfDir();
  struct symmTuneMachine m;
  if (o.nranks == 0 && cudaGetDeviceCount(&o.nranks) != cudaSuccess) o.nranks = 0;
  if (o.nranks < 2 || o.nranks > SYMM_MAX_RANKS) {
    fprintf(stderr, "symmcoll-tune: -P must be 2..%d (GPUs visible: %d)\n", SYMM_MAX_RANKS,
            o.nranks);
    if (!o.dryRun) return PERF_EXIT_USAGE;
    o.nranks = 2;
  }
  if (o.machineLine != NULL) {
    if (machineFromText(o.machineLine, &m) != 0) {
      fprintf(stderr, "symmcoll-tune: bad --machine '%s'\n", o.machineLine);
      return PERF_EXIT_USAGE;
    }
  } else if (probeMachine(o.nranks, &m) != 0) {
    if (!o.dryRun) {
      fprintf(stderr, "symmcoll-tune: cannot read this machine's facts (GPUs, driver, NCCL)\n");
      return PERF_EXIT_FAILURE;
    }
    m = (struct symmTuneMachine){.gpu = "unknown", .link = SYMM_LINK_NVLINK};
  }
  char machine[256], tmp[] = "/tmp/symmcoll-tune-XXXXXX", forwardFile[4200], logPath[4200];
  symmTuneFormatMachine(&m, machine, sizeof(machine));
  printf("# symmcoll-tune: %s\n", machine);
  char sweepNote[512];
  sweepTopNote(&o, sweepNote, sizeof(sweepNote));
  fputs(sweepNote, stdout);
  if (mkdtemp(tmp) == NULL) {
    fprintf(stderr, "symmcoll-tune: mkdtemp: %s\n", strerror(errno));
    return PERF_EXIT_FAILURE;
  }
  snprintf(forwardFile, sizeof(forwardFile), "%s/forward.txt", tmp);
  snprintf(logPath, sizeof(logPath), "%s.log", o.out);
  FILE* f = fopen(forwardFile, "w");
  char* rowsText = NULL;
  size_t rowsLen = 0;
  FILE* rows = open_memstream(&rowsText, &rowsLen);
  if (f == NULL || rows == NULL) {
    fprintf(stderr, "symmcoll-tune: cannot write in %s\n", tmp);
    return PERF_EXIT_FAILURE;
  }
  fprintf(f, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n");
  for (int c = 0; c < SYMM_NCOLLS; c++)
    fprintf(f, "%s nccl<=inf\n", symmCollName((enum symmColl)c));
  fclose(f);
  int rc = PERF_EXIT_OK;
  /* Plain buffers and windows one after the other, on the same machine and NCCL: each gives its
   * own rows (reg=0, reg=1), measured against NCCL with the same buffers. */
  for (int g = 0; g < o.nregs; g++) {
    for (int i = 0; i < o.ncolls; i++) {
      const enum symmColl coll = (enum symmColl)o.colls[i];
      /* All-gather moves bytes without arithmetic: one element type measures it. */
      const int ntypes = coll == SYMM_COLL_ALLGATHER ? 1 : o.ntypes;
      for (int k = 0; k < ntypes; k++)
        if (tuneOne(&o, &m, coll, o.types[k], o.registrations[g], tmp, forwardFile, logPath,
                    rows) != 0)
          rc = PERF_EXIT_FAILURE;
    }
  }
  fclose(rows);
  if (!o.dryRun) {
    char* text = NULL;
    size_t len = 0;
    FILE* mem = open_memstream(&text, &len);
    if (mem != NULL) {
      const time_t now = time(NULL);
      fprintf(mem, "# written by symmcoll-tune (src/tuner/README.md) on %s#", ctime(&now));
      for (int i = 0; i < argc; i++) fprintf(mem, " %s", argv[i]);
      fprintf(mem, "\n# ours only where it took <= %.0f%% of NCCL's time; NCCL elsewhere\n",
              100.0 * (1.0 - o.margin));
      fputs(sweepNote, mem);
      fprintf(mem, "symmcoll-tuning %d\n%s\n%s", SYMM_TUNE_VERSION, machine,
              rowsText ? rowsText : "");
      fclose(mem);
    }
    /* Written beside it and renamed over it: a library reading the file meanwhile sees the old
     * file or the new one, never a part. */
    char part[4200];
    snprintf(part, sizeof(part), "%s.part.%d", o.out, (int)getpid());
    FILE* out = text && selfCheck(text, len) == 0 ? fopen(part, "w") : NULL;
    int written = out != NULL && fwrite(text, 1, len, out) == len;
    if (out != NULL && fclose(out) != 0) written = 0;
    if (written && rename(part, o.out) != 0) written = 0;
    if (out != NULL && !written) remove(part);
    if (!written) {
      fprintf(stderr, "symmcoll-tune: %s not written\n", o.out);
      rc = PERF_EXIT_FAILURE;
    } else {
      printf("# wrote %s (use: SYMMCOLL_TUNING_FILE=%s)\n", o.out, o.out);
    }
    free(text);
  }
  free(rowsText);
  remove(forwardFile);
  rmdir(tmp);
  return rc;
}
