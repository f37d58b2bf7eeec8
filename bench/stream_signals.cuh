/* SPDX-License-Identifier: Apache-2.0 */
/* Signals between streams for the copy-engine instruments (ce_twoshot, wait_latency): a 32-bit
 * word in the receiver's memory set to 1, waited on until it is 1 and reset to 0, so that a
 * captured graph replays them (the library's copy-engine words work the same way). A signal is
 * a 4-byte copy from a word holding 1, cuStreamWriteValue32, or a one-thread kernel storing with
 * release semantics at system scope; a wait is a stream memory operation (wait, then write 0) or
 * a one-thread kernel spinning with acquire. */
#ifndef SYMMCOLL_BENCH_STREAM_SIGNALS_CUH
#define SYMMCOLL_BENCH_STREAM_SIGNALS_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* BENCH_CHECK's description of a driver status (the driver's own strings need libcuda linked). */
static inline const char* cuResultText(CUresult r) {
  static char text[32];
  snprintf(text, sizeof(text), "CUresult %d", (int)r);
  return text;
}
#define CU(x) BENCH_CHECK(CUresult, x, CUDA_SUCCESS, cuResultText)

enum SignalKind { kCopySignal, kWriteSignal, kKernelSignal };
static const char* const kSignalName[] = {"copy", "write", "kernel"};
enum WaitKind { kMemOpWait, kKernelWait };
static const char* const kWaitName[] = {"memop", "kernel"};

typedef CUresult (*BatchMemOpFn)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
static BatchMemOpFn batchMemOp;

/* cuStreamBatchMemOp through the runtime (nothing links libcuda); 0 where the driver lacks it. */
static inline int loadBatchMemOp(void) {
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", (void**)&batchMemOp, 12000,
                                      cudaEnableDefault, &q));
  return q == cudaDriverEntryPointSuccess && batchMemOp != NULL;
}

/* The stream's earlier work is complete before a kernel starts, so a plain release store
 * publishes it. */
__global__ void setWord(uint32_t* word) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(1u) : "memory");
}
__global__ void waitWord(uint32_t* word) {
  uint32_t v = 0;
  do asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(word) : "memory");
  while (v != 1);
  *word = 0;
}

/* One 32-bit stream memory operation: wait until *word == value, or write value there. */
static inline CUstreamBatchMemOpParams memOp(bool wait, uint32_t* word, uint32_t value) {
  CUstreamBatchMemOpParams op;
  memset(&op, 0, sizeof(op));
  if (wait) {
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = (CUdeviceptr)(uintptr_t)word;
    op.waitValue.value = value;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  } else {
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = (CUdeviceptr)(uintptr_t)word;
    op.writeValue.value = value;
    op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
  return op;
}

/* Sets `word` (the receiver's) to 1 once the stream's earlier work is done; `one` is a device
 * word holding 1, the copy's source. */
static inline void signalWord(cudaStream_t s, uint32_t* word, SignalKind how, const uint32_t* one) {
  if (how == kCopySignal) {
    CK(cudaMemcpyAsync(word, one, sizeof(uint32_t), cudaMemcpyDeviceToDevice, s));
  } else if (how == kKernelSignal) {
    setWord<<<1, 1, 0, s>>>(word);
    CK(cudaGetLastError());
  } else {
    CUstreamBatchMemOpParams op = memOp(false, word, 1);
    CU(batchMemOp((CUstream)s, 1, &op, 0));
  }
}

/* Waits until our `word` is 1 and resets it to 0. */
static inline void waitResetWord(cudaStream_t s, uint32_t* word, WaitKind how) {
  if (how == kKernelWait) {
    waitWord<<<1, 1, 0, s>>>(word);
    CK(cudaGetLastError());
    return;
  }
  CUstreamBatchMemOpParams ops[2] = {memOp(true, word, 1), memOp(false, word, 0)};
  CU(batchMemOp((CUstream)s, 2, ops, 0));
}

#endif
