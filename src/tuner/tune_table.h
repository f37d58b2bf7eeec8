/* SPDX-License-Identifier: Apache-2.0 */
/* The tuner's table: rows of (collective, ranks, element size, arch, link, registration) ->
 * size steps, built in or read from a tuning file (format in src/tuner/README.md). Internal to
 * src/tuner, the tuning command (tools/tune*.c) and the tests. */
#ifndef SYMMCOLL_TUNE_TABLE_H
#define SYMMCOLL_TUNE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "tuner.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SYMM_TUNE_ANY (-1)     /* a row key that matches every value */
#define SYMM_TUNE_MAX_STEPS 12 /* steps per row */
#define SYMM_TUNE_MAX_ROWS 256 /* rows per file */
#define SYMM_TUNE_MAX_LINE 1024
#define SYMM_TUNE_VERSION 1

/* Messages of at most `upTo` bytes (symmCollBytes) may run `algo`. */
struct symmTuneStep {
  size_t upTo;
  enum symmAlgo algo;
};

/* One row. Steps are tried in order: the first whose bound covers the message and whose
 * algorithm is available for the call wins; none: NCCL. */
struct symmTuneRow {
  enum symmColl coll;
  int minRanks, maxRanks;
  int elemSize;   /* 1, 2, 4, 8 or SYMM_TUNE_ANY */
  int arch;       /* compute capability * 10, or SYMM_TUNE_ANY */
  int link;       /* SYMM_LINK_NVLINK, SYMM_LINK_PCIE or SYMM_TUNE_ANY (SAME_GPU reads as NVLINK) */
  int registered; /* 0, 1 or SYMM_TUNE_ANY */
  int nsteps;
  struct symmTuneStep steps[SYMM_TUNE_MAX_STEPS];
};

/* Fields of the machine line; a bit set in symmTuneFile.anyFields: written as '*'. */
enum {
  SYMM_TUNE_FP_GPU = 1u << 0,
  SYMM_TUNE_FP_ARCH = 1u << 1,
  SYMM_TUNE_FP_LINK = 1u << 2,
  SYMM_TUNE_FP_GPUS = 1u << 3,
  SYMM_TUNE_FP_DRIVER = 1u << 4,
  SYMM_TUNE_FP_NCCL = 1u << 5,
  SYMM_TUNE_FP_ALL = (1u << 6) - 1
};

struct symmTuneFile {
  uint64_t hash; /* symmTuneHash of the file's bytes */
  struct symmTuneMachine machine;
  unsigned anyFields;
  int nrows;
  struct symmTuneRow rows[SYMM_TUNE_MAX_ROWS];
};

/* The built-in rows (tune_table.c), in lookup order. */
const struct symmTuneRow* symmTuneBuiltinRows(int* nrows);

/* 1 when `algo` is one of `coll`'s algorithms (NCCL included): what a file row may name. */
int symmTuneCollHasAlgo(enum symmColl coll, enum symmAlgo algo);

/* The row deciding `in`: the first matching row of `file` (may be NULL), else of the built-in
 * table; NULL when none matches (the call forwards). */
const struct symmTuneRow* symmTuneFindRow(const struct symmTuneFile* file,
                                          const struct symmTuneInput* in);
/* The row's choice for `bytes` among the algorithms in `avail` (bits 1u << algo). */
enum symmAlgo symmTuneRowPick(const struct symmTuneRow* row, size_t bytes, unsigned avail);

/* Parses a tuning file's text (`len` bytes). 0 on success; -1 with *errLine (1-based, 0 when
 * the error concerns the whole file) and a message in err. `out` is complete only on success. */
int symmTuneParse(const char* text, size_t len, struct symmTuneFile* out, int* errLine, char* err,
                  size_t errLen);
/* 1 when the file was measured on `m` (fields written '*' match anything); else 0 and the
 * differing fields in why ("gpu NVIDIA H100 80GB HBM3 here, NVIDIA H200 in the file"). */
int symmTuneMachineMatches(const struct symmTuneFile* file, const struct symmTuneMachine* m,
                           char* why, size_t whyLen);
/* FNV-1a of the bytes; never 0 (0 stands for the built-in table). */
uint64_t symmTuneHash(const void* data, size_t len);

/* Text forms as the file has them. Each returns the length written (snprintf's convention). */
int symmTuneFormatSize(size_t bytes, char* out, size_t outLen); /* "256K", "inf", "1000" */
int symmTuneFormatMachine(const struct symmTuneMachine* m, char* out, size_t outLen);
int symmTuneFormatRow(const struct symmTuneRow* row, char* out, size_t outLen);
/* Parses a size as the file writes it ("inf" = SIZE_MAX). 0 on success. */
int symmTuneParseSize(const char* text, size_t* bytes);

/* Tests only: forget the loaded SYMMCOLL_TUNING_FILE, the warnings given and the choices logged,
 * so that the next symmTunerSelect reads the file again. Not safe while other threads tune. */
void symmTunerResetForTests(void);
void symmTuneFileReset(void); /* its part in tune_file.c */

#ifdef __cplusplus
}
#endif

#endif
