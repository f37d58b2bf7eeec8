/* SPDX-License-Identifier: Apache-2.0 */
/* Tuning files: a good file and every kind of error (file:line, whole file refused), text forms
 * round-tripping, the machine fingerprint and its refusal, the content hash ranks agree on,
 * SYMMCOLL_TUNING_FILE read once and thread-safe, rows nobody measured falling back. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "harness.h"
#include "tuner_test_util.h"

static const char* logPath;
static char dir[] = "/tmp/test_tuner_file_XXXXXX";

static const struct symmTuneMachine h200 = {.gpu = "NVIDIA H200", .arch = 90,
                                            .link = SYMM_LINK_NVLINK, .gpus = 2,
                                            .driver = 13000, .nccl = 22809};

static const char goodText[] =
    "# written by symmcoll_tune\n"
    "\n"
    "symmcoll-tuning 1\n"
    "machine gpu=\"NVIDIA H200\" arch=90 link=nvlink gpus=2 driver=13000 nccl=22809\n"
    "  # rows\n"
    "allreduce ranks=2 dtype=2 arch=90 link=nvlink reg=0 lamport<=128K oneshot<=2M twoshot<=1G\r\n"
    "allgather ranks=2-4 nccl<=4K push<=inf\n"
    "reducescatter dtype=any arch=any link=any reg=any pull<=1000\n"
    "allreduce ranks=any reg=1 nccl<=16 multimem<=64M twoshot<=3T\n"
    "allgather ranks=4 reg=1 lamport<=512K nccl<=256M NcclPlain<=inf\n"
    "reducescatter ranks=4 dtype=2 reg=1 ncclplain<=1G\n";

static void testGoodFile(void) {
  struct symmTuneFile* f = malloc(sizeof(*f));
  int line = -1;
  char err[256];
  CHECK_EQ_INT(symmTuneParse(goodText, strlen(goodText), f, &line, err, sizeof(err)), 0);
  CHECK_EQ_INT(line, 0);
  CHECK_EQ_STR(f->machine.gpu, "NVIDIA H200");
  CHECK_EQ_INT(f->machine.arch, 90);
  CHECK_EQ_INT(f->machine.link, SYMM_LINK_NVLINK);
  CHECK_EQ_INT(f->machine.gpus, 2);
  CHECK_EQ_INT(f->machine.driver, 13000);
  CHECK_EQ_INT(f->machine.nccl, 22809);
  CHECK_EQ_INT(f->anyFields, 0);
  CHECK_EQ_INT(f->hash, symmTuneHash(goodText, strlen(goodText)));
  CHECK_EQ_INT(f->nrows, 6);
  const struct symmTuneRow* r = &f->rows[0];
  CHECK_EQ_INT(r->coll, SYMM_COLL_ALLREDUCE);
  CHECK_EQ_INT(r->minRanks, 2);
  CHECK_EQ_INT(r->maxRanks, 2);
  CHECK_EQ_INT(r->elemSize, 2);
  CHECK_EQ_INT(r->arch, 90);
  CHECK_EQ_INT(r->link, SYMM_LINK_NVLINK);
  CHECK_EQ_INT(r->registered, 0);
  CHECK_EQ_INT(r->nsteps, 3);
  CHECK_EQ_INT(r->steps[0].algo, SYMM_ALGO_LAMPORT);
  CHECK_EQ_INT(r->steps[0].upTo, 128 * KiB);
  CHECK_EQ_INT(r->steps[1].upTo, 2 * MiB);
  CHECK_EQ_INT(r->steps[2].algo, SYMM_ALGO_TWOSHOT);
  CHECK_EQ_INT(r->steps[2].upTo, GiB);
  r = &f->rows[1]; /* omitted keys: any */
  CHECK_EQ_INT(r->coll, SYMM_COLL_ALLGATHER);
  CHECK_EQ_INT(r->minRanks, 2);
  CHECK_EQ_INT(r->maxRanks, 4);
  CHECK_EQ_INT(r->elemSize, SYMM_TUNE_ANY);
  CHECK_EQ_INT(r->link, SYMM_TUNE_ANY);
  CHECK_EQ_INT(r->registered, SYMM_TUNE_ANY);
  CHECK_EQ_INT(r->steps[0].algo, SYMM_ALGO_NCCL);
  CHECK_EQ_INT(r->steps[1].algo, SYMM_ALGO_PUSH);
  CHECK_EQ_INT(r->steps[1].upTo, SIZE_MAX);
  r = &f->rows[2];
  CHECK_EQ_INT(r->coll, SYMM_COLL_REDUCESCATTER);
  CHECK_EQ_INT(r->steps[0].upTo, 1000);
  r = &f->rows[3];
  CHECK_EQ_INT(r->minRanks, 2);
  CHECK_EQ_INT(r->maxRanks, SYMM_MAX_RANKS);
  CHECK_EQ_INT(r->steps[2].upTo, (size_t)3 << 40);
  /* ncclplain (any case), in every collective's rows. */
  r = &f->rows[4];
  CHECK_EQ_INT(r->coll, SYMM_COLL_ALLGATHER);
  CHECK_EQ_INT(r->nsteps, 3);
  CHECK_EQ_INT(r->steps[1].algo, SYMM_ALGO_NCCL);
  CHECK_EQ_INT(r->steps[1].upTo, 256 * MiB);
  CHECK_EQ_INT(r->steps[2].algo, SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_INT(r->steps[2].upTo, SIZE_MAX);
  r = &f->rows[5];
  CHECK_EQ_INT(r->coll, SYMM_COLL_REDUCESCATTER);
  CHECK_EQ_INT(r->steps[0].algo, SYMM_ALGO_NCCLPLAIN);
  CHECK_EQ_INT(r->steps[0].upTo, GiB);
  /* A file's rows decide: their ncclplain steps are picked for the calls they match, NCCL
   * above the last bound (the good file's earlier rows would catch these calls first). */
  static const char plainRows[] =
      "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
      "allgather ranks=4 reg=1 lamport<=512K nccl<=256M ncclplain<=inf\n"
      "reducescatter ranks=4 dtype=2 reg=1 ncclplain<=1G\n";
  struct symmTuneFile* p = malloc(sizeof(*p));
  CHECK_EQ_INT(symmTuneParse(plainRows, strlen(plainRows), p, &line, err, sizeof(err)), 0);
  struct symmTuneInput in = tin(SYMM_COLL_ALLGATHER, 4, ncclBfloat16, ncclSum, 512 * MiB);
  in.registered = 1;
  in.table = p;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCLPLAIN);
  in.bytes = 256 * MiB;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in = tin(SYMM_COLL_REDUCESCATTER, 4, ncclBfloat16, ncclSum, GiB);
  in.registered = 1;
  in.table = p;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCLPLAIN);
  in.bytes = GiB + 8;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 64 * MiB);
  in.table = p;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT); /* rows it lacks: the built-in ones */
  free(p);
  /* Each row prints back to a line that parses to the same row. */
  char text[8192];
  int n = snprintf(text, sizeof(text), "symmcoll-tuning 1\n");
  n += symmTuneFormatMachine(&f->machine, text + n, sizeof(text) - (size_t)n);
  n += snprintf(text + n, sizeof(text) - (size_t)n, "\n");
  for (int i = 0; i < f->nrows; i++) {
    n += symmTuneFormatRow(&f->rows[i], text + n, sizeof(text) - (size_t)n);
    n += snprintf(text + n, sizeof(text) - (size_t)n, "\n");
  }
  CHECK(strstr(text, "allgather ranks=4 ") != NULL && strstr(text, " ncclplain<=inf\n") != NULL);
  CHECK(strstr(text, " ncclplain<=1G\n") != NULL); /* written in the file's spelling */
  struct symmTuneFile* g = malloc(sizeof(*g));
  CHECK_EQ_INT(symmTuneParse(text, (size_t)n, g, &line, err, sizeof(err)), 0);
  CHECK_EQ_INT(g->nrows, f->nrows);
  CHECK(memcmp(&g->machine, &f->machine, sizeof(f->machine)) == 0);
  CHECK(memcmp(g->rows, f->rows, sizeof(f->rows[0]) * (size_t)f->nrows) == 0);
  /* Sizes. */
  static const struct { size_t bytes; const char* text; } sizes[] = {
      {0, "0"}, {1000, "1000"}, {1024, "1K"}, {1536, "1536"}, {3 * MiB, "3M"}, {GiB, "1G"},
      {(size_t)1 << 40, "1T"}, {SIZE_MAX, "inf"}};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    char out[32];
    symmTuneFormatSize(sizes[i].bytes, out, sizeof(out));
    CHECK_EQ_STR(out, sizes[i].text);
    size_t back = 1;
    CHECK_EQ_INT(symmTuneParseSize(sizes[i].text, &back), 0);
    CHECK_EQ_INT(back, sizes[i].bytes);
  }
  size_t dummy;
  CHECK(symmTuneParseSize("", &dummy) != 0);
  CHECK(symmTuneParseSize("4k", &dummy) != 0);
  CHECK(symmTuneParseSize("4KB", &dummy) != 0);
  CHECK(symmTuneParseSize("-4", &dummy) != 0);
  CHECK(symmTuneParseSize("99999999999999999999", &dummy) != 0);
  CHECK(symmTuneParseSize("99999999T", &dummy) != 0);
  /* Wildcards in the machine line. */
  static const char wild[] = "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n";
  CHECK_EQ_INT(symmTuneParse(wild, strlen(wild), g, &line, err, sizeof(err)), 0);
  CHECK_EQ_INT(g->anyFields, SYMM_TUNE_FP_ALL);
  CHECK_EQ_INT(g->nrows, 0);
  free(g);
  free(f);
}

/* A file's first two lines, valid: what the rows below add to it is wrong. */
#define HEAD "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
static const struct {
  const char* text;
  int line;        /* where the error is reported (0: the whole file) */
  const char* msg; /* part of the message */
} bad[] = {
    {"", 0, "empty"},
    {"# only a comment\n", 0, "empty"},
    {"symmcoll-tuning 2\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n", 1, "version 2"},
    {"symmcoll-tuning\n", 1, "first line"},
    {"allreduce lamport<=1K\n", 1, "first line"},
    {"symmcoll-tuning 1\n", 0, "no machine line"},
    {"symmcoll-tuning 1\nallreduce lamport<=1K\n", 2, "before the machine"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=nvlink gpus=2 driver=1\n", 2, "'nccl' missing"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=nvlink gpus=2 driver=1 nccl=1 nccl=2\n", 2, "twice"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=nine link=nvlink gpus=2 driver=1 nccl=1\n", 2, "for arch"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=infiniband gpus=2 driver=1 nccl=1\n", 2, "for link"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=nvlink gpus=0 driver=1 nccl=1\n", 2, "for gpus"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=nvlink gpus=2 driver=1 nccl=1 color=red\n", 2, "unknown key"},
    {"symmcoll-tuning 1\nmachine gpu=x arch=90 link=nvlink gpus=2 driver=1 nccl=1 extra\n", 2, "key=value"},
    {"symmcoll-tuning 1\nmachine gpu=\"NVIDIA H200 arch=90\n", 2, "unclosed quote"},
    {HEAD "machine gpu=* arch=* link=* gpus=* driver=* nccl=*\n", 3, "second machine"},
    {HEAD "broadcast nccl<=1K\n", 3, "unknown line"},
    {HEAD "\nallreduce ranks=2\n", 4, "at least one"},
    {HEAD "allreduce push<=1K\n", 3, "not an algorithm of allreduce"},
    {HEAD "allgather twoshot<=1K\n", 3, "not an algorithm of allgather"},
    {HEAD "reducescatter ce<=1K\n", 3, "not an algorithm"},
    {HEAD "allreduce fast<=1K\n", 3, "not an algorithm"},
    {HEAD "allgather nccl_plain<=1K\n", 3, "not an algorithm"},
    {HEAD "reducescatter ncclplain\n", 3, "neither"},
    {HEAD "allreduce lamport<=1KB\n", 3, "bad size"},
    {HEAD "allreduce lamport<=\n", 3, "bad size"},
    {HEAD "allreduce ranks=1 nccl<=1\n", 3, "for ranks"},
    {HEAD "allreduce ranks=5-3 nccl<=1\n", 3, "for ranks"},
    {HEAD "allreduce ranks=2-99 nccl<=1\n", 3, "for ranks"},
    {HEAD "allreduce ranks=2-00000000000000000000000000008junk nccl<=1\n", 3, "for ranks"},
    {HEAD "allreduce dtype=3 nccl<=1\n", 3, "for dtype"},
    {HEAD "allreduce dtype=bf16 nccl<=1\n", 3, "for dtype"},
    {HEAD "allreduce reg=2 nccl<=1\n", 3, "for reg"},
    {HEAD "allreduce link=same_gpu nccl<=1\n", 3, "for link"},
    {HEAD "allreduce arch=sm90 nccl<=1\n", 3, "for arch"},
    {HEAD "allreduce arch=90 arch=80 nccl<=1\n", 3, "twice"},
    {HEAD "allreduce speed=9 nccl<=1\n", 3, "unknown key"},
    {HEAD "allreduce nccl<=1 ranks=2\n", 3, "after the steps"},
    {HEAD "allreduce ranks=2 lamport\n", 3, "neither"},
    {HEAD "allreduce nccl<=1 nccl<=2 "
     "nccl<=3 nccl<=4 nccl<=5 nccl<=6 nccl<=7 nccl<=8 nccl<=9 nccl<=10 nccl<=11 nccl<=12 nccl<=13\n", 3, "more than 12 steps"},
};

static void testBadFiles(void) {
  struct symmTuneFile* f = malloc(sizeof(*f));
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int line = -1;
    char err[256];
    const int rc = symmTuneParse(bad[i].text, strlen(bad[i].text), f, &line, err, sizeof(err));
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(line, bad[i].line);
    if (strstr(err, bad[i].msg) == NULL) {
      CHECK(!"message");
      fprintf(stderr, "  case %zu: '%s' lacks '%s'\n", i, err, bad[i].msg);
    }
  }
  /* Limits: a NUL byte, a long line, too many rows, a file too large. */
  int line;
  char err[256];
  CHECK_EQ_INT(symmTuneParse("symmcoll-tuning 1\n\0", 19, f, &line, err, sizeof(err)), -1);
  CHECK(strstr(err, "NUL") != NULL);
  /* A file cut short inside its last line ("256K" cut to "25"). */
  static const char cut[] = "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
                            "allreduce lamport<=25";
  CHECK_EQ_INT(symmTuneParse(cut, sizeof(cut) - 1, f, &line, err, sizeof(err)), -1);
  CHECK(strstr(err, "newline") != NULL);
  char* big = malloc(SYMM_TUNE_MAX_FILE_BYTES + 2);
  size_t n = (size_t)sprintf(big, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n#");
  memset(big + n, 'x', SYMM_TUNE_MAX_LINE);
  big[n + SYMM_TUNE_MAX_LINE] = '\n';
  CHECK_EQ_INT(symmTuneParse(big, n + SYMM_TUNE_MAX_LINE + 1, f, &line, err, sizeof(err)), -1);
  CHECK_EQ_INT(line, 3);
  CHECK(strstr(err, "longer") != NULL);
  n = (size_t)sprintf(big, "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n");
  for (int r = 0; r <= SYMM_TUNE_MAX_ROWS; r++) n += (size_t)sprintf(big + n, "allreduce nccl<=%d\n", r);
  CHECK_EQ_INT(symmTuneParse(big, n, f, &line, err, sizeof(err)), -1);
  CHECK_EQ_INT(line, 3 + SYMM_TUNE_MAX_ROWS);
  CHECK(strstr(err, "more than") != NULL);
  memset(big, '#', SYMM_TUNE_MAX_FILE_BYTES + 1);
  CHECK_EQ_INT(symmTuneParse(big, SYMM_TUNE_MAX_FILE_BYTES + 1, f, &line, err, sizeof(err)), -1);
  CHECK(strstr(err, "larger") != NULL);
  free(big);
  free(f);
}

static void testFingerprint(void) {
  struct symmTuneFile* f = malloc(sizeof(*f));
  int line;
  char err[256], why[512];
  CHECK_EQ_INT(symmTuneParse(goodText, strlen(goodText), f, &line, err, sizeof(err)), 0);
  CHECK_EQ_INT(symmTuneMachineMatches(f, &h200, why, sizeof(why)), 1);
  CHECK_EQ_STR(why, "");
  struct symmTuneMachine m = h200;
  snprintf(m.gpu, sizeof(m.gpu), "NVIDIA H100 80GB HBM3");
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  CHECK(strstr(why, "gpu NVIDIA H100 80GB HBM3 here, NVIDIA H200 in the file") != NULL);
  m = h200;
  m.nccl = 22907;
  m.gpus = 8;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  CHECK(strstr(why, "nccl 22907 here, 22809 in the file") != NULL);
  CHECK(strstr(why, "gpus 8 here, 2 in the file") != NULL);
  m = h200;
  m.link = SYMM_LINK_PCIE;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  CHECK(strstr(why, "link pcie here, nvlink in the file") != NULL);
  m = h200;
  m.arch = 100;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  m = h200;
  m.driver = 12080;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  /* '*' fields match anything. */
  f->anyFields = SYMM_TUNE_FP_DRIVER | SYMM_TUNE_FP_NCCL;
  m = h200;
  m.driver = 12080;
  m.nccl = 1;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 1);
  m.gpus = 4;
  CHECK_EQ_INT(symmTuneMachineMatches(f, &m, why, sizeof(why)), 0);
  /* The machine line as the tuning command writes it. */
  char text[256];
  symmTuneFormatMachine(&h200, text, sizeof(text));
  CHECK_EQ_STR(text, "machine gpu=\"NVIDIA H200\" arch=90 link=nvlink gpus=2 driver=13000 nccl=22809");
  free(f);
}

static char* writeFile(const char* name, const char* text) {
  char* path = NULL;
  if (asprintf(&path, "%s/%s", dir, name) < 0) return NULL;
  FILE* f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return path;
}

static void testSelect(void) {
  /* No file: the built-in table, hash 0, nothing said. */
  tunerLogTo(logPath, "WARN");
  uint64_t hash = 7;
  CHECK(symmTunerSelect(&h200, &hash) == NULL);
  CHECK_EQ_INT(hash, 0);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", NULL), 0);

  /* A file measured here replaces the rows it has; other calls keep the built-in rows. */
  static const char text[] =
      "symmcoll-tuning 1\n"
      "machine gpu=\"NVIDIA H200\" arch=90 link=nvlink gpus=2 driver=13000 nccl=22809\n"
      "allreduce ranks=2 dtype=2 arch=90 link=nvlink reg=0 nccl<=1K oneshot<=64M\n";
  char* path = writeFile("good.txt", text);
  tunerSetEnv("SYMMCOLL_TUNING_FILE", path);
  CHECK(symmTunerSelect(&h200, &hash) == NULL); /* read once: the first answer stays */
  symmTunerResetForTests();
  const struct symmTuneFile* t = symmTunerSelect(&h200, &hash);
  CHECK(t != NULL);
  CHECK_EQ_INT(hash, symmTuneHash(text, strlen(text)));
  CHECK(hash != 0);
  struct symmTuneInput in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 1024);
  in.table = t;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in.bytes = 1026;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_ONESHOT);
  in.bytes = 64 * MiB + 2; /* above the file's last step: NCCL, not the built-in two-shot */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  in.datatype = ncclFloat32; /* not measured: the built-in measured row */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  in.datatype = ncclBfloat16;
  in.registered = 1; /* not measured either */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_TWOSHOT);
  in = tin(SYMM_COLL_ALLREDUCE, 3, ncclBfloat16, ncclSum, 8 * KiB); /* untimed rule */
  in.table = t;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_LAMPORT);
  in.bytes = 8 * KiB + 2;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_ALGO_NCCL);
  /* Staging follows the file's rows too. */
  in = tin(SYMM_COLL_ALLREDUCE, 2, ncclBfloat16, ncclSum, 0);
  in.table = t;
  CHECK_EQ_INT(symmTunerLargestStaged(&in), SIZE_MAX); /* fp32 keeps the built-in row */

  /* Read once: a later change of the file (or of the variable) is not seen. */
  char* other = writeFile("good.txt", "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n");
  free(other);
  uint64_t again = 0;
  CHECK(symmTunerSelect(&h200, &again) == t);
  CHECK_EQ_INT(again, hash);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", NULL), 0);

  /* Another machine: refused with one WARN naming the file and the difference. */
  tunerCleanEnv();
  free(writeFile("good.txt", text));
  tunerSetEnv("SYMMCOLL_TUNING_FILE", path);
  struct symmTuneMachine h100 = h200;
  snprintf(h100.gpu, sizeof(h100.gpu), "NVIDIA H100 80GB HBM3");
  for (int i = 0; i < 3; i++) {
    hash = 7;
    CHECK(symmTunerSelect(&h100, &hash) == NULL);
    CHECK_EQ_INT(hash, 0);
  }
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "another machine"), 1);
  CHECK_EQ_INT(tunerCountLines(logPath, path, "NVIDIA H100 80GB HBM3 here"), 1);
  /* The same process may still hold a communicator on the machine the file was measured on. */
  CHECK(symmTunerSelect(&h200, &hash) != NULL);

  /* A parse error: one WARN with file:line, whole file refused. */
  tunerCleanEnv();
  tunerLogTo(logPath, "WARN");
  unlink(path);
  free(path);
  path = writeFile("bad.txt", "symmcoll-tuning 1\nmachine gpu=* arch=* link=* gpus=* driver=* nccl=*\n"
                              "allreduce nccl<=1K\nallreduce lamport<=1Q\n");
  tunerSetEnv("SYMMCOLL_TUNING_FILE", path);
  for (int i = 0; i < 3; i++) {
    CHECK(symmTunerSelect(&h200, &hash) == NULL);
    CHECK_EQ_INT(hash, 0);
  }
  char where[4200];
  snprintf(where, sizeof(where), "%s:4: bad size", path);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", where), 1);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", NULL), 1);
  /* A missing file: one WARN. */
  tunerCleanEnv();
  tunerLogTo(logPath, "WARN");
  tunerSetEnv("SYMMCOLL_TUNING_FILE", "/nonexistent/tuning.txt");
  CHECK(symmTunerSelect(&h200, &hash) == NULL);
  CHECK(symmTunerSelect(&h200, &hash) == NULL);
  CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "/nonexistent/tuning.txt"), 1);
  /* Not a regular file: a FIFO no one writes must not block the call, a device is not read. */
  char fifo[64];
  snprintf(fifo, sizeof(fifo), "/tmp/symmcoll_tune_fifo_%d", (int)getpid());
  CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
  const char* const odd[2] = {fifo, "/dev/zero"};
  for (int i = 0; i < 2; i++) {
    tunerCleanEnv();
    tunerLogTo(logPath, "WARN");
    tunerSetEnv("SYMMCOLL_TUNING_FILE", odd[i]);
    CHECK(symmTunerSelect(&h200, &hash) == NULL);
    CHECK_EQ_INT(tunerCountLines(logPath, "WARN", "not a regular file"), 1);
  }
  unlink(fifo);
  tunerCleanEnv();
  unlink(path);
  free(path);
}

/* Ranks agree on the file by its content: same bytes, same hash; any byte changed, another. */
static void testHash(void) {
  const size_t n = strlen(goodText);
  CHECK_EQ_INT(symmTuneHash(goodText, n), symmTuneHash(goodText, n));
  char copy[sizeof(goodText)];
  memcpy(copy, goodText, sizeof(goodText));
  copy[2] = 'W'; /* inside a comment */
  CHECK(symmTuneHash(copy, n) != symmTuneHash(goodText, n));
  CHECK(symmTuneHash("", 0) != 0);
}

static char* threadPath;
static const struct symmTuneFile* threadTables[8];
static uint64_t threadHashes[8];

static void* selectThread(void* arg) {
  const int t = (int)(intptr_t)arg;
  for (int i = 0; i < 100; i++) threadTables[t] = symmTunerSelect(&h200, &threadHashes[t]);
  return NULL;
}

static void testThreads(void) {
  threadPath = writeFile("threads.txt", goodText);
  tunerCleanEnv();
  tunerSetEnv("SYMMCOLL_TUNING_FILE", threadPath);
  pthread_t th[8];
  for (int t = 0; t < 8; t++) CHECK_EQ_INT(pthread_create(&th[t], NULL, selectThread, (void*)(intptr_t)t), 0);
  for (int t = 0; t < 8; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < 8; t++) {
    CHECK(threadTables[t] != NULL);
    CHECK(threadTables[t] == threadTables[0]);
    CHECK_EQ_INT(threadHashes[t], symmTuneHash(goodText, strlen(goodText)));
  }
  tunerCleanEnv();
  unlink(threadPath);
  free(threadPath);
}

/* The tuning files kept in the repository (perf/results/tune_*.txt, named on the command line)
 * parse, name a machine and have rows: what symmcoll-tune wrote stays loadable, also after
 * several runs were concatenated by hand. */
static void testRepositoryFiles(int nfiles, char** paths) {
  for (int i = 0; i < nfiles; i++) {
    FILE* fp = fopen(paths[i], "rb");
    CHECK(fp != NULL);
    if (fp == NULL) continue;
    static char text[SYMM_TUNE_MAX_FILE_BYTES + 1]; /* as the library reads it (tune_file.c) */
    const size_t n = fread(text, 1, sizeof(text), fp);
    fclose(fp);
    CHECK(n > 0 && n <= SYMM_TUNE_MAX_FILE_BYTES);
    struct symmTuneFile* f = calloc(1, sizeof(*f));
    CHECK(f != NULL);
    if (f == NULL) continue;
    char err[256] = "";
    int line = 0;
    const int rc = symmTuneParse(text, n, f, &line, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "%s:%d: %s\n", paths[i], line, err);
    CHECK_EQ_INT(rc, 0);
    CHECK(f->nrows > 0);
    CHECK(f->machine.gpus >= 2);
    free(f);
  }
}

int main(int argc, char** argv) {
  (void)symmLogLevel(); /* before any knob is read (see test_tuner.c) */
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  char log[4200];
  snprintf(log, sizeof(log), "%s/log.txt", dir);
  logPath = log;
  tunerCleanEnv();
  testGoodFile();
  testBadFiles();
  testFingerprint();
  testSelect();
  testHash();
  testThreads();
  testRepositoryFiles(argc - 1, argv + 1);
  unlink(log);
  rmdir(dir);
  return harnessReport("test_tuner_file");
}
