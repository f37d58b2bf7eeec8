/* SPDX-License-Identifier: Apache-2.0 */
/* Command line of the perf binaries (nccl-tests' flags, strictly validated) and the size sweep. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char* const typeNames[PERF_NUM_TYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "f8e4m3", "f8e5m2"};
static const char* const opNames[PERF_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "mulsum"};

static const struct {
  const char* alias;
  int type;
} typeAliases[] = {
    {"char", PERF_INT8},     {"int", PERF_INT32},      {"float16", PERF_HALF},  {"fp16", PERF_HALF},
    {"float32", PERF_FLOAT}, {"fp32", PERF_FLOAT},     {"float64", PERF_DOUBLE}, {"fp64", PERF_DOUBLE},
    {"bf16", PERF_BF16},     {"e4m3", PERF_FP8E4M3},   {"fp8e4m3", PERF_FP8E4M3}, {"e5m2", PERF_FP8E5M2},
    {"fp8e5m2", PERF_FP8E5M2},
};

const char* perfTypeName(int type) { return type >= 0 && type < PERF_NUM_TYPES ? typeNames[type] : "?"; }
const char* perfOpName(int op) { return op >= 0 && op < PERF_NUM_OPS ? opNames[op] : "none"; }

int perfTypeFromName(const char* name) {
  if (strcmp(name, "all") == 0) return PERF_ALL;
  for (int t = 0; t < PERF_NUM_TYPES; t++)
    if (strcmp(name, typeNames[t]) == 0) return t;
  for (size_t i = 0; i < sizeof(typeAliases) / sizeof(typeAliases[0]); i++)
    if (strcmp(name, typeAliases[i].alias) == 0) return typeAliases[i].type;
  return -2;
}

int perfOpFromName(const char* name) {
  if (strcmp(name, "all") == 0) return PERF_ALL;
  for (int o = 0; o < PERF_NUM_OPS; o++)
    if (strcmp(name, opNames[o]) == 0) return o;
  return -2;
}

void perfOptionsDefault(struct perfOptions* opt) {
  memset(opt, 0, sizeof(*opt));
  opt->nThreads = 1;
  opt->compareReps = 2;
  opt->nGpus = 1;
  opt->minBytes = 32u << 20;
  opt->maxBytes = 32u << 20;
  opt->stepBytes = 1u << 20;
  opt->stepFactor = 1;
  opt->iters = 20;
  opt->warmupIters = 1;
  opt->check = 1;
  opt->op = PERF_SUM;
  opt->type = PERF_FLOAT;
  opt->root = 0;
  opt->average = PERF_AVG_MEAN;
  opt->runCycles = 1;
}

int perfParseSize(const char* text, size_t* bytes) {
  if (text == NULL || *text == '\0') return -1;
  const char* p = text;
  while (isspace((unsigned char)*p)) p++;
  /* plain decimal only: no sign, hex, exponent, inf or nan */
  size_t digits = strspn(p, "0123456789.");
  if (digits == 0 || (p[digits] != '\0' && strchr("kKmMgGbB", p[digits]) == NULL)) return -1;
  char* end = NULL;
  errno = 0;
  double value = strtod(p, &end);
  if (end == p || errno != 0) return -1;
  double unit = 1.0;
  switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1024.0 * 1024.0; end++; break;
    case 'g': case 'G': unit = 1024.0 * 1024.0 * 1024.0; end++; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return -1;
  double total = value * unit;
  if (total < 0.0 || total > 1.8e19 || total != total) return -1;
  *bytes = (size_t)total;
  return 0;
}

/* Whole decimal (or 0x) integer in [lo, hi]. */
static int parseInt(const char* text, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void setErr(char* err, size_t len, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void setErr(char* err, size_t len, const char* fmt, ...) {
  if (err == NULL || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

/* -1, with "invalid WHAT 'NAME' (HINT)" in err. */
static int unknownName(char* err, size_t len, const char* what, const char* name, const char* hint) {
  setErr(err, len, "invalid %s '%s' (%s)", what, name, hint);
  return -1;
}

void perfPrintUsage(FILE* out, const char* prog) {
  fprintf(out,
          "USAGE: %s\n"
          "\t[-t,--nthreads <num threads>]\n"
          "\t[-g,--ngpus <gpus per thread>]\n"
          "\t[-P,--nprocs <processes>] fork one process per GPU group on this node (built-in launcher;\n"
          "\t                          not in nccl-tests, which has no -P)\n"
          "\t[--share_gpus] several ranks per GPU when there are more ranks than GPUs (only through\n"
          "\t               libsymmcoll's test bootstrap: the real NCCL refuses it; single-GPU proxies)\n"
#ifdef PERF_HAVE_MPI
          "\t[--mpi] take ranks from MPI (run under mpirun)\n"
#endif
          "\t[-b,--minbytes <min size in bytes>] (K, M, G suffixes: binary units)\n"
          "\t[-e,--maxbytes <max size in bytes>]\n"
          "\t[-i,--stepbytes <increment size>]\n"
          "\t[-f,--stepfactor <increment factor>]\n"
          "\t[-n,--iters <iteration count>]\n"
          "\t[-w,--warmup_iters <warmup iteration count>]\n"
          "\t[-N,--run_cycles <cycle count>] run and print each cycle\n"
          "\t[-c,--check <check iteration count>]\n"
          "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
          "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
          "\t[-r,--root <root>]\n"
          "\t[-z,--blocking <0/1/2/3>] 1=sync+barrier after each op, 2=sync only, 3=sync+barrier, time excludes barrier\n"
          "\t[-T,--timeout <time in seconds>]\n"
          "\t[-G,--cudagraph <num graph launches>] capture the -n ops in one CUDA graph, replay it this often\n"
          "\t[-C,--report_cputime <0/1>] CPU time in the time column; prints device attributes\n"
          "\t[-a,--average <0/1/2/3>] report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>\n"
          "\t[-R,--local_register <0/1/2>] 1=ncclCommRegister, 2=symmetric window (ncclCommWindowRegister)\n"
          "\t[-u,--unalign <index of first element>] misalign send and receive buffers\n"
          "\t[--alloc <nccl/cuda>] buffers from ncclMemAlloc (default, as nccl-tests) or cudaMalloc\n"
          "\t[-X,--compare <output prefix>] run the sweep with NCCL alone and with libsymmcoll,\n"
          "\t                               print both, write <prefix>.csv and <prefix>.png\n"
          "\t[--compare_reps <n>] runs of each library in compare mode, order alternating\n"
          "\t                     (NCCL first in odd pairs, last in even ones); medians (default 2)\n"
          "\t[--csv <file>] also write the results as CSV rows\n"
          "\t[--label <name>] library name in the CSV rows\n"
          "\t[-m -p -y -S -J -x -D -V -M -I -K <value>] nccl-tests' other options: accepted, so scripts\n"
          "\t                          written for it run unchanged; they have no effect here (a note says so)\n"
          "\t[-h,--help]\n",
          prog);
}

enum { OPT_CSV = 1000, OPT_LABEL, OPT_ALLOC, OPT_MPI, OPT_COMPARE_REPS, OPT_SHARE_GPUS };

/* nccl-tests options we take but cannot honour, by letter: the run goes on and says so. */
static const struct {
  char letter;
  const char* name;
  const char* quiet; /* the value that changes nothing (no note), or NULL */
} ignoredOptions[] = {
    {'m', "agg_iters", "1"},     {'p', "parallel_init", "0"}, {'y', "stream_null", "0"},
    {'S', NULL, NULL},           {'J', NULL, NULL},           {'x', NULL, NULL},
    {'D', NULL, NULL},           {'V', NULL, NULL},           {'M', NULL, NULL},
    {'I', NULL, NULL},           {'K', NULL, NULL}};

int perfParseArgs(int argc, char** argv, struct perfOptions* opt, int collHasOp, char* err, size_t errLen) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"nprocs", required_argument, 0, 'P'},       {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},     {"stepbytes", required_argument, 0, 'i'},
      {"stepfactor", required_argument, 0, 'f'},   {"iters", required_argument, 0, 'n'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"check", required_argument, 0, 'c'},        {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},     {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},     {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},    {"report_cputime", required_argument, 0, 'C'},
      {"average", required_argument, 0, 'a'},      {"local_register", required_argument, 0, 'R'},
      {"unalign", required_argument, 0, 'u'},      {"alloc", required_argument, 0, OPT_ALLOC},
      {"compare", required_argument, 0, 'X'},      {"csv", required_argument, 0, OPT_CSV},
      {"label", required_argument, 0, OPT_LABEL},  {"mpi", no_argument, 0, OPT_MPI},
      {"compare_reps", required_argument, 0, OPT_COMPARE_REPS},
      {"share_gpus", no_argument, 0, OPT_SHARE_GPUS},
      {"agg_iters", required_argument, 0, 'm'},    {"parallel_init", required_argument, 0, 'p'},
      {"stream_null", required_argument, 0, 'y'},
      {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
  const char* prog = argc > 0 ? argv[0] : "perf";
  optind = 0; /* full re-initialisation of getopt (glibc) */
  opterr = 0; /* we word the messages ourselves */
  for (;;) {
    int longIndex = -1;
    int c = getopt_long(argc, argv, ":t:g:P:N:b:e:i:f:n:w:c:o:d:r:z:T:G:C:a:R:u:X:m:p:y:S:J:x:D:V:M:I:K:h",
                        longopts, &longIndex);
    if (c == -1) break;
    const char* arg = optarg;
    int bad = 0;
    size_t size = 0;
    switch (c) {
      case 't': bad = parseInt(arg, 1, 1024, &opt->nThreads); break;
      case 'g': bad = parseInt(arg, 1, 1024, &opt->nGpus); break;
      case 'P': bad = parseInt(arg, 1, 1024, &opt->nProcs); break;
      case 'b': bad = perfParseSize(arg, &size); opt->minBytes = size; break;
      case 'e': bad = perfParseSize(arg, &size); opt->maxBytes = size; break;
      case 'i': bad = perfParseSize(arg, &size); opt->stepBytes = size; break;
      case 'f': {
        int f = 0;
        bad = parseInt(arg, 1, 1 << 20, &f);
        opt->stepFactor = (size_t)f;
        break;
      }
      case 'n': bad = parseInt(arg, 1, INT_MAX, &opt->iters); break;
      case 'w': bad = parseInt(arg, 0, INT_MAX, &opt->warmupIters); break;
      case 'N': bad = parseInt(arg, 1, INT_MAX, &opt->runCycles); break;
      case 'm': case 'p': case 'y': case 'S': case 'J': case 'x': case 'D': case 'V': case 'M':
      case 'I': case 'K':
        for (size_t k = 0; k < sizeof(ignoredOptions) / sizeof(ignoredOptions[0]); k++) {
          if (ignoredOptions[k].letter != c) continue;
          if (ignoredOptions[k].quiet == NULL || strcmp(arg, ignoredOptions[k].quiet) != 0)
            fprintf(stderr, "# note: -%c%s%s %s (nccl-tests) has no effect here\n", c,
                    ignoredOptions[k].name ? ",--" : "", ignoredOptions[k].name ? ignoredOptions[k].name : "",
                    arg);
        }
        break;
      case 'c': bad = parseInt(arg, 0, INT_MAX, &opt->check); break;
      case 'o':
        opt->op = perfOpFromName(arg);
        if (opt->op == -2) return unknownName(err, errLen, "op", arg, "sum, prod, max, min, avg, mulsum or all");
        break;
      case 'd':
        opt->type = perfTypeFromName(arg);
        if (opt->type == -2) return unknownName(err, errLen, "datatype", arg, "see -h for the list, or all");
        break;
      case 'r': bad = parseInt(arg, 0, INT_MAX, &opt->root); break;
      case 'z': bad = parseInt(arg, 0, 3, &opt->blocking); break;
      case 'T': bad = parseInt(arg, 0, INT_MAX, &opt->timeout); break;
      case 'G': bad = parseInt(arg, 0, INT_MAX, &opt->graphLaunches); break;
      case 'C': bad = parseInt(arg, 0, 1, &opt->reportCputime); break;
      case 'a': bad = parseInt(arg, 0, 3, &opt->average); break;
      case 'R': bad = parseInt(arg, 0, 2, &opt->registration); break;
      case 'u': bad = parseInt(arg, 0, 1 << 20, &opt->unalign); break;
      case OPT_ALLOC:
        if (strcmp(arg, "nccl") == 0) opt->alloc = PERF_ALLOC_NCCL;
        else if (strcmp(arg, "cuda") == 0) opt->alloc = PERF_ALLOC_CUDA;
        else bad = 1;
        break;
      case 'X': opt->compareOut = arg; bad = *arg == '\0'; break;
      case OPT_COMPARE_REPS: bad = parseInt(arg, 1, 99, &opt->compareReps); break;
      case OPT_SHARE_GPUS: opt->shareGpus = 1; break;
      case OPT_CSV: opt->csvPath = arg; bad = *arg == '\0'; break;
      case OPT_LABEL: opt->library = arg; bad = *arg == '\0'; break;
      case OPT_MPI:
#ifdef PERF_HAVE_MPI
        opt->mpi = 1;
        break;
#else
        setErr(err, errLen, "--mpi: this build has no MPI support (meson setup -Dmpi=enabled)");
        return -1;
#endif
      case 'h': perfPrintUsage(stdout, prog); return 1;
      case ':':
        setErr(err, errLen, "option '%s' needs a value", argv[optind - 1]);
        return -1;
      default:
        if (optopt && optopt != c && isprint(optopt))
          setErr(err, errLen, "unknown option '-%c' (see -h)", optopt);
        else
          setErr(err, errLen, "unknown option '%s' (see -h)", argv[optind - 1]);
        return -1;
    }
    if (bad) {
      const char* name = longIndex >= 0 ? longopts[longIndex].name : NULL;
      char shortName[3] = {'-', (char)c, 0};
      setErr(err, errLen, "invalid value '%s' for %s%s", arg, name ? "--" : "", name ? name : shortName);
      return -1;
    }
  }
  if (optind < argc) {
    setErr(err, errLen, "unexpected argument '%s' (see -h)", argv[optind]);
    return -1;
  }
  if (opt->minBytes > opt->maxBytes) {
    setErr(err, errLen, "invalid sizes: minbytes %zu > maxbytes %zu", opt->minBytes, opt->maxBytes);
    return -1;
  }
  if (opt->stepFactor > 1 && opt->minBytes == 0 && opt->maxBytes > 0) {
    setErr(err, errLen, "a step factor (-f) needs a non-zero minbytes (-b)");
    return -1;
  }
  if (opt->stepFactor <= 1 && opt->stepBytes == 0 && opt->minBytes < opt->maxBytes) {
    setErr(err, errLen, "stepbytes (-i) must be positive");
    return -1;
  }
  if (!collHasOp && opt->op != PERF_SUM && opt->op != PERF_ALL) {
    /* nccl-tests ignores -o for collectives without a reduction; so do we, loudly. */
    fprintf(stderr, "# note: -o has no effect on this collective\n");
  }
  if (opt->nProcs > 0 && opt->mpi) {
    setErr(err, errLen, "-P (built-in launcher) and --mpi exclude each other");
    return -1;
  }
  if (opt->blocking != 0 && opt->graphLaunches > 0) {
    /* waiting for a stream that is being captured would invalidate the capture */
    setErr(err, errLen, "blocking mode -z %d cannot be combined with CUDA graphs (-G)", opt->blocking);
    return -1;
  }
  if (opt->compareOut && opt->mpi) {
    setErr(err, errLen, "compare mode (-X) runs its own children: use -P instead of --mpi");
    return -1;
  }
  return 0;
}

/* minBytes, then each `next` of the one before until it says 0 (no size after the last): how
 * many there are; the first `cap` go into sizes (when not NULL). */
static size_t listSizes(const struct perfOptions* opt, size_t (*next)(const struct perfOptions*, size_t),
                        size_t* sizes, size_t cap) {
  size_t n = 0, size = opt->minBytes;
  do {
    if (sizes && n < cap) sizes[n] = size;
    n++;
    size = next(opt, size);
  } while (size != 0);
  return n;
}

/* The sweep: -f factor or -i step; it stops at maxBytes, on no progress (only a zero-size
 * sweep) and on overflow. */
static size_t sweepNext(const struct perfOptions* opt, size_t size) {
  size_t next = opt->stepFactor > 1 ? size * opt->stepFactor : size + opt->stepBytes;
  if (next <= size || next > opt->maxBytes) return 0;
  if (opt->stepFactor > 1 && next / opt->stepFactor != size) return 0;
  return next;
}

size_t perfSweepSizes(const struct perfOptions* opt, size_t* sizes, size_t cap) {
  return listSizes(opt, sweepNext, sizes, cap);
}

/* Warm-up: powers of two from minBytes (1 after 0) up to maxBytes. */
static size_t warmupNext(const struct perfOptions* opt, size_t size) {
  size_t next = size ? size * 2 : 1;
  return next > opt->maxBytes || next < size ? 0 : next;
}

size_t perfWarmupSizes(const struct perfOptions* opt, size_t* sizes, size_t cap) {
  return listSizes(opt, warmupNext, sizes, cap);
}
