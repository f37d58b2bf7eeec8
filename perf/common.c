/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver (nccl-tests' common.cu, rewritten in C): ranks, communicators, buffers,
 * warm-up, timed loops (eager or one CUDA graph per replay), data checks, and the table.
 * This file: the process (devices, buffers, communicators, threads); driver.h lists the rest. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "driver.h"

_Static_assert((int)ncclInt8 == PERF_INT8 && (int)ncclUint64 == PERF_UINT64 && (int)ncclFloat16 == PERF_HALF &&
                   (int)ncclFloat32 == PERF_FLOAT && (int)ncclFloat64 == PERF_DOUBLE &&
                   (int)ncclBfloat16 == PERF_BF16 && (int)ncclFloat8e4m3 == PERF_FP8E4M3 &&
                   (int)ncclFloat8e5m2 == PERF_FP8E5M2,
               "perfType codes must equal ncclDataType_t");
_Static_assert((int)ncclSum == PERF_SUM && (int)ncclProd == PERF_PROD && (int)ncclMax == PERF_MAX &&
                   (int)ncclMin == PERF_MIN && (int)ncclAvg == PERF_AVG,
               "perfOp codes must equal ncclRedOp_t");

/* ---- process setup --------------------------------------------------------------------- */

#define PERF_DEVICE_TEXT 16384

/* The GPU of this process's local rank i: one each, or wrapped onto the GPUs (--share_gpus). */
static int localDevice(const struct perfRun* run, int firstDev, int i) {
  return run->opt.shareGpus ? (firstDev + i) % run->nDevices : firstDev + i;
}

static int deviceReport(struct perfRun* run, int firstDev, char* text, size_t cap, size_t* minMem) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  size_t len = 0;
  for (int i = 0; i < run->nLocal; i++) {
    int dev = localDevice(run, firstDev, i);
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    if (prop.totalGlobalMem < *minMem) *minMem = prop.totalGlobalMem;
    len += (size_t)snprintf(text + len, len < cap ? cap - len : 0,
                            "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n",
                            run->firstRank + i, 0, (int)getpid(), host, dev, prop.pciDomainID, prop.pciBusID,
                            prop.pciDeviceID, prop.name);
    if (run->opt.reportCputime && len < cap) {
      /* informational: an attribute this runtime does not report shows as -1 */
      static const enum cudaDeviceAttr attrs[6] = {
          cudaDevAttrMultiProcessorCount, cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
          cudaDevAttrMemoryClockRate,     cudaDevAttrGlobalMemoryBusWidth,   cudaDevAttrL2CacheSize};
      int v[6];
      for (int k = 0; k < 6; k++)
        if (cudaDeviceGetAttribute(&v[k], attrs[k], dev) != cudaSuccess) v[k] = -1;
      (void)cudaGetLastError();
      int sms = v[0], major = v[1], minor = v[2], memClock = v[3], busWidth = v[4], l2 = v[5];
      len += (size_t)snprintf(text + len, len < cap ? cap - len : 0,
                              "#          sm_%d%d, %d SMs, %.1f GiB, memory %d MHz x %d bit, L2 %d MiB\n", major,
                              minor, sms, (double)prop.totalGlobalMem / (1 << 30), memClock < 0 ? -1 : memClock / 1000,
                              busWidth, l2 < 0 ? -1 : l2 >> 20);
    }
  }
  if (len >= cap) strcpy(text + cap - 5, "...\n");
  return 0;
}

static void printHeader(const struct perfRun* run) {
  const struct perfOptions* o = &run->opt;
  printf("# libsymmcoll perf (nccl-tests format) nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE,
         run->ncclVersion);
  printf("# Collective test starting: %s\n", run->prog);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: %d unalign: %d\n",
         o->nThreads, o->nGpus, o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : o->stepBytes,
         o->stepFactor > 1 ? "factor" : "bytes", o->warmupIters, o->iters, o->check, o->graphLaunches, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each iteration\n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each iteration, no barrier\n");
  if (o->blocking == 3) printf("# Blocking Enabled: wait and barrier after each iteration; time excludes barrier\n");
  printf("# Ranks: %d (%d process%s via %s, %d thread%s x %d GPU%s each)%s%s\n", run->nranks, run->world.nProcs,
         run->world.nProcs > 1 ? "es" : "", run->world.ops->name, o->nThreads, o->nThreads > 1 ? "s" : "",
         o->nGpus, o->nGpus > 1 ? "s" : "",
         o->registration == PERF_REG_SYMMETRIC ? ", symmetric registration"
         : o->registration == PERF_REG_LOCAL   ? ", local registration"
                                               : "",
         o->alloc == PERF_ALLOC_CUDA ? ", cudaMalloc buffers" : "");
  const char* disabled = getenv("SYMMCOLL_DISABLE");
  printf("# SYMMCOLL_DISABLE=%s\n", disabled ? disabled : "(unset)");
  printf("#\n# Using devices\n");
}

static int allocBuffers(struct perfRun* run) {
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    CUDA_TRY(cudaSetDevice(g->dev));
    if (run->opt.alloc == PERF_ALLOC_CUDA) {
      CUDA_TRY(cudaMalloc(&g->sendAlloc, run->allocBytes));
      CUDA_TRY(cudaMalloc(&g->recvAlloc, run->allocBytes));
    } else {
      NCCL_TRY(ncclMemAlloc(&g->sendAlloc, run->allocBytes));
      NCCL_TRY(ncclMemAlloc(&g->recvAlloc, run->allocBytes));
    }
    CUDA_TRY(cudaMalloc((void**)&g->wrongDev, sizeof(*g->wrongDev)));
  }
  return 0;
}

/* 0, or PERF_EXIT_FAILURE with a line naming `call` when r is an error. */
static int ncclRc(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return 0;
  PERF_LOG_NCCL(r, call);
  return PERF_EXIT_FAILURE;
}

/* Ends a group of calls that returned rc: rc, or the group's own failure when rc was 0. */
static int endGroup(int rc, const char* what) {
  const ncclResult_t end = ncclGroupEnd();
  return rc != 0 ? rc : ncclRc(end, what);
}

static int registerBuffers(struct perfRun* run) {
  if (run->opt.registration == PERF_REG_NONE) return 0;
  NCCL_TRY(ncclGroupStart());
  int rc = 0;
  for (int i = 0; i < run->nLocal && rc == 0; i++) {
    struct perfGpu* g = &run->gpus[i];
    ncclResult_t r;
    if (run->opt.registration == PERF_REG_SYMMETRIC) {
      r = ncclCommWindowRegister(g->comm, g->sendAlloc, run->allocBytes, &g->sendWin, NCCL_WIN_COLL_SYMMETRIC);
      if (r == ncclSuccess)
        r = ncclCommWindowRegister(g->comm, g->recvAlloc, run->allocBytes, &g->recvWin, NCCL_WIN_COLL_SYMMETRIC);
    } else {
      r = ncclCommRegister(g->comm, g->sendAlloc, run->allocBytes, &g->sendHandle);
      if (r == ncclSuccess) r = ncclCommRegister(g->comm, g->recvAlloc, run->allocBytes, &g->recvHandle);
    }
    rc = ncclRc(r, run->opt.registration == PERF_REG_SYMMETRIC ? "ncclCommWindowRegister" : "ncclCommRegister");
  }
  return endGroup(rc, "ncclGroupEnd (registration)");
}

static void teardown(struct perfRun* run) {
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    if (cudaSetDevice(g->dev) != cudaSuccess) continue;
    if (g->comm) {
      if (g->sendWin) NCCL_WARN(ncclCommWindowDeregister(g->comm, g->sendWin));
      if (g->recvWin) NCCL_WARN(ncclCommWindowDeregister(g->comm, g->recvWin));
      if (g->sendHandle) NCCL_WARN(ncclCommDeregister(g->comm, g->sendHandle));
      if (g->recvHandle) NCCL_WARN(ncclCommDeregister(g->comm, g->recvHandle));
    }
  }
  for (int i = 0; i < run->nLocal; i++) /* after every deregistration: they may need all ranks */
    if (run->gpus[i].comm) NCCL_WARN(ncclCommDestroy(run->gpus[i].comm));
  for (int i = 0; i < run->nLocal; i++) {
    struct perfGpu* g = &run->gpus[i];
    if (cudaSetDevice(g->dev) != cudaSuccess) continue;
    if (run->opt.alloc == PERF_ALLOC_CUDA) {
      if (g->sendAlloc) CUDA_WARN(cudaFree(g->sendAlloc));
      if (g->recvAlloc) CUDA_WARN(cudaFree(g->recvAlloc));
    } else {
      if (g->sendAlloc) NCCL_WARN(ncclMemFree(g->sendAlloc));
      if (g->recvAlloc) NCCL_WARN(ncclMemFree(g->recvAlloc));
    }
    if (g->wrongDev) CUDA_WARN(cudaFree(g->wrongDev));
    if (g->stream) CUDA_WARN(cudaStreamDestroy(g->stream));
  }
}

static int initComms(struct perfRun* run, const ncclUniqueId* id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (run->ncclVersion >= NCCL_VERSION(2, 28, 0)) config.nvlinkCentricSched = 1; /* as nccl-tests sets it */
#endif
  NCCL_TRY(ncclGroupStart());
  int rc = 0;
  for (int i = 0; i < run->nLocal && rc == 0; i++) {
    struct perfGpu* g = &run->gpus[i];
    cudaError_t e = cudaSetDevice(g->dev);
    if (e != cudaSuccess) {
      PERF_LOG_CUDA(e, "cudaSetDevice");
      rc = PERF_EXIT_FAILURE;
      break;
    }
    rc = ncclRc(ncclCommInitRankConfig(&g->comm, run->nranks, *id, g->rank, &config), "ncclCommInitRankConfig");
  }
  return endGroup(rc, "ncclGroupEnd (communicator creation)");
}

/* Runs this process's share of the ranks (all of them unless -P or MPI split them). */
static int runProcess(struct perfRun* run) {
  struct perfOptions* opt = &run->opt;
  struct perfWorld* w = &run->world;
  int isMainProc = w->proc == 0;
  int rc = 0;
  run->nLocal = opt->nThreads * opt->nGpus;
  run->nranks = w->nProcs * run->nLocal;
  run->firstRank = w->proc * run->nLocal;

  int nDev = 0;
  cudaError_t e = cudaGetDeviceCount(&nDev);
  if (e != cudaSuccess || nDev == 0) {
    fprintf(stderr, "%s: no usable CUDA device (%s); this benchmark needs GPUs\n", run->prog,
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return PERF_EXIT_FAILURE;
  }
  run->nDevices = nDev;
  int firstDev = w->localRank * run->nLocal;
  if (firstDev + run->nLocal > nDev && !opt->shareGpus) {
    fprintf(stderr, "%s: invalid number of GPUs: %d requested but only %d were found (process %d)\n", run->prog,
            firstDev + run->nLocal, nDev, w->proc);
    return PERF_EXIT_USAGE;
  }
  if (ncclGetVersion(&run->ncclVersion) != ncclSuccess) run->ncclVersion = 0;
  if (isMainProc) printHeader(run);

  /* Device lines of every process, printed by process 0 in rank order. */
  char* mine = calloc(1, PERF_DEVICE_TEXT);
  char* all = isMainProc ? calloc((size_t)w->nProcs, PERF_DEVICE_TEXT) : NULL;
  size_t minMem = (size_t)-1;
  if (mine == NULL || (isMainProc && all == NULL)) rc = PERF_EXIT_FAILURE;
  if (rc == 0) rc = deviceReport(run, firstDev, mine, PERF_DEVICE_TEXT, &minMem);
  double memAll = (double)minMem;
  /* every process takes part in the exchanges even after a local failure, or the others hang */
  if (w->ops->gather(w->impl, mine, all, PERF_DEVICE_TEXT) != 0 ||
      w->ops->allreduce(w->impl, &memAll, PERF_RED_MIN) != 0)
    rc = PERF_EXIT_FAILURE;
  if (isMainProc && all)
    for (int p = 0; p < w->nProcs; p++) fputs(all + (size_t)p * PERF_DEVICE_TEXT, stdout);
  free(all);
  free(mine);
  if (rc) return rc;

  /* Two buffers per GPU (no expected buffer: the check computes expected values itself). Keep
   * 1 GiB plus 1 GiB per 16 GiB (at most 4) for NCCL and the library, as nccl-tests does. */
  const size_t gib = (size_t)1 << 30;
  size_t mem = (size_t)memAll;
  size_t reserve = ((mem + 16 * gib - 1) / (16 * gib)) * gib;
  if (reserve > 4 * gib) reserve = 4 * gib;
  size_t limit = mem > reserve + gib ? (mem - reserve - gib) / 2 : 0;
  if (opt->maxBytes > limit) {
    opt->maxBytes = limit;
    if (opt->minBytes > limit) opt->minBytes = limit;
    if (isMainProc) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", limit);
  }
  run->allocBytes = opt->maxBytes + 8 * (size_t)opt->unalign + 256;

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (isMainProc) rc = ncclRc(ncclGetUniqueId(&id), "ncclGetUniqueId");
  double idFailed = rc;
  if (w->ops->allreduce(w->impl, &idFailed, PERF_RED_MAX) != 0 || idFailed != 0) return PERF_EXIT_FAILURE;
  if (w->ops->bcast(w->impl, &id, sizeof(id)) != 0) return PERF_EXIT_FAILURE;

  run->gpus = calloc((size_t)run->nLocal, sizeof(*run->gpus));
  struct perfThread* threads = calloc((size_t)opt->nThreads, sizeof(*threads));
  if (run->gpus == NULL || threads == NULL) {
    rc = PERF_EXIT_FAILURE;
    goto free_arrays;
  }
  for (int i = 0; i < run->nLocal; i++) {
    run->gpus[i].dev = localDevice(run, firstDev, i);
    run->gpus[i].rank = run->firstRank + i;
    e = cudaSetDevice(run->gpus[i].dev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&run->gpus[i].stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      PERF_LOG_CUDA(e, "cudaStreamCreateWithFlags");
      rc = PERF_EXIT_FAILURE;
      goto release_resources;
    }
  }
  rc = initComms(run, &id);
  if (rc == 0) rc = allocBuffers(run);
  if (rc == 0) rc = registerBuffers(run);
  if (rc) goto release_resources;

  if (isMainProc) {
    perfPrintTableHeader(stdout, opt->reportCputime);
    fflush(stdout);
  }
  if (isMainProc && opt->csvPath) {
    run->csv = fopen(opt->csvPath, "w");
    if (run->csv == NULL)
      fprintf(stderr, "%s: cannot write %s: %s\n", run->prog, opt->csvPath, strerror(errno));
    else
      perfCsvHeader(run->csv);
  }

  for (int t = 0; t < opt->nThreads; t++) {
    threads[t].run = run;
    threads[t].index = t;
    threads[t].nGpus = opt->nGpus;
    threads[t].gpus = run->gpus + (size_t)t * opt->nGpus;
    threads[t].isMain = isMainProc && t == 0;
  }
  int started = 1;
  for (int t = 1; t < opt->nThreads; t++) {
    if (pthread_create(&threads[t].tid, NULL, perfThreadMain, &threads[t]) != 0) {
      fprintf(stderr, "%s: pthread_create failed\n", run->prog);
      perfWorldAbort(w);
      rc = PERF_EXIT_FAILURE;
      break;
    }
    started++;
  }
  if (rc == 0) perfThreadMain(&threads[0]);
  for (int t = 1; t < started; t++) pthread_join(threads[t].tid, NULL);

  int errors = 0;
  double bwSum = 0;
  int bwCount = 0;
  for (int t = 0; t < opt->nThreads; t++) {
    if (threads[t].rc && rc == 0) rc = threads[t].rc;
    errors += threads[t].errors;
    bwSum += threads[t].bwSum;
    bwCount += threads[t].bwCount;
  }
  if (rc == 0 && isMainProc) {
    /* errors[]: wrong counts are already summed over ranks, so process 0's count is the total */
    printf("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", bwCount ? bwSum / bwCount : 0.0);
    printf("#\n# Collective test concluded: %s\n#\n", run->prog);
  }
  if (rc == 0 && errors) rc = PERF_EXIT_WRONG;
  if (run->csv) fclose(run->csv);

release_resources:
  teardown(run);
free_arrays:
  free(threads);
  free(run->gpus);
  run->gpus = NULL;
  return rc;
}

int perfMain(const struct perfColl* coll, int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct perfRun run;
  memset(&run, 0, sizeof(run));
  run.coll = coll;
  const char* slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  run.prog = slash ? slash + 1 : (argc > 0 ? argv[0] : "perf");
  perfOptionsDefault(&run.opt);
  char err[256] = "";
  int parsed = perfParseArgs(argc, argv, &run.opt, coll->hasOp, err, sizeof(err));
  if (parsed == 1) return PERF_EXIT_OK;
  if (parsed < 0) {
    fprintf(stderr, "%s: %s\n", run.prog, err);
    return PERF_EXIT_USAGE;
  }
  if (run.opt.compareOut) return perfCompareMain(coll, &run.opt, argc, argv);
#ifdef PERF_HAVE_MPI
  /* started by mpirun (OpenMPI, or a PMI launcher): take the ranks from MPI */
  if (run.opt.nProcs == 0 && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")))
    run.opt.mpi = 1;
#endif

  int rc;
  if (run.opt.mpi) {
    if (perfWorldInitMpi(&run.world, run.opt.nThreads, &argc, &argv) != 0) return PERF_EXIT_FAILURE;
  } else if (run.opt.nProcs > 0) {
    int isParent = 0, exitCode = 0;
    if (perfWorldInitForked(&run.world, run.opt.nThreads, run.opt.nProcs, &isParent, &exitCode) != 0)
      return PERF_EXIT_FAILURE;
    if (isParent) return exitCode;
  } else if (perfWorldInitSingle(&run.world, run.opt.nThreads) != 0) {
    return PERF_EXIT_FAILURE;
  }
  rc = runProcess(&run);
  perfWorldFinalize(&run.world);
  return rc;
}
