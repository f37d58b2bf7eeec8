/* SPDX-License-Identifier: Apache-2.0 */
/* Inside src/algos: what the launchers of the three collectives share (staging layout, kernel
 * arguments, grid sizes, the launch of one kernel, the split of a call into launches) and the
 * tables through which the C entry points reach each collective's file. Each collective's file
 * dispatches datatype and op itself, so no kernel is instantiated outside its own file. */
#ifndef SYMMCOLL_ALGOS_LAUNCH_H
#define SYMMCOLL_ALGOS_LAUNCH_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "algos.h"
#include "sync.cuh"

namespace symm {

/* Staging layout, one for every collective: [half 0][half 1][Lamport region], the region
 * present when the buffer holds at least 4x it. Call k uses half (epoch & 1). */
bool hasLamportRegion(size_t bufferBytes);
size_t halfBytesOf(const struct symmPeers* peers);

/* The arguments every kernel gets from the peer view and the call (buffers, counts and strides
 * are the launcher's to fill). */
void fillArgs(const struct symmLaunch* call, const struct symmPeers* peers, KernelArgs* args);

/* Blocks for a launch moving `moved` bytes per rank: SYMMCOLL_AR_BYTES_PER_BLOCK per block, at
 * most SYMMCOLL_AR_MAX_BLOCKS, the communicator's maxCTAs, and a share of 64 when several ranks
 * use one GPU (tests); at least minCTAs where that fits. Identical on every rank. */
int gridBlocks(size_t moved, const struct symmLaunch* call, const struct symmPeers* peers);

/* Two-shot: most elements of one rank's slice per round (staging and SYMMCOLL_AR_ROUND_BYTES). */
size_t twoShotSliceMax(const struct symmPeers* peers, size_t halfBytes, size_t esize);
/* All-gather push, reduce-scatter pull: most elements of each rank's share per round (n-1 slots
 * in a staging half, and SYMMCOLL_AR_ROUND_BYTES). */
size_t gatherScatterSliceMax(const struct symmPeers* peers, size_t halfBytes, size_t esize);
/* Most rounds (epochs) one launch in rounds uses (two-shot all-reduce, all-gather push,
 * reduce-scatter pull); longer messages take several launches. It bounds the epochs between two
 * refreshes of a Lamport line (refreshLamportLine: 2^17 calls of a parity) to 2^18 x 4096 = 2^30,
 * below 2^31. */
constexpr uint32_t kMaxRounds = 4096;
/* Most elements of one such launch, each of whose rounds covers at least `perRound` elements:
 * kMaxRounds rounds, rounded down to whole vectors of vecElems (at least one). The kernels' plans
 * (twoShotPlan, roundPlan) round sliceMax down to their unit, which keeps at least half of it, so
 * callers pass what half of sliceMax per slice gives. */
size_t roundsLaunchElems(size_t perRound, size_t vecElems);

/* Every kernel of ours takes one KernelArgs. launchKernel starts blocks x kThreads of one on
 * `stream` through the driver (cuLaunchKernel of the kernel's context-independent handle, found
 * once per kernel): 0.3-0.5 us cheaper per call than the runtime's <<<>>> on an H100
 * (perf/RESULTS.md). Without that handle or driver entry point, or when the driver
 * refuses (no current context, a real error), the runtime launches it or reports the error. */
typedef void (*KernelFn)(KernelArgs);
cudaError_t launchKernel(KernelFn kernel, int blocks, cudaStream_t stream, const KernelArgs& args);

/* The recorded launch (symmCollLaunchRecorded, entry.cu): while a Recorder is set on this thread,
 * launchKernel notes its launches there; launchDriverPdl starts a recorded PDL launch again. */
struct Recorder {
  symmLaunchRecord* record;
  int launches;
};
void setRecorder(Recorder* recorder);
CUresult launchDriverPdl(CUfunction function, unsigned blocks, CUstream stream, void** params);

/* One algorithm of a collective, a line in its collective's table: `launch` starts the instance
 * a call needs (datatype, op and variant from the call) with `blocks` x kThreads threads, `load`
 * loads every instance into the current device's context (symmAlgosLoadKernels), `exists` says
 * whether an instance exists for (datatype, op). */
typedef cudaError_t (*AlgoLaunchFn)(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                                    const KernelArgs& args);
struct AlgoKernels {
  enum symmAlgo algo;
  AlgoLaunchFn launch;
  cudaError_t (*load)(void);
  bool (*exists)(ncclDataType_t dt, ncclRedOp_t op);
};

/* One collective, defined in its own file (all_reduce.cu, all_gather.cu, reduce_scatter.cu) and
 * listed once in entry.cu, which symmCollLaunch, symmAlgoExists and symmAlgosLoadKernels go
 * through. `reduces`: it takes an op, and only NCCL's built-in ones; `launch` runs a call that
 * symmCollLaunch has checked (the algorithm exists and fits, the peers' memory is large enough). */
struct CollKernels {
  enum symmColl coll;
  bool reduces;
  ncclResult_t (*launch)(const struct symmLaunch* call, const struct symmPeers* peers,
                         cudaStream_t stream);
  const AlgoKernels* algos;
  int nalgos;
};
extern const CollKernels kAllReduce, kAllGather, kReduceScatter;

/* For the tables: every datatype and op has an instance; the types and ops of
 * multimem.ld_reduce (Mm<E, Kind>::kOk, multimem.cuh); an algorithm without kernels (the copy
 * engine, which its collective's launcher routes elsewhere): nothing to load or launch. */
bool anyTypeAndOp(ncclDataType_t dt, ncclRedOp_t op);
bool multimemHasKernel(ncclDataType_t dt, ncclRedOp_t op);
cudaError_t loadNothing(void);
cudaError_t launchNoKernel(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                           const KernelArgs& args);

/* Launches the call's algorithm over call->count elements, at most perLaunch per launch (each
 * launch a call of its own: epoch, staging half), with the arguments the collective's launcher
 * filled; sets send, recv, count (and windows, for zero copy; the registered input's descriptor,
 * where the two-shot exchanges one) per launch and sizes each grid by the bytes it moves. A
 * multiple of 16 bytes per launch keeps every piece as aligned as the call. `name` goes into
 * the messages. */
const AlgoKernels* findAlgo(const CollKernels* coll, enum symmAlgo algo);
ncclResult_t launchPieces(const CollKernels* coll, const char* name, const struct symmLaunch* call,
                          const struct symmPeers* peers, cudaStream_t stream, KernelArgs* args,
                          size_t perLaunch);

/* The launcher all-gather and reduce-scatter share: Lamport in one launch; push and pull in
 * rounds inside one launch (rounds.cuh) for up to kMaxRounds rounds, zero copy in one launch for
 * any size; multimem in one launch per chunk of every rank's share. */
ncclResult_t gatherScatterLaunch(const CollKernels* coll, const struct symmLaunch* call,
                                 const struct symmPeers* peers, cudaStream_t stream);

/* The two-shot all-reduce (all_reduce_twoshot.cuh): its instances are the heaviest code to
 * compile, so two translation units hold them, all_reduce_twoshot.cu those for up to
 * SYMM_MAX_RANKS ranks (and these entry points), all_reduce_twoshot_pair.cu those for 2. */
cudaError_t launchTwoShot(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                          const KernelArgs& args);
cudaError_t loadTwoShot();
cudaError_t launchTwoShotPair(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                              const KernelArgs& args);
cudaError_t loadTwoShotPair();

}  // namespace symm

#endif
