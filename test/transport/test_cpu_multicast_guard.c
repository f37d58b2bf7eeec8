/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: each multicast kill switch turns multicast off before any device query or create. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "debug.h"
#include "harness.h"
#include "multicast.h"
#include "param.h"
#include "transport.h"

static const char* const switches[][2] = {
    {"NCCL_NVLS_ENABLE", "0"},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
    {"NVSHMEM_DISABLE_NVLS", "1"},
    {"SYMMCOLL_MULTIMEM", "0"},
};
#define NSWITCHES (int)(sizeof(switches) / sizeof(switches[0]))

static void clearAll(void) {
  for (int i = 0; i < NSWITCHES; i++) unsetenv(switches[i][0]);
  symmParamResetAll();
}

static void setOne(const char* name, const char* value) {
  CHECK_EQ_INT(setenv(name, value, 1), 0);
  symmParamResetAll();
}

int main(void) {
  /* Initialise logging before any parameter is read: param.c logs while holding its lock, and
   * the first log reads SYMMCOLL_DEBUG through that same lock (reported to the lead). */
  (void)symmLogLevel();
  clearAll();
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);

  for (int i = 0; i < NSWITCHES; i++) {
    clearAll();
    setOne(switches[i][0], switches[i][1]);
    CHECK_EQ_INT(symmMulticastEnvAllows(), 0);
    CHECK_EQ_INT(symmMulticastUsable(0), 0);
    CHECK_EQ_INT(symmTransportMulticastReady(NULL), 0);
    if (symmMulticastEnvAllows() != 0) fprintf(stderr, "  switch %s ignored\n", switches[i][0]);
  }
  /* All of them together, as the lent GPU machines set them. */
  clearAll();
  for (int i = 0; i < NSWITCHES; i++) setOne(switches[i][0], switches[i][1]);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 0);

  /* Values that do not switch it off. */
  clearAll();
  setOne("NCCL_NVLS_ENABLE", "1");
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);
  setOne("NCCL_NVLS_ENABLE", "2");
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);
  clearAll();
  setOne("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0");
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);
  clearAll();
  setOne("SYMMCOLL_MULTIMEM", "1");
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);
  clearAll();
  setOne("NVSHMEM_DISABLE_NVLS", "true");
  CHECK_EQ_INT(symmMulticastEnvAllows(), 0);

  /* Nothing above came near a multicast object. */
  CHECK_EQ_INT(symmMulticastAttempts(), 0);
  CHECK_EQ_INT(symmTransportMulticastAttempts(), 0);

  /* Second line of defence: even a direct call refuses while a switch is set, before any driver
   * call (the counter records that it was reached). Only with the switch verified set. */
  clearAll();
  setOne("NCCL_NVLS_ENABLE", "0");
  setOne("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1");
  if (symmMulticastEnvAllows() == 0) {
    CUmemGenericAllocationHandle mc = 0;
    size_t mcBytes = 0;
    int fd = -1;
    CHECK_EQ_INT(symmMulticastCreate(4, 1 << 21, &mc, &mcBytes, &fd), ncclInvalidUsage);
    CHECK_EQ_INT(fd, -1);
    CHECK_EQ_INT(symmMulticastAttempts(), 1);
    int memfd = memfd_create("mc-guard", MFD_CLOEXEC);
    CHECK(memfd >= 0);
    CHECK_EQ_INT(symmMulticastImport(memfd, &mc), ncclInvalidUsage);
    CHECK(fcntl(memfd, F_GETFD) == -1); /* the descriptor was consumed (closed) */
    CHECK_EQ_INT(symmMulticastAttempts(), 2);
    CHECK_EQ_INT(symmMulticastAddDevice(mc, 0), ncclInvalidUsage);
    CUdeviceptr base = 0;
    CHECK_EQ_INT(symmMulticastBindAndMap(mc, 1 << 21, 0, 0, 0, &base), ncclInvalidUsage);
    CHECK(base == 0);
  } else {
    CHECK(0 && "could not set the multicast switches");
  }
  return harnessReport("transport_cpu_multicast_guard");
}
