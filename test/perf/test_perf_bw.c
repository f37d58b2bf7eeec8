/* SPDX-License-Identifier: Apache-2.0 */
/* Collective descriptors (buffer counts, algbw and busbw as nccl-tests defines them) and the
 * output: number formatting, table lines, CSV round trip, the comparison table. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "harness.h"

#define CHECK_NEAR(a, b)                                                                      \
  do {                                                                                        \
    double a_ = (a), b_ = (b);                                                                \
    harnessChecks++;                                                                          \
    if (fabs(a_ - b_) > 1e-9 * (fabs(b_) > 1 ? fabs(b_) : 1)) {                               \
      harnessFailures++;                                                                      \
      fprintf(stderr, "%s:%d: %s ~= %s failed: %.12g != %.12g\n", __FILE__, __LINE__, #a, #b, a_, b_); \
    }                                                                                         \
  } while (0)

static void testBandwidth(void) {
  double alg, bus;
  /* all-reduce: 1 GiB of floats in 3233.1 us on 2 ranks (the NCCL baseline): busbw = algbw */
  perfAllReduce.getBw((1u << 30) / 4, 4, 3233.1e-6, 2, &alg, &bus);
  CHECK_NEAR(alg, 1073741824.0 / 1e9 / 3233.1e-6);
  CHECK_NEAR(bus, alg);
  CHECK(fabs(bus - 332.1) < 0.05);
  /* 2(n-1)/n for n = 8 */
  perfAllReduce.getBw(1000, 2, 1e-3, 8, &alg, &bus);
  CHECK_NEAR(alg, 2000.0 / 1e9 / 1e-3);
  CHECK_NEAR(bus, alg * 14.0 / 8.0);
  /* one rank: no bus traffic */
  perfAllReduce.getBw(1000, 4, 1e-3, 1, &alg, &bus);
  CHECK_NEAR(bus, 0.0);
  /* all-gather: count is per rank, algbw counts the gathered total, busbw (n-1)/n */
  perfAllGather.getBw((1u << 30) / 4 / 2, 4, 1993.3e-6, 2, &alg, &bus);
  CHECK_NEAR(alg, 1073741824.0 / 1e9 / 1993.3e-6);
  CHECK_NEAR(bus, alg / 2);
  CHECK(fabs(bus - 269.3) < 0.05);
  perfAllGather.getBw(100, 8, 2e-6, 4, &alg, &bus);
  CHECK_NEAR(alg, 3200.0 / 1e9 / 2e-6);
  CHECK_NEAR(bus, alg * 3.0 / 4.0);
  /* reduce-scatter: same shape as all-gather */
  perfReduceScatter.getBw((1u << 30) / 4 / 2, 4, 1962.0e-6, 2, &alg, &bus);
  CHECK(fabs(bus - 273.6) < 0.05);
  perfReduceScatter.getBw(100, 2, 1e-6, 8, &alg, &bus);
  CHECK_NEAR(alg, 1600.0 / 1e9 / 1e-6);
  CHECK_NEAR(bus, alg * 7.0 / 8.0);
}

/* coll's buffer counts for `count` elements of `elt` bytes on `nranks` ranks: every field. */
static void checkCounts(const struct perfColl* coll, size_t count, int elt, int nranks, struct perfCounts want) {
  struct perfCounts c;
  coll->getCounts(count, elt, nranks, &c);
  CHECK_EQ_INT(c.sendCount, want.sendCount);
  CHECK_EQ_INT(c.recvCount, want.recvCount);
  CHECK_EQ_INT(c.paramCount, want.paramCount);
  CHECK_EQ_INT(c.sendInplaceOffset, want.sendInplaceOffset);
  CHECK_EQ_INT(c.recvInplaceOffset, want.recvInplaceOffset);
}

static void testCounts(void) {
  /* fields: send, recv, param, in-place offset of the input, of the output */
  checkCounts(&perfAllReduce, 1000, 4, 2, (struct perfCounts){1000, 1000, 1000, 0, 0});
  /* all-gather of 1000 floats on 3 ranks: 333 per rank, rounded down to 16 bytes = 332 */
  checkCounts(&perfAllGather, 1000, 4, 3, (struct perfCounts){332, 996, 332, 332, 0});
  /* 8 bytes of floats on 2 ranks: nothing left after rounding (as in nccl-tests) */
  checkCounts(&perfAllGather, 2, 4, 2, (struct perfCounts){0, 0, 0, 0, 0});
  /* bf16: 16-byte multiples are 8 elements */
  checkCounts(&perfReduceScatter, 100, 2, 2, (struct perfCounts){96, 48, 48, 0, 48});
  /* doubles: multiples of 2 */
  checkCounts(&perfReduceScatter, 1 << 27, 8, 2, (struct perfCounts){1 << 27, 1 << 26, 1 << 26, 0, 1 << 26});
  CHECK_EQ_STR(perfAllReduce.name, "AllReduce");
  CHECK_EQ_STR(perfAllGather.name, "AllGather");
  CHECK_EQ_STR(perfReduceScatter.name, "ReduceScatter");
  CHECK(perfAllReduce.hasOp && perfReduceScatter.hasOp && !perfAllGather.hasOp);
  CHECK_EQ_INT(perfAllReduce.kind, PERF_ALLREDUCE);
  CHECK_EQ_INT(perfAllGather.kind, PERF_ALLGATHER);
  CHECK_EQ_INT(perfReduceScatter.kind, PERF_REDUCESCATTER);
}

static char* capture(void (*fn)(FILE*, void*), void* arg) {
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  fn(mem, arg);
  fclose(mem);
  return text;
}

static void header(FILE* f, void* arg) { perfPrintTableHeader(f, *(int*)arg); }
static void line(FILE* f, void* arg) {
  (void)arg;
  perfPrintLinePreamble(f, 1073741824, 268435456, "float", "sum", -1);
  perfPrintLineBody(f, 3233.1, 332.1, 332.1, 1, 0);
  perfPrintLineBody(f, 12.65, 0.08, 0.08, 0, 0);
  fputc('\n', f);
}

static void testFormatting(void) {
  char s[16];
  perfFormatFloat(12.345, 7, s);
  CHECK_EQ_STR(s, "  12.35");
  perfFormatFloat(3233.1, 7, s);
  CHECK_EQ_STR(s, "3233.10");
  perfFormatFloat(32331.7, 7, s);
  CHECK_EQ_STR(s, "32331.7");
  perfFormatFloat(1234567.0, 7, s);
  CHECK_EQ_STR(s, "1234567");
  perfFormatFloat(123456789.0, 7, s);
  CHECK_EQ_STR(s, "1.2e+08");
  perfFormatFloat(332.1, 6, s);
  CHECK_EQ_STR(s, "332.10");

  int cpu = 0;
  char* h = capture(header, &cpu);
  CHECK(strstr(h, "out-of-place") && strstr(h, "in-place"));
  CHECK(strstr(h, "#       size         count      type   redop    root     time   algbw   busbw  #wrong") != NULL);
  CHECK(strstr(h, "(GB/s)") != NULL);
  free(h);
  cpu = 1;
  h = capture(header, &cpu);
  CHECK(strstr(h, "cputime") != NULL);
  free(h);
  char* l = capture(line, NULL);
  CHECK_EQ_STR(l, "  1073741824     268435456     float     sum      -1  3233.10  332.10  332.10       0    12.65    0.08"
                  "    0.08    N/A\n");
  free(l);
}

static void compareTable(FILE* f, void* arg) {
  struct perfResult* rows = arg;
  perfPrintCompare(f, &rows[0], 2, &rows[2], 2);
}

static void testCsvAndCompare(void) {
  struct perfResult r = {.coll = "AllReduce", .library = "nccl", .type = "bfloat16", .op = "sum", .bytes = 1048576,
                         .count = 524288, .root = -1, .usec = {16.09, 15.5}, .algBw = {65.2, 67.6},
                         .busBw = {65.2, 67.6}, .wrong = {0, -1}};
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  perfCsvHeader(mem);
  perfCsvRow(mem, &r);
  fclose(mem);
  char* row = strchr(text, '\n') + 1;
  struct perfResult back;
  CHECK_EQ_INT(perfCsvParse(row, &back), 0);
  CHECK_EQ_STR(back.coll, "AllReduce");
  CHECK_EQ_STR(back.library, "nccl");
  CHECK_EQ_STR(back.type, "bfloat16");
  CHECK_EQ_INT(back.bytes, 1048576);
  CHECK_EQ_INT(back.count, 524288);
  CHECK_EQ_INT(back.root, -1);
  CHECK(fabs(back.usec[0] - 16.09) < 1e-9 && fabs(back.busBw[1] - 67.6) < 1e-9);
  CHECK_EQ_INT(back.wrong[0], 0);
  CHECK_EQ_INT(back.wrong[1], -1);
  CHECK(perfCsvParse(text, &back) != 0); /* the header is not a row */
  CHECK(perfCsvParse("AllReduce,nccl,12", &back) != 0);
  CHECK(perfCsvParse("AllReduce,nccl,x,1,float,sum,-1,1,1,1,0,1,1,1,0", &back) != 0);
  free(text);

  struct perfResult rows[4];
  rows[0] = r;
  rows[1] = r;
  rows[1].bytes = 2048;
  rows[1].usec[0] = 10.0;
  rows[2] = r;
  snprintf(rows[2].library, sizeof(rows[2].library), "libsymmcoll");
  rows[2].usec[0] = 8.045; /* 2x faster */
  rows[2].usec[1] = 15.5;
  rows[3] = rows[2];
  rows[3].bytes = 4096; /* no NCCL row for it */
  rows[3].wrong[0] = 3;
  char* cmp = capture(compareTable, rows);
  CHECK(strstr(cmp, "libsymmcoll vs nccl") != NULL);
  CHECK(strstr(cmp, "2.00x") != NULL);
  CHECK(strstr(cmp, "1.00x") != NULL);
  CHECK(strstr(cmp, "     4096") != NULL);
  /* the 4096-byte row has no baseline and carries its 3 wrong elements */
  char* last = strstr(cmp, "      4096");
  CHECK(last != NULL && strstr(last, "-") != NULL && strstr(last, "     3\n") != NULL);
  free(cmp);
}

int main(void) {
  testBandwidth();
  testCounts();
  testFormatting();
  testCsvAndCompare();
  return harnessReport("test_perf_bw");
}
