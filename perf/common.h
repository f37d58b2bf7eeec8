/* SPDX-License-Identifier: Apache-2.0 */
/* The perf binaries' shared pieces: options, size sweep, collective descriptors, table and CSV
 * output, host-side data checks (all plain C, tested without a GPU), and the driver entry. */
#ifndef PERF_COMMON_H
#define PERF_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pattern.h"

/* Exit codes of the binaries. */
enum {
  PERF_EXIT_OK = 0,
  PERF_EXIT_FAILURE = 1, /* CUDA/NCCL/system failure, no GPU, timeout */
  PERF_EXIT_USAGE = 2,   /* bad command line */
  PERF_EXIT_WRONG = 3,   /* the data check found wrong elements */
};

/* The -1 of -d all / -o all. */
#define PERF_ALL (-1)

enum perfAlloc { PERF_ALLOC_NCCL = 0, PERF_ALLOC_CUDA = 1 };
enum perfRegister { PERF_REG_NONE = 0, PERF_REG_LOCAL = 1, PERF_REG_SYMMETRIC = 2 };
enum perfAverage { PERF_AVG_RANK0 = 0, PERF_AVG_MEAN = 1, PERF_AVG_MIN = 2, PERF_AVG_MAX = 3 };

struct perfOptions {
  int nThreads;       /* -t */
  int nGpus;          /* -g: GPUs per thread */
  int nProcs;         /* -P: processes forked by the built-in launcher (0: none) */
  int shareGpus;      /* --share_gpus: rank i of a process on GPU i % (GPUs); test bootstrap only */
  int mpi;            /* --mpi: ranks come from MPI (only in builds with MPI) */
  size_t minBytes;    /* -b */
  size_t maxBytes;    /* -e */
  size_t stepBytes;   /* -i */
  size_t stepFactor;  /* -f (1: use stepBytes) */
  int iters;          /* -n */
  int warmupIters;    /* -w */
  int check;          /* -c: data-check iterations (0: off) */
  int op;             /* -o: enum perfOp or PERF_ALL */
  int type;           /* -d: enum perfType or PERF_ALL */
  int root;           /* -r (unused by the three collectives; printed as nccl-tests does) */
  int blocking;       /* -z: 0 async, 1 sync+barrier per op, 2 sync per op, 3 sync+barrier, time w/o barrier */
  int timeout;        /* -T seconds (0: none) */
  int graphLaunches;  /* -G: replays of one captured graph of `iters` ops (0: eager) */
  int reportCputime;  /* -C: CPU time in the time column, and device attributes in the header */
  int average;        /* -a: enum perfAverage */
  int registration;   /* -R: enum perfRegister */
  int unalign;        /* -u: element offset of every buffer */
  int alloc;          /* --alloc: enum perfAlloc */
  int runCycles;      /* -N, --run_cycles: repeat the sweep (as nccl-tests' -N) */
  const char* csvPath;     /* --csv: also write machine-readable rows here */
  const char* compareOut;  /* --compare / -X: compare mode, output prefix (CSV, PNG) */
  int compareReps;         /* --compare_reps: runs of each library in compare mode (medians) */
  const char* library;     /* --label: library name written in CSV rows */
};

/* Defaults as nccl-tests has them. */
void perfOptionsDefault(struct perfOptions* opt);

/* Parses argv into opt. Returns 0, 1 for -h (usage printed to `out`), or -1 with a message in
 * err. Uses getopt_long (resets it first, so it may be called repeatedly). */
int perfParseArgs(int argc, char** argv, struct perfOptions* opt, int collHasOp, char* err, size_t errLen);
void perfPrintUsage(FILE* out, const char* prog);

/* "8", "1K", "16M", "1G", "1.5M" (binary units; a trailing B is allowed). 0 or -1 (bad). */
int perfParseSize(const char* text, size_t* bytes);
/* Type and op names (nccl-tests spelling; a few aliases such as bf16, fp16, fp32 accepted). */
int perfTypeFromName(const char* name); /* enum perfType, PERF_ALL for "all", -2 if unknown */
int perfOpFromName(const char* name);   /* enum perfOp, PERF_ALL for "all", -2 if unknown */
const char* perfTypeName(int type);
const char* perfOpName(int op);

/* The benchmark sizes: min, then *factor (factor > 1) or +step, up to max. Returns how many
 * there are (the first `cap` are stored; sizes may be NULL to count). */
size_t perfSweepSizes(const struct perfOptions* opt, size_t* sizes, size_t cap);
/* The warm-up sizes: min, 2*min, 4*min ... up to max (as nccl-tests). */
size_t perfWarmupSizes(const struct perfOptions* opt, size_t* sizes, size_t cap);

/* ---- collectives ----------------------------------------------------------------------- */
struct perfCounts {
  size_t sendCount, recvCount; /* elements per rank buffer */
  size_t paramCount;           /* the count passed to NCCL */
  size_t sendInplaceOffset;    /* elements, times rank: where in-place input sits in recvbuff */
  size_t recvInplaceOffset;    /* elements, times rank: where in-place output sits in recvbuff */
};

struct perfColl {
  const char* name; /* "AllReduce" */
  int kind;         /* enum perfCollKind */
  int hasOp;        /* takes a reduction op */
  /* count = bytes / element size of the sweep size. */
  void (*getCounts)(size_t count, int eltSize, int nranks, struct perfCounts* out);
  /* count = paramCount; sec = time of one op. */
  void (*getBw)(size_t count, int eltSize, double sec, int nranks, double* algBw, double* busBw);
};
extern const struct perfColl perfAllReduce;
extern const struct perfColl perfAllGather;
extern const struct perfColl perfReduceScatter;

/* ---- output ---------------------------------------------------------------------------- */
/* A number in `width` characters with as many decimals as fit (nccl-tests' style). */
void perfFormatFloat(double value, int width, char* out);
void perfPrintTableHeader(FILE* out, int reportCputime);
void perfPrintLinePreamble(FILE* out, size_t bytes, size_t count, const char* type, const char* op, int root);
void perfPrintLineBody(FILE* out, double usec, double algBw, double busBw, int checked, int64_t wrong);

/* One table row, as carried from compare-mode children to the parent. */
struct perfResult {
  char coll[32], library[32], type[16], op[16];
  size_t bytes, count;
  int root;
  double usec[2], algBw[2], busBw[2]; /* [0] out-of-place, [1] in-place */
  int64_t wrong[2];                   /* -1: not checked */
};
void perfCsvHeader(FILE* out);
void perfCsvRow(FILE* out, const struct perfResult* r);
/* Parses a row written by perfCsvRow. 0 on success. */
int perfCsvParse(const char* line, struct perfResult* r);
/* Side by side: NCCL alone against libsymmcoll, matched by (type, op, bytes). */
void perfPrintCompare(FILE* out, const struct perfResult* base, size_t nBase, const struct perfResult* ours,
                      size_t nOurs);

/* ---- host-side data check -------------------------------------------------------------- */
/* Fills a host buffer as rank `rank`'s input of the collective (what the device fill does). */
void perfFillHost(void* buf, size_t count, int kind, int type, int op, int nranks, int rank, uint64_t seed);
/* Counts wrong elements of `rank`'s result (what the device check does). */
int64_t perfCountWrongHost(const void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                           uint64_t seed, size_t blockCount);

/* ---- device side (kernels.cu) ---------------------------------------------------------- */
#ifdef PERF_HAVE_CUDA
#include <cuda_runtime.h>
#ifdef __cplusplus
extern "C" {
#endif
cudaError_t perfFillDevice(void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                           uint64_t seed, cudaStream_t stream);
/* Adds the number of wrong elements to *wrongDev (a device counter). */
cudaError_t perfCheckDevice(const void* buf, size_t count, int kind, int type, int op, int nranks, int rank,
                            uint64_t seed, size_t blockCount, unsigned long long* wrongDev, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif

/* ---- driver (common.c) ----------------------------------------------------------------- */
int perfMain(const struct perfColl* coll, int argc, char** argv);

#endif
