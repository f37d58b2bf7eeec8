/* SPDX-License-Identifier: Apache-2.0 */
/* The Lamport (LL) kernel of all three collectives: barrier-free, the data carries its epoch.
 * Every 8 bytes of payload travel to the reader's Lamport region as one 16-byte store
 * {data0, flag, data1, flag} into the writer's slot (flag = low 32 bits of the epoch, region half
 * epoch & 1); a reader polls its region until both flags of each line equal the call's flag, then
 * reduces in rank order (all-reduce, reduce-scatter) or copies each writer's lines to its part
 * of the output (all-gather). A writer reuses a half in call k+2 only after its call k+1 received
 * every rank's k+1 data, i.e. after every reader finished call k; flags are epochs, so nothing
 * is cleared and stale lines never match (refreshLamportLine keeps every line younger than 2^31
 * epochs). Two passes: wait for all lines first, so a block that gives up wrote no user memory.
 * In place is safe: each block reads its own lines of the input before it writes any output.
 * The bound of the loops over ranks is a template constant, 2, 4 or SYMM_MAX_RANKS by world
 * size (lamportBound), and so is the slot (sync.cuh), which follows from it. Each collective's
 * file launches and loads the instances of its own Coll (lamportAlgo below), so no instance is
 * compiled twice. */
#ifndef SYMMCOLL_LAMPORT_CUH
#define SYMMCOLL_LAMPORT_CUH

#include "family.cuh"
#include "launch.h"
#include "primitives.cuh"

namespace symm {

/* The bound of the loops over ranks for a world of nranks: 2 for the pair, 4 up to 4 ranks,
 * SYMM_MAX_RANKS above (4 instead of 8 saved 0.2-0.47 us per call at 4 ranks). */
__host__ __device__ constexpr int lamportBound(int nranks) {
  return nranks == 2 ? 2 : nranks <= 4 ? 4 : SYMM_MAX_RANKS;
}
/* A kernel takes its slot from its bound (lamportWriters(kRanks)); the refresh of every kernel
 * takes it from the world (lamportWriters(nranks)): they must agree for every world size. */
constexpr bool lamportBoundKeepsSlots() {
  for (int n = 1; n <= SYMM_MAX_RANKS; n++)
    if (lamportWriters(lamportBound(n)) != lamportWriters(n)) return false;
  return true;
}
static_assert(lamportBoundKeepsSlots(), "a world's Lamport bound must keep its slot class");

template <typename E, int Kind, int Coll, int kRanks>
__global__ void __launch_bounds__(kThreads, 1) lamportKernel(KernelArgs a) {
  kernelEntry();
  if constexpr (Coll != SYMM_COLL_ALLGATHER) {
    SYMM_REDUCING_KERNEL(E)
  }
  /* kRanks bounds every loop over ranks (lamportBound): the pair's instances run only where the
   * world is 2 ranks, so there the world size is a constant and each loop two iterations;
   * elsewhere ranks past the world are predicated off, four or eight iterations (less code to
   * fetch and issue on the path of the smallest calls). */
  static_assert(SYMM_MAX_RANKS != 2, "lamportWriters must tell the pair from other worlds");
  const int nranks = worldRanks<kRanks>(a);
  typedef typename E::T T;
  constexpr int kPer = 8 / sizeof(T);
  __shared__ volatile int failed;
  /* Payload per (writer, reader): all-reduce the whole input, all-gather the writer's input,
   * reduce-scatter the reader's slice of the writer's input (slices a.sliceStride apart). */
  const size_t bytes = a.count * sizeof(T);
  const size_t lines = divUp(bytes, 8);
  const size_t per = divUp(lines, (size_t)gridDim.x);
  const size_t lo = minSize((size_t)blockIdx.x * per, lines);
  const size_t hi = minSize(lo + per, lines);
  const size_t firstLine = lo + threadIdx.x;
  /* Reduce-scatter: reader r's slice of our input. */
  auto readerSlice = [&](int r) {
    return (const char*)a.send + (size_t)r * a.sliceStride * sizeof(T);
  };
  /* Our first input line (reduce-scatter: the first line of each reader's slice) is loaded
   * while openCall fetches the epoch: two memory latencies overlap instead of adding up (the
   * input is ready: earlier work on the stream is done). */
  constexpr int kFirst = Coll == SYMM_COLL_REDUCESCATTER ? kRanks : 1;
  uint2 firstData[kFirst];
#pragma unroll
  for (int r = 0; r < kFirst; r++)
    firstData[r] = r < nranks && firstLine < hi
                       ? loadLine(readerSlice(r), firstLine, bytes)
                       : make_uint2(0, 0);
  Call c;
  if (!openCall<kNoPart>(a, &failed, &c, lines)) return;
  const uint64_t epoch = c.epoch;
  constexpr size_t kSlot = lamportSlotOf(lamportWriters(kRanks));
  const size_t half = a.lamportOffset + (size_t)(epoch & 1u) * kLamportParityBytes;
  const size_t mySlot = half + (size_t)a.rank * kSlot;
  /* Lines carry the epoch's low 32 bits (8-byte halves arrive whole; see README for why a stale
   * line never matches). */
  const uint32_t flag = (uint32_t)epoch;
  for (size_t i = firstLine; i < hi; i += blockDim.x) {
    if constexpr (Coll == SYMM_COLL_REDUCESCATTER) {
#pragma unroll
      for (int r = 0; r < kRanks; r++) {
        if (r >= nranks) continue;
        const uint2 d = i == firstLine ? firstData[r] : loadLine(readerSlice(r), i, bytes);
        storeVolatile16(a.staging[r] + mySlot + i * 16, make_uint4(d.x, flag, d.y, flag));
      }
    } else {
      const uint2 d = i == firstLine ? firstData[0] : loadLine((const char*)a.send, i, bytes);
      const uint4 line = make_uint4(d.x, flag, d.y, flag);
#pragma unroll
      for (int r = 0; r < kRanks; r++)
        if (r < nranks) storeVolatile16(a.staging[r] + mySlot + i * 16, line);
    }
  }
  /* Pass 1: wait until every line of every writer arrived, polling all writers of a line at
   * once; the data of each thread's first line stays in registers for pass 2 (at the sizes
   * where time matters every thread has one line). */
  const char* region = a.staging[a.rank] + half;
  uint2 kept[kRanks];
  uint64_t start = 0;
  uint32_t why = 0, polls = 0;
  for (size_t i = firstLine; i < hi && why == 0; i += blockDim.x) {
    uint32_t pending = (1u << nranks) - 1u;
    while (pending != 0) {
      uint4 v[kRanks];
#pragma unroll
      for (int r = 0; r < kRanks; r++)
        if ((pending >> r) & 1u) v[r] = loadVolatile16(region + (size_t)r * kSlot + i * 16);
#pragma unroll
      for (int r = 0; r < kRanks; r++) {
        if (((pending >> r) & 1u) && v[r].y == flag && v[r].w == flag) {
          pending &= ~(1u << r);
          if (i == firstLine) kept[r] = make_uint2(v[r].x, v[r].z);
        }
      }
      if (pending == 0) break;
      if ((++polls & 2047u) == 0 && (why = shouldGiveUp(a, &start)) != 0) break;
      if (failed) {
        why = 3;
        break;
      }
    }
  }
  if (why != 0) failed = 1;
  __syncthreads();
  if (failed) {
    if (why == SYMM_ERR_DEADLINE)
      reportDeadline(a.rank, (unsigned long long)(a.deadlineNs / 1000000u), -1, 3,
                     (unsigned long long)epoch, 0);
    return;
  }
  /* Pass 2: everything is here; all-gather writes each writer's line to its part of the
   * output, the others reduce in rank order and write theirs. */
  for (size_t i = firstLine; i < hi; i += blockDim.x) {
    union Line {
      uint2 v;
      T e[kPer];
    } acc, x;
    uint2 d[kRanks];
#pragma unroll
    for (int r = 0; r < kRanks; r++) {
      if (r >= nranks) continue;
      if (i == firstLine) {
        d[r] = kept[r];
      } else {
        const uint4 v = loadVolatile16(region + (size_t)r * kSlot + i * 16);
        d[r] = make_uint2(v.x, v.z);
      }
    }
    if constexpr (Coll == SYMM_COLL_ALLGATHER) {
#pragma unroll
      for (int r = 0; r < kRanks; r++)
        if (r < nranks) storeLine((char*)a.recv + (size_t)r * a.sliceStride * sizeof(T), i, bytes, d[r]);
      continue;
    }
    acc.v = d[0];
    if (a.avg) {
#pragma unroll
      for (int k = 0; k < kPer; k++) acc.e[k] = Arith<E>::avgPre(acc.e[k], nranks);
    }
#pragma unroll
    for (int r = 1; r < kRanks; r++) {
      if (r < nranks) {
        x.v = d[r];
#pragma unroll
        for (int k = 0; k < kPer; k++)
          acc.e[k] = Op<E, Kind>::apply(acc.e[k], a.avg ? Arith<E>::avgPre(x.e[k], nranks) : x.e[k]);
      }
    }
    if (a.avg) {
#pragma unroll
      for (int k = 0; k < kPer; k++) acc.e[k] = Arith<E>::avgPost(acc.e[k], nranks);
    }
    storeLine((char*)a.recv, i, bytes, acc.v);
  }
  endCall(a, epoch, c.ticket);
}

/* The instances of collective Coll for one bound (family.cuh). All-gather moves bits: one
 * instance per datatype (kSum), whatever the op. */
template <int Coll, int kRanks> struct LamportFamily {
  static constexpr bool kReduces = Coll != SYMM_COLL_ALLGATHER;
  template <typename E, int Kind> static KernelFn of(bool) {
    return lamportKernel<E, Kind, Coll, kRanks>;
  }
};

/* Collective Coll's Lamport line of its table: the launch takes the instances of the world's
 * bound (lamportBound, the same on every rank); the load loads all three sets. */
template <int Coll>
cudaError_t launchLamport(const struct symmLaunch* call, int blocks, cudaStream_t stream,
                          const KernelArgs& args) {
  switch (lamportBound(args.nranks)) {
    case 2: return launchFamily<LamportFamily<Coll, 2>>(call, blocks, stream, args);
    case 4: return launchFamily<LamportFamily<Coll, 4>>(call, blocks, stream, args);
    default: return launchFamily<LamportFamily<Coll, SYMM_MAX_RANKS>>(call, blocks, stream, args);
  }
}
template <int Coll> cudaError_t loadLamport() {
  cudaError_t err = loadFamily<LamportFamily<Coll, 2>>();
  if (err == cudaSuccess) err = loadFamily<LamportFamily<Coll, 4>>();
  if (err == cudaSuccess) err = loadFamily<LamportFamily<Coll, SYMM_MAX_RANKS>>();
  return err;
}
template <int Coll>
constexpr AlgoKernels lamportAlgo(bool (*exists)(ncclDataType_t, ncclRedOp_t)) {
  return {SYMM_ALGO_LAMPORT, launchLamport<Coll>, loadLamport<Coll>, exists};
}

}  // namespace symm

#endif
