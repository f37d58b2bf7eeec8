/* SPDX-License-Identifier: Apache-2.0 */
/* Tuner: availability, table lookups at edge sizes, overrides, and same inputs -> same choice. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "algos.h"
#include "debug.h"
#include "harness.h"
#include "param.h"
#include "tuner.h"

static struct symmTuneInput input(int nranks, ncclDataType_t dt, ncclRedOp_t op, size_t bytes) {
  struct symmTuneInput in = {.nranks = nranks, .datatype = dt, .op = op, .bytes = bytes,
                             .registered = 0, .multicastReady = 0, .arch = 0,
                             .stagingBytes = (size_t)64 << 20};
  return in;
}

static int lamportOff;

static void clearEnv(void) {
  unsetenv("SYMMCOLL_ALLREDUCE_ALGO");
  unsetenv("SYMMCOLL_MULTIMEM_EMULATE");
  unsetenv("SYMMCOLL_ONESHOT_MAX_BYTES");
  unsetenv("SYMMCOLL_TWOSHOT_MAX_BYTES");
  unsetenv("SYMMCOLL_MULTIMEM_MIN_BYTES");
  unsetenv("SYMMCOLL_MULTIMEM_MAX_BYTES");
  if (lamportOff) setenv("SYMMCOLL_LAMPORT_MAX_BYTES", "0", 1);
  else unsetenv("SYMMCOLL_LAMPORT_MAX_BYTES");
  symmParamResetAll();
}

#define B(algo) (1u << (algo))

int main(void) {
  /* Logging first: src/param.c logs under its lock, which deadlocks if the first param read
   * (with the variable set) also has to initialise logging. Reported to the lead. */
  (void)symmLogLevel();
  clearEnv();
  /* Names round-trip; unknown names are reported as such. */
  for (int a = 0; a < SYMM_AR_NALGOS; a++)
    CHECK_EQ_INT(symmArAlgoParse(symmArAlgoName((enum symmArAlgo)a)), a);
  CHECK_EQ_INT(symmArAlgoParse("auto"), -1);
  CHECK_EQ_INT(symmArAlgoParse(NULL), -1);
  CHECK_EQ_INT(symmArAlgoParse("TwoShot"), SYMM_AR_TWOSHOT);
  CHECK_EQ_INT(symmArAlgoParse("fastest"), -2);

  /* Kernels: one-shot/two-shot for every type and op; multimem only where the instruction is. */
  for (int dt = 0; dt < ncclNumTypes; dt++)
    for (int op = 0; op < ncclNumOps; op++) {
      CHECK(symmAllReduceKernelExists(SYMM_AR_ONESHOT, (ncclDataType_t)dt, (ncclRedOp_t)op));
      CHECK(symmAllReduceKernelExists(SYMM_AR_TWOSHOT, (ncclDataType_t)dt, (ncclRedOp_t)op));
    }
  CHECK(symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclBfloat16, ncclSum));
  CHECK(symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclBfloat16, ncclAvg));
  CHECK(symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclFloat32, ncclSum));
  CHECK(symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclInt64, ncclMax));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclFloat32, ncclMax));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclFloat32, ncclProd));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclFloat64, ncclSum));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclInt8, ncclSum));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_MULTIMEM, ncclFloat8e4m3, ncclSum));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_ONESHOT, (ncclDataType_t)ncclNumTypes, ncclSum));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_ONESHOT, ncclFloat32, (ncclRedOp_t)ncclNumOps));
  CHECK(!symmAllReduceKernelExists(SYMM_AR_NCCL, ncclFloat32, ncclSum));

  /* Availability. */
  struct symmTuneInput in = input(2, ncclBfloat16, ncclSum, 4096);
  CHECK_EQ_INT(symmTunerAvailable(&in),
               B(SYMM_AR_NCCL) | B(SYMM_AR_ONESHOT) | B(SYMM_AR_TWOSHOT) | B(SYMM_AR_LAMPORT));
  in.multicastReady = 1;
  CHECK(symmTunerAvailable(&in) & B(SYMM_AR_MULTIMEM));
  in = input(2, ncclFloat32, ncclMax, 4096);
  in.multicastReady = 1;
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_AR_MULTIMEM)));
  in = input(1, ncclFloat32, ncclSum, 4096);
  CHECK_EQ_INT(symmTunerAvailable(&in), B(SYMM_AR_NCCL));
  in = input(SYMM_MAX_RANKS + 1, ncclFloat32, ncclSum, 4096);
  CHECK_EQ_INT(symmTunerAvailable(&in), B(SYMM_AR_NCCL));
  in = input(2, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 3), 4096); /* PreMulSum op */
  CHECK_EQ_INT(symmTunerAvailable(&in), B(SYMM_AR_NCCL));
  setenv("SYMMCOLL_MULTIMEM_EMULATE", "1", 1);
  symmParamResetAll();
  in = input(4, ncclBfloat16, ncclSum, 4096);
  CHECK(symmTunerAvailable(&in) & B(SYMM_AR_MULTIMEM));
  clearEnv();
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_AR_MULTIMEM)));

  /* The table at its edges: every world size, every element size. */
  for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
    for (int dt = 0; dt < ncclNumTypes; dt++) {
      in = input(n, (ncclDataType_t)dt, ncclSum, 1);
      struct symmTuneThresholds t;
      symmTunerThresholds(&in, &t);
      CHECK(t.oneshotMax > 0);
      CHECK(t.twoshotMax >= t.oneshotMax);
      in.bytes = t.oneshotMax;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
      in.bytes = t.oneshotMax + 1;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
      in.bytes = t.twoshotMax;
      CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
      /* SIZE_MAX: two-shot at every larger size (the 2-rank row); else NCCL above. */
      const int twoshotAlways = t.twoshotMax == SIZE_MAX;
      if (!twoshotAlways) {
        in.bytes = t.twoshotMax + 1;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_NCCL);
      }
      in.bytes = (size_t)1 << 40;
      CHECK_EQ_INT(symmTunerPick(&in), twoshotAlways ? SYMM_AR_TWOSHOT : SYMM_AR_NCCL);
      /* With multicast (and a multimem kernel), multimem takes its range. */
      in.multicastReady = 1;
      if (t.multimemMax != 0 && symmAllReduceKernelExists(SYMM_AR_MULTIMEM, in.datatype, ncclSum)) {
        in.bytes = t.multimemMin > t.oneshotMax ? t.multimemMin : t.oneshotMax + 1;
        CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_MULTIMEM);
      }
    }
  }
  /* Lamport: every type and op, only up to its capacity and with a staging buffer that has the
   * region; it comes first in the table. */
  CHECK(symmAllReduceKernelExists(SYMM_AR_LAMPORT, ncclFloat8e5m2, ncclProd));
  CHECK(symmAllReduceLamportFits(SYMM_AR_LAMPORT_MAX_BYTES, (size_t)64 << 20));
  CHECK(!symmAllReduceLamportFits(SYMM_AR_LAMPORT_MAX_BYTES + 1, (size_t)64 << 20));
  CHECK(!symmAllReduceLamportFits(8, SYMM_AR_LAMPORT_REGION_BYTES));
  in = input(2, ncclBfloat16, ncclSum, 1024);
  CHECK(symmTunerAvailable(&in) & B(SYMM_AR_LAMPORT));
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_LAMPORT);
  in.stagingBytes = 1 << 20; /* no room for the region */
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_AR_LAMPORT)));
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  in = input(2, ncclFloat64, ncclMax, SYMM_AR_LAMPORT_MAX_BYTES + 8);
  CHECK(!(symmTunerAvailable(&in) & B(SYMM_AR_LAMPORT)));
  for (int n = 2; n <= SYMM_MAX_RANKS; n++) {
    struct symmTuneThresholds t;
    in = input(n, ncclFloat32, ncclSum, 4);
    symmTunerThresholds(&in, &t);
    CHECK(t.lamportMax <= SYMM_AR_LAMPORT_MAX_BYTES);
    CHECK(t.lamportMax < t.oneshotMax);
    if (t.lamportMax >= 4) CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_LAMPORT);
    in.bytes = t.lamportMax + 4;
    CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  }
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "lamport", 1);
  symmParamResetAll();
  in = input(2, ncclInt8, ncclMin, 20000);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_LAMPORT);
  in.bytes = 8 << 20; /* too big: table */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  clearEnv();
  /* From here on the table's Lamport range is off, to test the other thresholds alone. */
  lamportOff = 1;
  clearEnv();

  /* 2 ranks (measured on 2x H200): one-shot at 1 KiB and 4 MiB, two-shot from just above
   * 4 MiB up to 1 TiB (the push two-shot beats NCCL at every size there). */
  in = input(2, ncclBfloat16, ncclSum, 1024);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  in.bytes = 4 << 20;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  in.bytes = (4 << 20) + 2;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  /* Multicast never changes the 2-rank choice (no multimem rows for 2 ranks). */
  in.multicastReady = 1;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  in.multicastReady = 0;
  in.bytes = (size_t)1 << 40;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  /* The byte knob still sends large messages to NCCL. */
  setenv("SYMMCOLL_TWOSHOT_MAX_BYTES", "16777216", 1);
  symmParamResetAll();
  in.bytes = (16 << 20) + 2;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_NCCL);
  unsetenv("SYMMCOLL_TWOSHOT_MAX_BYTES");
  symmParamResetAll();

  /* Zero-copy (registered windows): two-shot only, up to 4 MiB unless the knob says otherwise. */
  in = input(2, ncclBfloat16, ncclSum, 4 << 20);
  in.registered = 1;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_TWOSHOT), 1);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_ONESHOT), 0);
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_NCCL), 0);
  in.bytes = (4 << 20) + 2;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_TWOSHOT), 0);
  in.registered = 0;
  in.bytes = 1024;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_TWOSHOT), 0);
  setenv("SYMMCOLL_ZERO_COPY_MAX_BYTES", "1073741824", 1);
  symmParamResetAll();
  in.registered = 1;
  in.bytes = (size_t)1 << 30;
  CHECK_EQ_INT(symmTunerZeroCopy(&in, SYMM_AR_TWOSHOT), 1);
  unsetenv("SYMMCOLL_ZERO_COPY_MAX_BYTES");
  symmParamResetAll();

  /* Overrides: forced algorithm; unavailable forced algorithm falls back to the table. */
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "twoshot", 1);
  symmParamResetAll();
  in = input(2, ncclFloat32, ncclSum, 8);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  in.bytes = (size_t)1 << 40;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "nccl", 1);
  symmParamResetAll();
  in.bytes = 8;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_NCCL);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "multimem", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT); /* no multicast: table */
  setenv("SYMMCOLL_MULTIMEM_EMULATE", "1", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_MULTIMEM);
  in.op = ncclProd; /* no multimem kernel for prod */
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "bogus", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  setenv("SYMMCOLL_ALLREDUCE_ALGO", "AUTO", 1);
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  clearEnv();

  /* Byte knobs replace single thresholds. */
  setenv("SYMMCOLL_ONESHOT_MAX_BYTES", "100", 1);
  setenv("SYMMCOLL_TWOSHOT_MAX_BYTES", "1000", 1);
  symmParamResetAll();
  in = input(2, ncclFloat32, ncclSum, 100);
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_ONESHOT);
  in.bytes = 104;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  in.bytes = 1000;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  in.bytes = 1004;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_NCCL);
  setenv("SYMMCOLL_MULTIMEM_EMULATE", "1", 1);
  setenv("SYMMCOLL_MULTIMEM_MIN_BYTES", "200", 1);
  setenv("SYMMCOLL_MULTIMEM_MAX_BYTES", "400", 1);
  symmParamResetAll();
  in.bytes = 200;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_MULTIMEM);
  in.bytes = 404;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  in.bytes = 196;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  setenv("SYMMCOLL_ONESHOT_MAX_BYTES", "0", 1);
  symmParamResetAll();
  in.bytes = 4;
  CHECK_EQ_INT(symmTunerPick(&in), SYMM_AR_TWOSHOT);
  clearEnv();

  /* Same inputs, same answer, whatever was asked before (no hidden state in the choice). */
  enum symmArAlgo first[64];
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 64; i++) {
      struct symmTuneInput x = input(2 + i % 7, (ncclDataType_t)(i % ncclNumTypes),
                                     (ncclRedOp_t)(i % ncclNumOps), (size_t)1 << (i % 34));
      x.multicastReady = i & 1;
      enum symmArAlgo a = symmTunerPick(&x);
      if (pass == 0) first[i] = a;
      else CHECK_EQ_INT(a, first[i]);
      CHECK(symmTunerAvailable(&x) & B(a));
    }
  }
  /* Launcher argument handling that needs no GPU: it refuses before touching CUDA. */
  struct symmPeers peers;
  memset(&peers, 0, sizeof(peers));
  peers.nranks = 2;
  peers.bufferBytes = (size_t)64 << 20;
  peers.signalBytes = 64 << 10;
  peers.localStateBytes = 64 << 10;
  float dummy[4];
  struct symmAllReduceCall call = {.sendbuff = dummy, .recvbuff = dummy, .count = 0,
                                   .datatype = ncclFloat32, .op = ncclSum,
                                   .algo = SYMM_AR_ONESHOT};
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclSuccess); /* count 0: nothing */
  call.count = 4;
  call.algo = SYMM_AR_NCCL;
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInvalidArgument);
  call.algo = SYMM_AR_MULTIMEM;
  call.op = ncclProd;
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInvalidArgument);
  call.op = ncclSum; /* real multimem without a multicast mapping */
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInternalError);
  call.algo = SYMM_AR_LAMPORT;
  call.count = SYMM_AR_LAMPORT_MAX_BYTES / 4 + 1;
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInvalidArgument);
  call.algo = SYMM_AR_ONESHOT;
  peers.signalBytes = 1024; /* smaller than the signal layout */
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInternalError);
  peers.signalBytes = 64 << 10;
  peers.nranks = SYMM_MAX_RANKS + 1;
  CHECK_EQ_INT(symmAllReduceLaunch(&call, &peers, NULL), ncclInternalError);
  /* Chunks: half of what is left after the Lamport region, 16-byte multiple. */
  peers.nranks = 2;
  CHECK_EQ_INT(symmAllReduceChunkBytes(&peers), (((size_t)64 << 20) - SYMM_AR_LAMPORT_REGION_BYTES) / 2);
  peers.bufferBytes = (1 << 20) + 40; /* no room for the region */
  CHECK_EQ_INT(symmAllReduceChunkBytes(&peers), (1 << 19) + 16); /* (1 MiB + 40) / 2 rounded down to 16 */
  CHECK_EQ_INT(symmAllReduceChunkBytes(&peers) % 16, 0);
  return harnessReport("test_tuner");
}
