/* SPDX-License-Identifier: Apache-2.0 */
/* Tuning files: parsing (all or nothing), the machine fingerprint, text forms, and loading
 * SYMMCOLL_TUNING_FILE once per process. Format: src/tuner/README.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"
#include "tune_table.h"

/* Not agreed by value: ranks may name the same file by different paths. What they must agree on
 * is the table in use, whose content hash symmTunerSelect returns for the setup record. */
SYMMCOLL_PARAM_STR(TuningFile, "TUNING_FILE", NULL,
                   "tuning file written by symmcoll-tune (src/tuner/README.md); refused on another "
                   "machine")

uint64_t symmTuneHash(const void* data, size_t len) {
  const unsigned char* b = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h == 0 ? 1 : h;
}

/* ---- sizes ------------------------------------------------------------------------------ */

int symmTuneParseSize(const char* text, size_t* bytes) {
  if (strcmp(text, "inf") == 0) {
    *bytes = SIZE_MAX;
    return 0;
  }
  if (text[0] < '0' || text[0] > '9') return -1;
  size_t v = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (SIZE_MAX - 9) / 10) return -1;
    v = v * 10 + (size_t)(*p - '0');
  }
  int shift = 0;
  switch (*p) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return -1;
  }
  if (*p != '\0' && p[1] != '\0') return -1;
  if (shift && v > (SIZE_MAX >> shift)) return -1;
  *bytes = v << shift;
  return 0;
}

int symmTuneFormatSize(size_t bytes, char* out, size_t outLen) {
  if (bytes == SIZE_MAX) return snprintf(out, outLen, "inf");
  static const char units[] = "TGMK";
  for (int i = 0; i < 4; i++) {
    const int shift = 10 * (4 - i);
    if (bytes != 0 && bytes % ((size_t)1 << shift) == 0)
      return snprintf(out, outLen, "%zu%c", bytes >> shift, units[i]);
  }
  return snprintf(out, outLen, "%zu", bytes);
}

/* ---- text forms ------------------------------------------------------------------------- */

static const char* linkName(int link) {
  switch (link) {
    case SYMM_LINK_NVLINK: return "nvlink";
    case SYMM_LINK_PCIE: return "pcie";
    case SYMM_LINK_SAME_GPU: return "same_gpu";
    case SYMM_TUNE_ANY: return "any";
    default: return "unknown";
  }
}

int symmTuneFormatMachine(const struct symmTuneMachine* m, char* out, size_t outLen) {
  char gpu[sizeof(m->gpu)];
  snprintf(gpu, sizeof(gpu), "%s", m->gpu);
  for (char* c = gpu; *c; c++)
    if (*c == '"' || *c == '\n' || *c == '\r') *c = '\''; /* a name never needs these */
  return snprintf(out, outLen, "machine gpu=\"%s\" arch=%d link=%s gpus=%d driver=%d nccl=%d", gpu,
                  m->arch, linkName(m->link), m->gpus, m->driver, m->nccl);
}

static int appendf(char* out, size_t outLen, size_t* used, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n =
      vsnprintf(*used < outLen ? out + *used : NULL, *used < outLen ? outLen - *used : 0, fmt, ap);
  va_end(ap);
  if (n > 0) *used += (size_t)n;
  return n;
}

static void formatKey(char* out, size_t outLen, size_t* used, const char* key, int value) {
  if (value == SYMM_TUNE_ANY)
    appendf(out, outLen, used, " %s=any", key);
  else
    appendf(out, outLen, used, " %s=%d", key, value);
}

int symmTuneFormatRow(const struct symmTuneRow* row, char* out, size_t outLen) {
  size_t used = 0;
  if (outLen > 0) out[0] = '\0';
  appendf(out, outLen, &used, "%s", symmCollName(row->coll));
  if (row->minRanks == row->maxRanks)
    appendf(out, outLen, &used, " ranks=%d", row->minRanks);
  else
    appendf(out, outLen, &used, " ranks=%d-%d", row->minRanks, row->maxRanks);
  formatKey(out, outLen, &used, "dtype", row->elemSize);
  formatKey(out, outLen, &used, "arch", row->arch);
  appendf(out, outLen, &used, " link=%s", linkName(row->link));
  formatKey(out, outLen, &used, "reg", row->registered);
  for (int s = 0; s < row->nsteps; s++) {
    char size[32];
    symmTuneFormatSize(row->steps[s].upTo, size, sizeof(size));
    appendf(out, outLen, &used, " %s<=%s", symmAlgoName(row->steps[s].algo), size);
  }
  return (int)used;
}

/* ---- parsing ---------------------------------------------------------------------------- */

struct parser {
  int line;
  char* err;
  size_t errLen;
};

static int fail(struct parser* p, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser* p, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, p->errLen, fmt, ap);
  va_end(ap);
  return -1;
}

/* Splits `line` in place into whitespace-separated tokens; a token may hold "quoted text" with
 * spaces after its '=' (gpu="NVIDIA H200"). Returns the count, or -1 on an unclosed quote. */
static int tokenize(char* line, char** tok, int maxTok) {
  int n = 0;
  char* c = line;
  for (;;) {
    while (*c == ' ' || *c == '\t') c++;
    if (*c == '\0') return n;
    if (n == maxTok) return -2;
    tok[n++] = c;
    char* w = c; /* quotes are dropped while copying */
    while (*c != '\0' && *c != ' ' && *c != '\t') {
      if (*c == '"') {
        c++;
        while (*c != '\0' && *c != '"') *w++ = *c++;
        if (*c != '"') return -1;
        c++;
      } else {
        *w++ = *c++;
      }
    }
    const int end = *c == '\0';
    *w = '\0';
    if (end) return n;
    c++;
  }
}

static int parseInt(const char* text, int lo, int hi, int* out) {
  if (text[0] == '\0') return -1;
  char* end = NULL;
  errno = 0;
  const long v = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parseKeyInt(const char* text, int lo, int hi, int* out) {
  if (strcmp(text, "any") == 0) {
    *out = SYMM_TUNE_ANY;
    return 0;
  }
  return parseInt(text, lo, hi, out);
}

static int parseLink(const char* text, int allowAny, int* out) {
  if (allowAny && strcmp(text, "any") == 0)
    *out = SYMM_TUNE_ANY;
  else if (strcmp(text, "nvlink") == 0)
    *out = SYMM_LINK_NVLINK;
  else if (strcmp(text, "pcie") == 0)
    *out = SYMM_LINK_PCIE;
  else
    return -1;
  return 0;
}

static int parseMachine(struct parser* p, char** tok, int ntok, struct symmTuneFile* out) {
  static const char* const keys[] = {"gpu", "arch", "link", "gpus", "driver", "nccl"};
  unsigned seen = 0;
  struct symmTuneMachine* m = &out->machine;
  for (int t = 1; t < ntok; t++) {
    char* eq = strchr(tok[t], '=');
    if (eq == NULL) return fail(p, "machine: '%s' is not key=value", tok[t]);
    *eq = '\0';
    const char* v = eq + 1;
    int k = 0;
    while (k < 6 && strcmp(tok[t], keys[k]) != 0) k++;
    if (k == 6)
      return fail(p, "machine: unknown key '%s' (gpu arch link gpus driver nccl)", tok[t]);
    if (seen & (1u << k)) return fail(p, "machine: '%s' given twice", tok[t]);
    seen |= 1u << k;
    if (strcmp(v, "*") == 0) {
      out->anyFields |= 1u << k;
      continue;
    }
    int bad = 0;
    switch (k) {
      case 0:
        bad = v[0] == '\0' || strlen(v) >= sizeof(m->gpu);
        if (!bad) snprintf(m->gpu, sizeof(m->gpu), "%s", v);
        break;
      case 1: bad = parseInt(v, 1, 10000, &m->arch); break;
      case 2: bad = parseLink(v, 0, &m->link); break;
      case 3: bad = parseInt(v, 1, 4096, &m->gpus); break;
      case 4: bad = parseInt(v, 1, 1000000000, &m->driver); break;
      default: bad = parseInt(v, 1, 1000000000, &m->nccl); break;
    }
    if (bad) return fail(p, "machine: bad value '%s' for %s", v, keys[k]);
  }
  for (int k = 0; k < 6; k++)
    if (!(seen & (1u << k)))
      return fail(p, "machine: '%s' missing (write * to match any)", keys[k]);
  return 0;
}

static int isCollName(const char* name) {
  for (int c = 0; c < SYMM_NCOLLS; c++)
    if (strcmp(name, symmCollName((enum symmColl)c)) == 0) return 1;
  return 0;
}

static int parseRow(struct parser* p, char** tok, int ntok, struct symmTuneRow* row) {
  *row = (struct symmTuneRow){.minRanks = 2,
                              .maxRanks = SYMM_MAX_RANKS,
                              .elemSize = SYMM_TUNE_ANY,
                              .arch = SYMM_TUNE_ANY,
                              .link = SYMM_TUNE_ANY,
                              .registered = SYMM_TUNE_ANY};
  int c = 0;
  while (c < SYMM_NCOLLS && strcmp(tok[0], symmCollName((enum symmColl)c)) != 0) c++;
  row->coll = (enum symmColl)c;
  unsigned seen = 0;
  for (int t = 1; t < ntok; t++) {
    char* le = strstr(tok[t], "<=");
    if (le != NULL) { /* a step */
      *le = '\0';
      const int a = symmAlgoParse(tok[t]);
      if (a < 0 || !symmTuneCollHasAlgo(row->coll, (enum symmAlgo)a))
        return fail(p, "'%s' is not an algorithm of %s", tok[t], tok[0]);
      if (row->nsteps == SYMM_TUNE_MAX_STEPS)
        return fail(p, "more than %d steps in a row", SYMM_TUNE_MAX_STEPS);
      struct symmTuneStep* s = &row->steps[row->nsteps++];
      s->algo = (enum symmAlgo)a;
      if (symmTuneParseSize(le + 2, &s->upTo) != 0)
        return fail(p, "bad size '%s' (bytes, with K M G T, or inf)", le + 2);
      continue;
    }
    char* eq = strchr(tok[t], '=');
    if (eq == NULL) return fail(p, "'%s' is neither key=value nor algo<=size", tok[t]);
    if (row->nsteps > 0) return fail(p, "key '%s' after the steps", tok[t]);
    *eq = '\0';
    const char* v = eq + 1;
    static const char* const keys[] = {"ranks", "dtype", "arch", "link", "reg"};
    int k = 0;
    while (k < 5 && strcmp(tok[t], keys[k]) != 0) k++;
    if (k == 5) return fail(p, "unknown key '%s' (ranks dtype arch link reg)", tok[t]);
    if (seen & (1u << k)) return fail(p, "'%s' given twice", tok[t]);
    seen |= 1u << k;
    int bad = 0;
    switch (k) {
      case 0: {
        if (strcmp(v, "any") == 0) break;
        char buf[32];
        if (strlen(v) >= sizeof(buf)) {
          bad = 1; /* never cut: "2-0000...8junk" must not read as 2-8 */
          break;
        }
        snprintf(buf, sizeof(buf), "%s", v);
        char* dash = strchr(buf, '-');
        if (dash) *dash = '\0';
        bad = parseInt(buf, 2, SYMM_MAX_RANKS, &row->minRanks) ||
              parseInt(dash ? dash + 1 : buf, 2, SYMM_MAX_RANKS, &row->maxRanks) ||
              row->minRanks > row->maxRanks;
        break;
      }
      case 1:
        bad = parseKeyInt(v, 1, 8, &row->elemSize) ||
              (row->elemSize != SYMM_TUNE_ANY && (row->elemSize & (row->elemSize - 1)) != 0);
        break;
      case 2: bad = parseKeyInt(v, 1, 10000, &row->arch); break;
      case 3: bad = parseLink(v, 1, &row->link); break;
      default: bad = parseKeyInt(v, 0, 1, &row->registered); break;
    }
    if (bad) return fail(p, "bad value '%s' for %s", v, keys[k]);
  }
  if (row->nsteps == 0) return fail(p, "a row needs at least one algo<=size step");
  return 0;
}

int symmTuneParse(const char* text, size_t len, struct symmTuneFile* out, int* errLine, char* err,
                  size_t errLen) {
  struct parser p = {.line = 0, .err = err, .errLen = errLen};
  memset(out, 0, sizeof(*out));
  *errLine = 0;
  if (errLen > 0) err[0] = '\0';
  if (len > SYMM_TUNE_MAX_FILE_BYTES)
    return fail(&p, "larger than %zu bytes", SYMM_TUNE_MAX_FILE_BYTES);
  if (memchr(text, '\0', len) != NULL) return fail(&p, "not a text file (NUL byte)");
  /* A file cut short (written while read) most often ends inside its last line. */
  if (len > 0 && text[len - 1] != '\n') return fail(&p, "its last line has no newline (cut short?)");
  int haveVersion = 0, haveMachine = 0;
  size_t pos = 0;
  char line[SYMM_TUNE_MAX_LINE + 1];
  while (pos < len) {
    p.line++;
    *errLine = p.line;
    const char* nl = memchr(text + pos, '\n', len - pos);
    size_t n = (nl ? (size_t)(nl - text) : len) - pos;
    if (n > SYMM_TUNE_MAX_LINE)
      return fail(&p, "line longer than %d characters", SYMM_TUNE_MAX_LINE);
    memcpy(line, text + pos, n);
    line[n] = '\0';
    pos += n + (nl ? 1 : 0);
    if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
    const char* first = line + strspn(line, " \t");
    if (first[0] == '#' || first[0] == '\0') continue;
    char* tok[2 * SYMM_TUNE_MAX_STEPS];
    const int ntok = tokenize(line, tok, 2 * SYMM_TUNE_MAX_STEPS);
    if (ntok == -1) return fail(&p, "unclosed quote");
    if (ntok == -2) return fail(&p, "too many fields");
    if (!haveVersion) {
      int v = 0;
      if (strcmp(tok[0], "symmcoll-tuning") != 0 || ntok != 2 || parseInt(tok[1], 0, 1000, &v) != 0)
        return fail(&p, "the first line must be 'symmcoll-tuning %d'", SYMM_TUNE_VERSION);
      if (v != SYMM_TUNE_VERSION)
        return fail(&p, "format version %d, this library reads %d", v, SYMM_TUNE_VERSION);
      haveVersion = 1;
    } else if (strcmp(tok[0], "machine") == 0) {
      if (haveMachine) return fail(&p, "a second machine line");
      if (parseMachine(&p, tok, ntok, out) != 0) return -1;
      haveMachine = 1;
    } else if (isCollName(tok[0])) {
      if (!haveMachine) return fail(&p, "a row before the machine line");
      if (out->nrows == SYMM_TUNE_MAX_ROWS)
        return fail(&p, "more than %d rows", SYMM_TUNE_MAX_ROWS);
      if (parseRow(&p, tok, ntok, &out->rows[out->nrows]) != 0) return -1;
      out->nrows++;
    } else {
      return fail(&p, "unknown line '%s' (machine, allreduce, allgather, reducescatter)", tok[0]);
    }
  }
  *errLine = 0;
  if (!haveVersion) return fail(&p, "empty: no 'symmcoll-tuning %d' line", SYMM_TUNE_VERSION);
  if (!haveMachine) return fail(&p, "no machine line");
  out->hash = symmTuneHash(text, len);
  return 0;
}

/* ---- the fingerprint -------------------------------------------------------------------- */

int symmTuneMachineMatches(const struct symmTuneFile* file, const struct symmTuneMachine* m,
                           char* why, size_t whyLen) {
  const struct symmTuneMachine* f = &file->machine;
  size_t used = 0;
  if (whyLen > 0) why[0] = '\0';
  const unsigned any = file->anyFields;
#define DIFF_INT(bit, field, name)                                                                \
  if (!(any & (bit)) && f->field != m->field)                                                     \
    appendf(why, whyLen, &used, "%s%s %d here, %d in the file", used ? "; " : "", name, m->field, \
            f->field);
  if (!(any & SYMM_TUNE_FP_GPU) && strcmp(f->gpu, m->gpu) != 0)
    appendf(why, whyLen, &used, "gpu %s here, %s in the file", m->gpu, f->gpu);
  DIFF_INT(SYMM_TUNE_FP_ARCH, arch, "arch")
  if (!(any & SYMM_TUNE_FP_LINK) && f->link != m->link)
    appendf(why, whyLen, &used, "%slink %s here, %s in the file", used ? "; " : "",
            linkName(m->link), linkName(f->link));
  DIFF_INT(SYMM_TUNE_FP_GPUS, gpus, "gpus")
  DIFF_INT(SYMM_TUNE_FP_DRIVER, driver, "driver")
  DIFF_INT(SYMM_TUNE_FP_NCCL, nccl, "nccl")
#undef DIFF_INT
  return used == 0;
}

/* ---- SYMMCOLL_TUNING_FILE, once per process --------------------------------------------- */

static pthread_mutex_t fileLock = PTHREAD_MUTEX_INITIALIZER;
static int fileRead;                 /* under fileLock */
static struct symmTuneFile* theFile; /* parsed, or NULL; never freed but by the test reset */
static char thePath[4096];
static int refusalWarned; /* under fileLock */

static void readFileLocked(void) {
  fileRead = 1;
  const char* path = symmParamTuningFile();
  if (path == NULL || path[0] == '\0') return;
  snprintf(thePath, sizeof(thePath), "%s", path);
  /* Non-blocking open and regular files only: a FIFO or a device must not hold a call. */
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    WARN("tuning file %s: %s; using the built-in table", path,
         fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) close(fd);
    return;
  }
  FILE* f = fdopen(fd, "rb");
  if (f == NULL) {
    WARN("tuning file %s: cannot open (%s); using the built-in table", path, strerror(errno));
    close(fd);
    return;
  }
  char* text = malloc(SYMM_TUNE_MAX_FILE_BYTES + 1);
  struct symmTuneFile* parsed = malloc(sizeof(*parsed));
  size_t len = text ? fread(text, 1, SYMM_TUNE_MAX_FILE_BYTES + 1, f) : 0;
  const int readErr = ferror(f);
  fclose(f);
  if (text == NULL || parsed == NULL || readErr) {
    WARN("tuning file %s: cannot read it (%s); using the built-in table", path,
         readErr ? "read error" : "out of memory");
  } else {
    int line = 0;
    char err[256];
    if (symmTuneParse(text, len, parsed, &line, err, sizeof(err)) != 0) {
      if (line > 0)
        WARN("tuning file %s:%d: %s; the whole file is refused, using the built-in table", path,
             line, err);
      else
        WARN("tuning file %s: %s; the whole file is refused, using the built-in table", path, err);
    } else {
      INFO(SYMM_TUNER, "tuning file %s: %d rows, hash %016llx", path, parsed->nrows,
           (unsigned long long)parsed->hash);
      theFile = parsed;
      parsed = NULL;
    }
  }
  free(parsed);
  free(text);
}

const struct symmTuneFile* symmTunerSelect(const struct symmTuneMachine* m, uint64_t* hash) {
  pthread_mutex_lock(&fileLock);
  if (!fileRead) readFileLocked();
  const struct symmTuneFile* use = theFile;
  char why[512];
  int warn = 0;
  if (use != NULL && !symmTuneMachineMatches(use, m, why, sizeof(why))) {
    use = NULL;
    warn = !refusalWarned;
    refusalWarned = 1;
  }
  pthread_mutex_unlock(&fileLock);
  if (warn)
    WARN("tuning file %s was measured on another machine (%s); using the built-in table", thePath,
         why);
  *hash = use != NULL ? use->hash : 0;
  return use;
}

const char* symmTunerFilePath(void) { return symmParamTuningFile(); }

void symmTuneFileReset(void) {
  pthread_mutex_lock(&fileLock);
  free(theFile);
  theFile = NULL;
  fileRead = 0;
  refusalWarned = 0;
  thePath[0] = '\0';
  pthread_mutex_unlock(&fileLock);
}
