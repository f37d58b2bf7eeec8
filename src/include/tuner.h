/* SPDX-License-Identifier: Apache-2.0 */
/* Which algorithm runs a collective: what can run here (available), and which is fastest (pick). */
#ifndef SYMMCOLL_TUNER_H
#define SYMMCOLL_TUNER_H

#include <stddef.h>
#include <stdint.h>

#include "algos.h"
#include "coll.h"
#include "linkprobe.h" /* enum symmLink */

#ifdef __cplusplus
extern "C" {
#endif

/* The machine a communicator runs on, as a tuning file records it (its fingerprint). Filled at
 * communicator setup (symmTunerProbeMachine, then link and nccl) and identical on all ranks. */
struct symmTuneMachine {
  char gpu[96]; /* cudaDeviceProp.name, e.g. "NVIDIA H200" */
  int arch;     /* compute capability * 10 */
  int link;     /* enum symmLink of the communicator */
  int gpus;     /* CUDA devices visible to the process (cudaGetDeviceCount) */
  int driver;   /* cudaDriverGetVersion, e.g. 13000 */
  int nccl;     /* the real NCCL's ncclGetVersion code, e.g. 22809 */
};

/* Tuning files larger than this are refused (setup hashes no more of one). */
#define SYMM_TUNE_MAX_FILE_BYTES ((size_t)1 << 20)
/* A parsed tuning file (src/tuner/tune_table.h); NULL stands for the built-in table. */
struct symmTuneFile;

/* Everything the decision depends on. Every field must be identical on all ranks of the
 * communicator: sizes, types, comm-wide facts agreed at setup, knobs checked at setup. */
struct symmTuneInput {
  enum symmColl coll;
  int nranks;
  ncclDataType_t datatype;
  ncclRedOp_t op;         /* all-gather: ncclSum (ignored) */
  size_t bytes;           /* symmCollBytes(coll, count, esize, nranks) */
  int registered;         /* the in-place buffer (algos.h windowPeers) lies in a symmetric window */
  int multicastReady;     /* comm-wide: multicast mapped (off-switches keep it 0) */
  int arch;               /* comm-wide compute capability * 10 (90 = sm_90), 0 if ranks differ */
  int link;               /* enum symmLink, comm-wide */
  size_t stagingBytes;    /* staging per rank the communicator has, or would allocate */
  unsigned excluded;      /* bit (1u << algo): left out by the route's rules (src/route.c) */
  const struct symmTuneFile* table; /* symmTunerSelect's answer for the comm (NULL: built in) */
};

/* Bit (1u << algo) for every algorithm that can run for `in` (SYMM_ALGO_NCCL always): it has
 * kernels for the type and op and fits, is not excluded, and multimem is asked for. */
unsigned symmTunerAvailable(const struct symmTuneInput* in);

/* The algorithm to run: the per-collective override (SYMMCOLL_ALLREDUCE_ALGO,
 * SYMMCOLL_ALLGATHER_ALGO, SYMMCOLL_REDUCESCATTER_ALGO) if set and available, else the table
 * (built in, or SYMMCOLL_TUNING_FILE). Logs each distinct choice once at INFO. */
enum symmAlgo symmTunerPick(const struct symmTuneInput* in);
/* The override alone: the algorithm it names when that is in `avail` (logged like a pick), else
 * -1 (a name that is not an algorithm or cannot run here: one WARN per process and knob). */
int symmTunerForced(const struct symmTuneInput* in, unsigned avail);
/* Logs a choice made outside the table (src/route.c) once, like symmTunerPick's. */
void symmTunerNote(const struct symmTuneInput* in, enum symmAlgo algo, const char* why);

/* 1 when `algo` should use the registered buffer in place rather than through staging. */
int symmTunerZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo);
/* 1 when ranks should exchange ncclCommRegister descriptors in the kernel (all-reduce
 * two-shot, inputs outside windows, up to SYMMCOLL_ZERO_COPY_MAX_BYTES). */
int symmTunerUserZeroCopy(const struct symmTuneInput* in, enum symmAlgo algo);

/* 1 when an all-reduce of `bytes` uses its output as the in-place buffer (the two-shot writes
 * the peers' outputs: from SYMMCOLL_AR_WRITE_OUTPUTS_MIN_BYTES, above
 * SYMMCOLL_ZERO_COPY_MAX_BYTES), 0 when its input (read in place up to the latter). Knobs
 * only, so the same on every rank. */
int symmTunerAllReduceWritesOutputs(size_t bytes);

/* Largest message (symmCollBytes) that the table may give to one of our staged algorithms on a
 * communicator with these facts (coll, datatype, op, bytes, registered ignored): what the
 * transport sizes staging by (symmAlgosStagingBytes). SIZE_MAX when unbounded. */
size_t symmTunerLargestStaged(const struct symmTuneInput* in);

/* The table a communicator on machine `m` uses: SYMMCOLL_TUNING_FILE (read and parsed once per
 * process, thread-safe) when it parsed and was measured on `m`, else NULL (the built-in table);
 * a refused file gets one WARN per process. *hash: the used file's content hash, 0 for the
 * built-in table. Ranks must agree on *hash (setup record) before using the answer. */
const struct symmTuneFile* symmTunerSelect(const struct symmTuneMachine* m, uint64_t* hash);
/* SYMMCOLL_TUNING_FILE as this process read it (once), or NULL. */
const char* symmTunerFilePath(void);

/* Fills gpu, arch, gpus and driver of `m` for CUDA device `cudaDev`; link and nccl are the
 * caller's (the communicator's link, the real NCCL's version). */
ncclResult_t symmTunerProbeMachine(int cudaDev, struct symmTuneMachine* m);

/* 1 when SYMMCOLL_MULTIMEM=1 asks for the experimental multimem kernels and the multicast
 * objects they read (default 0; read once per process, agreed at setup). */
int symmTunerMultimemRequested(void);

#ifdef __cplusplus
}
#endif

#endif
