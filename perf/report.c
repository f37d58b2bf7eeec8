/* SPDX-License-Identifier: Apache-2.0 */
/* Output of the perf binaries: nccl-tests' result table, CSV rows, and the comparison table. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void perfFormatFloat(double value, int width, char* out) {
  /* Two decimals if they fit, then one, then none, then exponent notation. */
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, value) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

void perfPrintTableHeader(FILE* out, int reportCputime) {
  const char* timeName = reportCputime ? "cputime" : "time";
  fprintf(out, "#\n");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
          "", "", "", "");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
          "redop", "root", timeName, "algbw", "busbw", "#wrong", timeName, "algbw", "busbw", "#wrong");
  fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
          "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void perfPrintLinePreamble(FILE* out, size_t bytes, size_t count, const char* type, const char* op, int root) {
  fprintf(out, "%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, op, root);
}

void perfPrintLineBody(FILE* out, double usec, double algBw, double busBw, int checked, int64_t wrong) {
  char timeStr[8], algStr[7], busStr[7];
  perfFormatFloat(usec, 7, timeStr);
  perfFormatFloat(algBw, 6, algStr);
  perfFormatFloat(busBw, 6, busStr);
  if (checked)
    fprintf(out, "  %7s  %6s  %6s  %6g", timeStr, algStr, busStr, (double)wrong);
  else
    fprintf(out, "  %7s  %6s  %6s    N/A", timeStr, algStr, busStr);
}

void perfCsvHeader(FILE* out) {
  fprintf(out, "collective,library,bytes,count,type,redop,root,"
               "oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong\n");
}

void perfCsvRow(FILE* out, const struct perfResult* r) {
  fprintf(out, "%s,%s,%zu,%zu,%s,%s,%d,%.3f,%.3f,%.3f,%" PRId64 ",%.3f,%.3f,%.3f,%" PRId64 "\n", r->coll,
          r->library, r->bytes, r->count, r->type, r->op, r->root, r->usec[0], r->algBw[0], r->busBw[0],
          r->wrong[0], r->usec[1], r->algBw[1], r->busBw[1], r->wrong[1]);
}

/* Copies the next comma-separated field into dst; returns the rest, or NULL if none. */
static const char* nextField(const char* s, char* dst, size_t cap) {
  if (s == NULL) return NULL;
  const char* comma = strchr(s, ',');
  size_t len = comma ? (size_t)(comma - s) : strcspn(s, "\r\n");
  if (len >= cap) return NULL;
  memcpy(dst, s, len);
  dst[len] = '\0';
  return comma ? comma + 1 : s + len;
}

int perfCsvParse(const char* line, struct perfResult* r) {
  char field[15][64];
  const char* p = line;
  memset(r, 0, sizeof(*r));
  for (int i = 0; i < 15; i++) {
    p = nextField(p, field[i], sizeof(field[i]));
    if (p == NULL || (i < 14 && p[-1] != ',')) return -1;
  }
  if (strlen(field[0]) >= sizeof(r->coll) || strlen(field[1]) >= sizeof(r->library) ||
      strlen(field[4]) >= sizeof(r->type) || strlen(field[5]) >= sizeof(r->op))
    return -1;
  strcpy(r->coll, field[0]);
  strcpy(r->library, field[1]);
  strcpy(r->type, field[4]);
  strcpy(r->op, field[5]);
  char* end;
  r->bytes = (size_t)strtoull(field[2], &end, 10);
  if (*end || field[2][0] == '\0') return -1;
  r->count = (size_t)strtoull(field[3], &end, 10);
  if (*end) return -1;
  r->root = (int)strtol(field[6], &end, 10);
  if (*end) return -1;
  double* dst[6] = {&r->usec[0], &r->algBw[0], &r->busBw[0], &r->usec[1], &r->algBw[1], &r->busBw[1]};
  int idx[6] = {7, 8, 9, 11, 12, 13};
  for (int i = 0; i < 6; i++) {
    *dst[i] = strtod(field[idx[i]], &end);
    if (*end || field[idx[i]][0] == '\0') return -1;
  }
  r->wrong[0] = strtoll(field[10], &end, 10);
  if (*end) return -1;
  r->wrong[1] = strtoll(field[14], &end, 10);
  if (*end) return -1;
  return 0;
}

static const struct perfResult* findRow(const struct perfResult* rows, size_t n, const struct perfResult* key) {
  for (size_t i = 0; i < n; i++)
    if (rows[i].bytes == key->bytes && strcmp(rows[i].type, key->type) == 0 && strcmp(rows[i].op, key->op) == 0)
      return &rows[i];
  return NULL;
}

static void printSpeedup(FILE* out, double base, double ours) {
  if (base > 0 && ours > 0)
    fprintf(out, "  %7.2fx", base / ours);
  else
    fprintf(out, "  %8s", "-");
}

void perfPrintCompare(FILE* out, const struct perfResult* base, size_t nBase, const struct perfResult* ours,
                      size_t nOurs) {
  const char* baseName = nBase ? base[0].library : "nccl";
  const char* oursName = nOurs ? ours[0].library : "symmcoll";
  fprintf(out, "#\n# %s: %s vs %s (time in us; speedup = %s time / %s time; busbw in GB/s)\n",
          nOurs ? ours[0].coll : (nBase ? base[0].coll : "?"), oursName, baseName, baseName, oursName);
  fprintf(out, "# %10s  %8s  %6s  %-32s  %-32s  %-24s\n", "", "", "", "------------ out-of-place ------",
          "------------ in-place ----------", "------ busbw (oop) -----");
  fprintf(out, "# %10s  %8s  %6s  %11s  %11s  %8s  %11s  %11s  %8s  %11s  %11s  %6s\n", "size(B)", "type", "redop",
          baseName, oursName, "speedup", baseName, oursName, "speedup", baseName, oursName, "#wrong");
  for (size_t i = 0; i < nOurs; i++) {
    const struct perfResult* o = &ours[i];
    const struct perfResult* b = findRow(base, nBase, o);
    char t[4][12], bw[2][12];
    perfFormatFloat(b ? b->usec[0] : 0, 11, t[0]);
    perfFormatFloat(o->usec[0], 11, t[1]);
    perfFormatFloat(b ? b->usec[1] : 0, 11, t[2]);
    perfFormatFloat(o->usec[1], 11, t[3]);
    perfFormatFloat(b ? b->busBw[0] : 0, 11, bw[0]);
    perfFormatFloat(o->busBw[0], 11, bw[1]);
    int64_t wrong = 0;
    const struct perfResult* both[2] = {b, o};
    for (int k = 0; k < 2; k++)
      for (int p = 0; both[k] && p < 2; p++)
        if (both[k]->wrong[p] > 0) wrong += both[k]->wrong[p];
    fprintf(out, "  %10zu  %8s  %6s  %11s  %11s", o->bytes, o->type, o->op, b ? t[0] : "-", t[1]);
    printSpeedup(out, b ? b->usec[0] : 0, o->usec[0]);
    fprintf(out, "  %11s  %11s", b ? t[2] : "-", t[3]);
    printSpeedup(out, b ? b->usec[1] : 0, o->usec[1]);
    fprintf(out, "  %11s  %11s  %6" PRId64 "\n", b ? bw[0] : "-", bw[1], wrong);
  }
}
