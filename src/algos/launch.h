/* SPDX-License-Identifier: Apache-2.0 */
/* Inside src/algos: what the launchers of the three collectives share (staging layout, kernel
 * arguments, grid sizes) and the entry points of each kernel family's translation unit. Each
 * family dispatches datatype and op itself, so no kernel is instantiated outside its own file. */
#ifndef SYMMCOLL_ALGOS_LAUNCH_H
#define SYMMCOLL_ALGOS_LAUNCH_H

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
/* Most rounds (epochs) one all-gather or reduce-scatter launch uses; longer messages take
 * several launches. It bounds the epochs between two refreshes of a Lamport line
 * (refreshLamportLine: 32768 calls of a parity) to 2^16 x 4096 = 2^28, far below 2^31. */
constexpr uint32_t kMaxRounds = 4096;

/* Every kernel of ours takes one KernelArgs. launchKernel starts blocks x kThreads of one on
 * `stream` through the driver (cuLaunchKernel of the kernel's context-independent handle, found
 * once per kernel): 0.3-0.5 us cheaper per call than the runtime's <<<>>> on an H100
 * (perf/RESULTS.md section 0). Without that handle or driver entry point, or when the driver
 * refuses (no current context, a real error), the runtime launches it or reports the error. */
typedef void (*KernelFn)(KernelArgs);
cudaError_t launchKernel(KernelFn kernel, int blocks, cudaStream_t stream, const KernelArgs& args);

/* Kernel families (one translation unit each): launch one kernel, or load every instance. */
cudaError_t loadAllReduceLamport();
cudaError_t launchAllGatherLamport(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                                   const KernelArgs& args);
cudaError_t loadAllGatherLamport();
cudaError_t launchReduceScatterLamport(const struct symmLaunch* call, int blocks,
                                       cudaStream_t stream, const KernelArgs& args);
cudaError_t loadReduceScatterLamport();
cudaError_t launchOneShot(ncclDataType_t dt, ncclRedOp_t op, int blocks, cudaStream_t stream,
                          const KernelArgs& args);
cudaError_t loadOneShot();
cudaError_t launchTwoShot(ncclDataType_t dt, ncclRedOp_t op, int blocks, cudaStream_t stream,
                          const KernelArgs& args);
cudaError_t loadTwoShot();
cudaError_t launchTwoShotPair(ncclDataType_t dt, ncclRedOp_t op, int blocks, cudaStream_t stream,
                              const KernelArgs& args);
cudaError_t loadTwoShotPair();
cudaError_t launchMultimem(ncclDataType_t dt, ncclRedOp_t op, bool emulate, int blocks,
                           cudaStream_t stream, const KernelArgs& args);
cudaError_t loadMultimem();
bool multimemHasKernel(ncclDataType_t dt, ncclRedOp_t op);
cudaError_t launchAllGatherPush(ncclDataType_t dt, int blocks, cudaStream_t stream,
                                const KernelArgs& args);
cudaError_t loadAllGatherPush();
cudaError_t launchAllGatherMultimem(ncclDataType_t dt, bool emulate, int blocks,
                                    cudaStream_t stream, const KernelArgs& args);
cudaError_t loadAllGatherMultimem();
cudaError_t launchReduceScatterPull(ncclDataType_t dt, ncclRedOp_t op, int blocks,
                                    cudaStream_t stream, const KernelArgs& args);
cudaError_t loadReduceScatterPull();
cudaError_t launchReduceScatterMultimem(ncclDataType_t dt, ncclRedOp_t op, bool emulate,
                                        int blocks, cudaStream_t stream, const KernelArgs& args);
cudaError_t loadReduceScatterMultimem();

/* The launchers of each collective (symmCollLaunch dispatches; arguments checked there). */
ncclResult_t allReduceLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                             cudaStream_t stream);
/* All-gather and reduce-scatter (their staged kernels run in rounds, multimem in chunks). */
ncclResult_t gatherScatterLaunch(const struct symmLaunch* call, const struct symmPeers* peers,
                                 cudaStream_t stream);

}  // namespace symm

#endif
