/* SPDX-License-Identifier: Apache-2.0 */
/* Command line of the perf binaries: good and bad arguments, sizes with suffixes, the sweep and
 * warm-up size lists, type/op names, and the compare-mode child argument list. */
#define _GNU_SOURCE
#include <stdio.h>

#include "common.h"
#include "compare.h"
#include "harness.h"

static int parse(struct perfOptions* opt, char* err, size_t errLen, int hasOp, int argc, char** argv) {
  perfOptionsDefault(opt);
  /* usage text goes to stdout on -h: keep the test log readable */
  FILE* saved = stdout;
  stdout = fopen("/dev/null", "w");
  int rc = perfParseArgs(argc, argv, opt, hasOp, err, errLen);
  fclose(stdout);
  stdout = saved;
  return rc;
}
/* PARSE(&opt, err, "-b", "8"): parses those arguments after a program name. */
#define PARSE(opt, err, ...) parseList(opt, err, sizeof(err), (const char*[]){"all_reduce_perf", __VA_ARGS__, NULL})
static int parseList(struct perfOptions* opt, char* err, size_t errLen, const char** args) {
  int argc = 0;
  while (args[argc]) argc++;
  return parse(opt, err, errLen, 1, argc, (char**)args);
}

static void testDefaults(void) {
  struct perfOptions o;
  char err[256] = "";
  char* argv[] = {"all_reduce_perf", NULL};
  CHECK_EQ_INT(parse(&o, err, sizeof(err), 1, 1, argv), 0);
  CHECK_EQ_INT(o.minBytes, 32 << 20);
  CHECK_EQ_INT(o.maxBytes, 32 << 20);
  CHECK_EQ_INT(o.iters, 20);
  CHECK_EQ_INT(o.warmupIters, 1);
  CHECK_EQ_INT(o.check, 1);
  CHECK_EQ_INT(o.type, PERF_FLOAT);
  CHECK_EQ_INT(o.op, PERF_SUM);
  CHECK_EQ_INT(o.nGpus, 1);
  CHECK_EQ_INT(o.nThreads, 1);
  CHECK_EQ_INT(o.nProcs, 0);
  CHECK_EQ_INT(o.shareGpus, 0);
  CHECK_EQ_INT(o.average, PERF_AVG_MEAN);
  CHECK(o.compareOut == NULL);
}

static void testGoodArgs(void) {
  struct perfOptions o;
  char err[256] = "";
  CHECK_EQ_INT(PARSE(&o, err, "-b", "8", "-e", "1G", "-f", "2", "-g", "2", "-t", "3", "-n", "7", "-w", "0", "-c", "0",
                     "-o", "max", "-d", "bfloat16", "-z", "0", "-T", "30", "-G", "20", "-C", "1", "-a", "3", "-R", "2",
                     "-u", "1", "-P", "2"),
               0);
  CHECK_EQ_INT(o.minBytes, 8);
  CHECK_EQ_INT(o.maxBytes, 1LL << 30);
  CHECK_EQ_INT(o.stepFactor, 2);
  CHECK_EQ_INT(o.nGpus, 2);
  CHECK_EQ_INT(o.nThreads, 3);
  CHECK_EQ_INT(o.iters, 7);
  CHECK_EQ_INT(o.warmupIters, 0);
  CHECK_EQ_INT(o.check, 0);
  CHECK_EQ_INT(o.op, PERF_MAX);
  CHECK_EQ_INT(o.type, PERF_BF16);
  CHECK_EQ_INT(o.blocking, 0);
  CHECK_EQ_INT(o.timeout, 30);
  CHECK_EQ_INT(o.graphLaunches, 20);
  CHECK_EQ_INT(o.reportCputime, 1);
  CHECK_EQ_INT(o.average, 3);
  CHECK_EQ_INT(o.registration, PERF_REG_SYMMETRIC);
  CHECK_EQ_INT(o.unalign, 1);
  CHECK_EQ_INT(o.nProcs, 2);
  CHECK_EQ_INT(PARSE(&o, err, "-z", "2"), 0);
  CHECK_EQ_INT(o.blocking, 2);

  /* long options, "all", aliases, attached values */
  CHECK_EQ_INT(PARSE(&o, err, "--minbytes=1K", "--maxbytes", "64M", "--op", "all", "--datatype=all", "--stepbytes",
                     "1M", "--iters", "3", "--warmup_iters=2", "--check", "5", "--cudagraph", "4", "--local_register",
                     "1", "--alloc", "cuda", "--run_cycles", "2", "--compare", "/tmp/x", "--csv", "/tmp/y.csv",
                     "--label", "mine"),
               0);
  CHECK_EQ_INT(o.minBytes, 1024);
  CHECK_EQ_INT(o.maxBytes, 64 << 20);
  CHECK_EQ_INT(o.op, PERF_ALL);
  CHECK_EQ_INT(o.type, PERF_ALL);
  CHECK_EQ_INT(o.stepBytes, 1 << 20);
  CHECK_EQ_INT(o.warmupIters, 2);
  CHECK_EQ_INT(o.check, 5);
  CHECK_EQ_INT(o.graphLaunches, 4);
  CHECK_EQ_INT(o.registration, PERF_REG_LOCAL);
  CHECK_EQ_INT(o.alloc, PERF_ALLOC_CUDA);
  CHECK_EQ_INT(o.runCycles, 2);
  CHECK_EQ_STR(o.compareOut, "/tmp/x");
  CHECK_EQ_STR(o.csvPath, "/tmp/y.csv");
  CHECK_EQ_STR(o.library, "mine");
  CHECK_EQ_INT(PARSE(&o, err, "-Xout", "-dbf16", "-o", "mulsum"), 0);
  CHECK_EQ_STR(o.compareOut, "out");
  CHECK_EQ_INT(o.type, PERF_BF16);
  CHECK_EQ_INT(o.op, PERF_MULSUM);
  CHECK_EQ_INT(PARSE(&o, err, "-d", "f8e4m3"), 0);
  CHECK_EQ_INT(o.type, PERF_FP8E4M3);
  CHECK_EQ_INT(PARSE(&o, err, "-d", "half", "-o", "avg"), 0);
  CHECK_EQ_INT(o.type, PERF_HALF);
  CHECK_EQ_INT(o.op, PERF_AVG);
  CHECK_EQ_INT(PARSE(&o, err, "-h"), 1);
  CHECK_EQ_INT(PARSE(&o, err, "-b", "0", "-e", "0"), 0); /* a zero-byte sweep is allowed */
  CHECK_EQ_INT(PARSE(&o, err, "-t", "2", "--share_gpus"), 0);
  CHECK_EQ_INT(o.shareGpus, 1);
  CHECK_EQ_INT(o.nThreads, 2);
}

static void expectBad(const char* what, int rc, const char* err, const char* needle) {
  if (rc != -1 || strstr(err, needle) == NULL) {
    fprintf(stderr, "%s: rc %d, message '%s' (wanted '%s')\n", what, rc, err, needle);
    CHECK(!"bad argument accepted or unclear message");
  } else {
    CHECK(1);
  }
}

static void testBadArgs(void) {
  struct perfOptions o;
  char err[256];
#define BAD(needle, ...)                                             \
  do {                                                               \
    err[0] = '\0';                                                   \
    expectBad(#__VA_ARGS__, PARSE(&o, err, __VA_ARGS__), err, needle); \
  } while (0)
  BAD("unknown option '-q'", "-q");
  BAD("unknown option '--bogus'", "--bogus");
  BAD("needs a value", "-b");
  BAD("invalid value '1Q' for -b", "-b", "1Q");
  BAD("invalid value '-5' for -e", "-e", "-5");
  BAD("invalid value 'x' for -n", "-n", "x");
  BAD("invalid value '0' for -n", "-n", "0");
  BAD("invalid value '0' for -g", "-g", "0");
  BAD("invalid value '2x' for -t", "-t", "2x");
  BAD("invalid value '4' for -z", "-z", "4");
  BAD("invalid value '3' for -R", "-R", "3");
  BAD("invalid value '5' for -a", "-a", "5");
  BAD("invalid value '2' for -C", "-C", "2");
  BAD("invalid value '-1' for -G", "-G", "-1");
  BAD("invalid value 'gpu' for --alloc", "--alloc", "gpu");
  BAD("invalid datatype 'float17'", "-d", "float17");
  BAD("invalid op 'xor'", "-o", "xor");
  BAD("minbytes 2048 > maxbytes 1024", "-b", "2K", "-e", "1K");
  BAD("non-zero minbytes", "-b", "0", "-e", "1M", "-f", "2");
  BAD("stepbytes (-i) must be positive", "-b", "1K", "-e", "1M", "-i", "0");
  BAD("unexpected argument 'extra'", "-b", "8", "extra");
  BAD("-z 3 cannot be combined", "-z", "3", "-G", "2");
  BAD("-z 1 cannot be combined", "-z", "1", "-G", "2");
#ifndef PERF_HAVE_MPI
  BAD("no MPI support", "--mpi");
#endif
#undef BAD
}

static void testSizes(void) {
  size_t b = 0;
  CHECK_EQ_INT(perfParseSize("8", &b), 0);
  CHECK_EQ_INT(b, 8);
  CHECK_EQ_INT(perfParseSize("1K", &b), 0);
  CHECK_EQ_INT(b, 1024);
  CHECK_EQ_INT(perfParseSize("1k", &b), 0);
  CHECK_EQ_INT(b, 1024);
  CHECK_EQ_INT(perfParseSize("16M", &b), 0);
  CHECK_EQ_INT(b, 16 << 20);
  CHECK_EQ_INT(perfParseSize("1G", &b), 0);
  CHECK_EQ_INT(b, 1 << 30);
  CHECK_EQ_INT(perfParseSize("2g", &b), 0);
  CHECK_EQ_INT(b, 2LL << 30);
  CHECK_EQ_INT(perfParseSize("1.5M", &b), 0);
  CHECK_EQ_INT(b, 3 << 19);
  CHECK_EQ_INT(perfParseSize("64KB", &b), 0);
  CHECK_EQ_INT(b, 64 << 10);
  CHECK_EQ_INT(perfParseSize("0", &b), 0);
  CHECK_EQ_INT(b, 0);
  CHECK_EQ_INT(perfParseSize("", &b), -1);
  CHECK_EQ_INT(perfParseSize("K", &b), -1);
  CHECK_EQ_INT(perfParseSize("-1", &b), -1);
  CHECK_EQ_INT(perfParseSize("1T", &b), -1);
  CHECK_EQ_INT(perfParseSize("1MM", &b), -1);
  CHECK_EQ_INT(perfParseSize("nan", &b), -1);
  CHECK_EQ_INT(perfParseSize("0x10", &b), -1);
}

static void testSweep(void) {
  struct perfOptions o;
  perfOptionsDefault(&o);
  size_t s[64];
  /* -b 8 -e 1G -f 2: 8, 16, ..., 1 GiB = 28 sizes */
  o.minBytes = 8;
  o.maxBytes = 1 << 30;
  o.stepFactor = 2;
  size_t n = perfSweepSizes(&o, s, 64);
  CHECK_EQ_INT(n, 28);
  CHECK_EQ_INT(s[0], 8);
  CHECK_EQ_INT(s[1], 16);
  CHECK_EQ_INT(s[27], 1 << 30);
  CHECK_EQ_INT(perfSweepSizes(&o, NULL, 0), 28);
  /* factor 4 that overshoots the maximum: stops below it */
  o.minBytes = 1024;
  o.maxBytes = 10000;
  o.stepFactor = 4;
  n = perfSweepSizes(&o, s, 64);
  CHECK_EQ_INT(n, 2);
  CHECK_EQ_INT(s[1], 4096);
  /* -i steps */
  o.stepFactor = 1;
  o.stepBytes = 1000;
  o.minBytes = 1000;
  o.maxBytes = 5500;
  n = perfSweepSizes(&o, s, 64);
  CHECK_EQ_INT(n, 5);
  CHECK_EQ_INT(s[4], 5000);
  /* single size (the nccl-tests default) */
  perfOptionsDefault(&o);
  n = perfSweepSizes(&o, s, 64);
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(s[0], 32 << 20);
  /* zero-size sweep terminates */
  o.minBytes = o.maxBytes = 0;
  CHECK_EQ_INT(perfSweepSizes(&o, s, 64), 1);
  /* only the first `cap` are stored, the count is still right */
  o.minBytes = 1;
  o.maxBytes = 1 << 20;
  o.stepFactor = 2;
  s[3] = 12345;
  CHECK_EQ_INT(perfSweepSizes(&o, s, 3), 21);
  CHECK_EQ_INT(s[3], 12345);
  /* warm-up: powers of two from min up to max */
  o.minBytes = 8;
  o.maxBytes = 100;
  n = perfWarmupSizes(&o, s, 64);
  CHECK_EQ_INT(n, 4);
  CHECK_EQ_INT(s[3], 64);
  o.minBytes = 0;
  o.maxBytes = 4;
  n = perfWarmupSizes(&o, s, 64);
  CHECK_EQ_INT(n, 4); /* 0, 1, 2, 4 */
  CHECK_EQ_INT(s[3], 4);
}

static void testNames(void) {
  static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                      "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  for (int t = 0; t < PERF_NUM_TYPES; t++) {
    CHECK_EQ_STR(perfTypeName(t), names[t]);
    CHECK_EQ_INT(perfTypeFromName(names[t]), t);
  }
  CHECK_EQ_INT(perfTypeFromName("bf16"), PERF_BF16);
  CHECK_EQ_INT(perfTypeFromName("fp32"), PERF_FLOAT);
  CHECK_EQ_INT(perfTypeFromName("all"), PERF_ALL);
  CHECK_EQ_INT(perfTypeFromName("Float"), -2);
  static const char* const ops[] = {"sum", "prod", "max", "min", "avg", "mulsum"};
  for (int o = 0; o < PERF_NUM_OPS; o++) {
    CHECK_EQ_STR(perfOpName(o), ops[o]);
    CHECK_EQ_INT(perfOpFromName(ops[o]), o);
  }
  CHECK_EQ_INT(perfOpFromName("all"), PERF_ALL);
  CHECK_EQ_INT(perfOpFromName("none"), -2);
  CHECK_EQ_STR(perfOpName(-1), "none");
}

/* Scripts written for nccl-tests run unchanged: its letters mean what they mean there. */
static void testNcclTestsLetters(void) {
  struct perfOptions o;
  char err[256] = "";
  CHECK_EQ_INT(PARSE(&o, err, "-N", "3", "-m", "1", "-p", "0", "-y", "0", "-S", "0", "-J", "out.json", "-x",
                     "1", "-D", "0", "-V", "0", "-M", "1", "-I", "0", "-K", "0"),
               0);
  CHECK_EQ_INT(o.runCycles, 3);
  CHECK_EQ_INT(o.nProcs, 0);
  CHECK_EQ_INT(PARSE(&o, err, "--run_cycles", "2", "--nprocs", "4"), 0);
  CHECK_EQ_INT(o.runCycles, 2);
  CHECK_EQ_INT(o.nProcs, 4);
  CHECK_EQ_INT(PARSE(&o, err, "-m"), -1); /* still needs its value */
}

static void testChildArgs(void) {
  char* argv[] = {"./all_reduce_perf", "-b", "8", "-X", "out/ar", "-e", "1G", "--csv", "old.csv",
                  "--compare=x", "-Xy", "--label", "l", "-P", "2", NULL};
  int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;
  char** child = perfCompareChildArgs(argc, argv, "new.csv", "nccl");
  const char* want[] = {"./all_reduce_perf", "-b", "8", "-e", "1G", "-P", "2", "--csv", "new.csv", "--label", "nccl"};
  int n = 0;
  while (child[n]) n++;
  CHECK_EQ_INT(n, (int)(sizeof(want) / sizeof(want[0])));
  for (int i = 0; i < n && i < (int)(sizeof(want) / sizeof(want[0])); i++) CHECK_EQ_STR(child[i], want[i]);
  free(child);
  /* the child's arguments parse, without compare mode */
  char** child2 = perfCompareChildArgs(argc, argv, "c.csv", "libsymmcoll");
  struct perfOptions o;
  char err[256] = "";
  int c2 = 0;
  while (child2[c2]) c2++;
  CHECK_EQ_INT(parse(&o, err, sizeof(err), 1, c2, child2), 0);
  CHECK(o.compareOut == NULL);
  CHECK_EQ_STR(o.csvPath, "c.csv");
  CHECK_EQ_STR(o.library, "libsymmcoll");
  CHECK_EQ_INT(o.nProcs, 2);
  free(child2);
}

int main(void) {
  testDefaults();
  testGoodArgs();
  testBadArgs();
  testSizes();
  testSweep();
  testNames();
  testNcclTestsLetters();
  testChildArgs();
  return harnessReport("test_perf_options");
}
