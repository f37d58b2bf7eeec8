/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: setup paths decided without any exchange (this build's world-size limit) and the
 * transport queries on communicators without symmetric memory. No GPU, no real NCCL needed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"
#include "harness.h"
#include "param.h"
#include "setup.h"
#include "transport.h"
#include "vmm.h"

static struct symmComm* fakeComm(uintptr_t id, int rank, int nranks, int blocking) {
  struct symmComm* c = NULL;
  if (symmCommAdd((ncclComm_t)id, blocking, &c) != ncclSuccess) return NULL;
  c->rank = rank;
  c->nranks = nranks;
  c->cudaDev = 0;
  c->attrsKnown = 1;
  return c;
}

int main(void) {
  /* Any exchange would call into the real NCCL, which this test never loads: reaching one would
   * crash (NULL entry point), so returning proves the decision was taken locally. */
  struct symmComm* huge = fakeComm(0x1000, 0, 1000, 0);
  struct symmComm* tooSmall = fakeComm(0x2000, 0, 1, 1);
  struct symmComm* tooLarge = fakeComm(0x3000, 3, SYMM_MAX_RANKS + 1, 1);
  CHECK(huge && tooSmall && tooLarge);
  struct symmComm* all[3] = {huge, tooSmall, tooLarge};
  CHECK_EQ_INT(symmSetupAgree(all, 3), ncclSuccess);
  for (int i = 0; i < 3; i++) {
    CHECK(all[i]->transport == NULL);
    CHECK(symmTransportPeers(all[i]) == NULL);
    CHECK(symmTransportBeginLaunch(all[i]) == NULL);
    void* peers[SYMM_MAX_RANKS];
    int x = 0;
    CHECK_EQ_INT(symmTransportFindWindow(all[i], &x, sizeof(x), peers), 0);
    CHECK_EQ_INT(symmTransportMulticastReady(all[i]), 0);
    CHECK_EQ_INT(symmTransportKernelErrors(all[i]), 0);
    CHECK_EQ_INT(symmTransportPollPadFailure(all[i]), 0);
    CHECK_EQ_INT(symmTransportNeedsStaging(all[i]), 0);
    CHECK_EQ_INT((int)symmTransportStagingBytes(all[i]), 0);
    symmTransportSetAbort(all[i]);
    symmTransportWindowDeregister(all[i], NULL);
    /* ncclCommRegister without symmetric memory: nothing shared, nothing mapped, no-ops. */
    symmTransportUserRegister(all[i], &x, sizeof(x), &x);
    CHECK_EQ_INT(symmTransportUserInputDesc(all[i], &x, sizeof(x)), 0);
    CHECK_EQ_INT(symmTransportUserRegMappedCount(all[i]), 0);
    symmTransportUserDeregister(all[i], &x);
    symmTransportTeardown(all[i], 1);
    symmTransportTeardown(all[i], 0);
  }
  CHECK_EQ_INT(symmSetupAgree(all, 0), ncclSuccess);
  /* Only this build's limit is decided without talking: SYMMCOLL_MAX_RANKS may differ between
   * ranks, so it is compared after the exchange (test_cpu_eligibility), which every rank of a
   * world of 2..SYMM_MAX_RANKS joins. A larger knob does not widen the build's limit. */
  (void)symmLogLevel(); /* logging first: knobs.c logs under its own lock */
  setenv("SYMMCOLL_MAX_RANKS", "100", 1);
  symmParamResetAll();
  struct symmComm* nine = fakeComm(0x4000, 1, SYMM_MAX_RANKS + 1, 1);
  CHECK_EQ_INT(symmSetupAgree(&nine, 1), ncclSuccess);
  CHECK(nine->transport == NULL);
  /* A world of 4 with SYMMCOLL_MAX_RANKS=3 here joins the exchange (its peers may have the
   * default): it gets as far as its device, which this test has none of, and stays out of the
   * real NCCL (never loaded here: reaching it would crash). The log says which. */
  char logPath[128];
  snprintf(logPath, sizeof(logPath), "%s/symmcoll-setup-paths.%d.log", P_tmpdir, (int)getpid());
  unlink(logPath);
  setenv("SYMMCOLL_DEBUG_FILE", logPath, 1);
  setenv("SYMMCOLL_DEBUG", "INFO", 1);
  setenv("SYMMCOLL_MAX_RANKS", "3", 1);
  symmParamResetAll();
  symmLogReset();
  struct symmComm* four = fakeComm(0x5000, 1, 4, 1);
  CHECK_EQ_INT(symmSetupAgree(&four, 1), ncclSuccess);
  CHECK(four->transport == NULL);
  symmLogReset();
  FILE* log = fopen(logPath, "r");
  int joined = 0, leftAlone = 0;
  char line[1024];
  while (log != NULL && fgets(line, sizeof(line), log) != NULL) {
    joined += strstr(line, "for the setup exchange") != NULL;
    leftAlone += strstr(line, "outside 2..3") != NULL; /* what a local decision said */
  }
  if (log != NULL) fclose(log);
  unlink(logPath);
  CHECK_EQ_INT(joined, 1);
  CHECK_EQ_INT(leftAlone, 0);
  unsetenv("SYMMCOLL_DEBUG_FILE");
  unsetenv("SYMMCOLL_DEBUG");
  unsetenv("SYMMCOLL_MAX_RANKS");
  symmParamResetAll();
  symmLogReset();
  CHECK_EQ_INT(symmTransportMulticastAttempts(), 0);
  CHECK_EQ_INT(symmRegistryCount(), 0);

  /* Blocking or not, as the real NCCL decides it: environment, then config, then inheritance. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  unsetenv("NCCL_COMM_BLOCKING");
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 1);
  CHECK_EQ_INT(symmConfigBlocking(NULL, 0), 0); /* a split of a non-blocking parent */
  CHECK_EQ_INT(symmConfigBlocking(&config, 0), 1); /* undefined field: NCCL's default */
  config.blocking = 0;
  CHECK_EQ_INT(symmConfigBlocking(&config, 1), 0);
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  CHECK_EQ_INT(symmConfigBlocking(&config, 0), 1);
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 0);
  setenv("NCCL_COMM_BLOCKING", "7", 1); /* invalid: ignored, as NCCL does */
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 1);
  setenv("NCCL_COMM_BLOCKING", "0 ", 1); /* NCCL's strtoll ignores what follows the number */
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 0);
  /* Out of range for strtoll: NCCL keeps its default (here: inherited). */
  setenv("NCCL_COMM_BLOCKING", "-99999999999999999999", 1);
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 1);
  /* In range, stored into an int as NCCL does: 2^32 is 0, non-blocking. */
  setenv("NCCL_COMM_BLOCKING", "4294967296", 1);
  CHECK_EQ_INT(symmConfigBlocking(NULL, 1), 0);
  unsetenv("NCCL_COMM_BLOCKING");

  /* ncclMemAlloc without a GPU is not ours: the caller forwards. */
  void* ptr = NULL;
  int handled = 1;
  CHECK_EQ_INT(symmTransportMemAlloc(&ptr, 1 << 20, &handled), ncclSuccess);
  CHECK_EQ_INT(handled, 0);
  CHECK(ptr == NULL);
  handled = 1;
  int local = 0;
  CHECK_EQ_INT(symmTransportMemFree(&local, &handled), ncclSuccess);
  CHECK_EQ_INT(handled, 0);

  symmCommRemove((ncclComm_t)0x1000);
  symmCommRemove((ncclComm_t)0x2000);
  symmCommRemove((ncclComm_t)0x3000);
  symmCommRemove((ncclComm_t)0x4000);
  symmCommRemove((ncclComm_t)0x5000);
  CHECK_EQ_INT(symmCommCount(), 0);
  return harnessReport("transport_cpu_setup_paths");
}
