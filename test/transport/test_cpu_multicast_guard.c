/* SPDX-License-Identifier: Apache-2.0 */
/* CPU test: multicast is opt-in (SYMMCOLL_MULTIMEM=1), each kill switch turns it off before any
 * device query or create, and decisions read what setup agreed, never the environment now. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "debug.h"
#include "harness.h"
#include "internal.h"
#include "multicast.h"
#include "param.h"
#include "transport.h"
#include "tuner.h"

static const char* const switches[][2] = {
    {"NCCL_NVLS_ENABLE", "0"},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
    {"NVSHMEM_DISABLE_NVLS", "1"},
    {"SYMMCOLL_MULTIMEM", "0"},
};
#define NSWITCHES (int)(sizeof(switches) / sizeof(switches[0]))

/* No switch set, multicast asked for. */
static void clearAll(void) {
  for (int i = 0; i < NSWITCHES; i++) unsetenv(switches[i][0]);
  setenv("SYMMCOLL_MULTIMEM", "1", 1);
  symmParamResetAll();
}

static void setOne(const char* name, const char* value) {
  CHECK_EQ_INT(setenv(name, value, 1), 0);
  symmParamResetAll();
}

int main(void) {
  /* Initialise logging before any parameter is read: knobs.c logs while holding its lock, and
   * the first log reads SYMMCOLL_DEBUG through that same lock. */
  (void)symmLogLevel();
  /* Off unless asked for: the knob's default is 0, and the guard wants an explicit 1. */
  unsetenv("SYMMCOLL_MULTIMEM");
  for (int i = 0; i < NSWITCHES; i++) unsetenv(switches[i][0]);
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerMultimemRequested(), 0);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 0);
  CHECK_EQ_INT(symmMulticastUsable(0), 0);
  setOne("SYMMCOLL_MULTIMEM", "2"); /* out of range: the default */
  CHECK_EQ_INT(symmTunerMultimemRequested(), 0);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 0);
  clearAll();
  CHECK_EQ_INT(symmTunerMultimemRequested(), 1);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1);

  for (int i = 0; i < NSWITCHES; i++) {
    clearAll();
    setOne(switches[i][0], switches[i][1]);
    CHECK_EQ_INT(symmMulticastEnvAllows(), 0);
    CHECK_EQ_INT(symmMulticastUsable(0), 0);
    CHECK_EQ_INT(symmTransportMulticastReady(NULL), 0);
    if (symmMulticastEnvAllows() != 0) fprintf(stderr, "  switch %s ignored\n", switches[i][0]);
  }
  /* All of them together, as every script of this repository sets them. */
  clearAll();
  for (int i = 0; i < NSWITCHES; i++) setOne(switches[i][0], switches[i][1]);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 0);

  /* Values that leave it on, and values that switch it off. */
  static const struct {
    const char *name, *value;
    int allows;
  } values[] = {{"NCCL_NVLS_ENABLE", "1", 1},  {"NCCL_NVLS_ENABLE", "2", 1},
                {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "0", 1}, {"SYMMCOLL_MULTIMEM", "1", 1},
                {"NVSHMEM_DISABLE_NVLS", "true", 0},
                /* NCCL reads these as 0 (strtoll): off here too, and anything unclear. */
                {"NCCL_NVLS_ENABLE", " 0", 0}, {"NCCL_NVLS_ENABLE", "\t0", 0},
                {"NCCL_NVLS_ENABLE", "+0", 0}, {"NCCL_NVLS_ENABLE", "-0", 0},
                {"NCCL_NVLS_ENABLE", "off", 0}, {"NCCL_NVLS_ENABLE", "OFF", 0},
                {"NCCL_NVLS_ENABLE", "disable", 0}, {"NCCL_NVLS_ENABLE", "0x0", 0},
                {"NCCL_NVLS_ENABLE", "0 ", 0}, {"NCCL_NVLS_ENABLE", "1x", 0},
                {"NCCL_NVLS_ENABLE", "1 ", 1}, {"NCCL_NVLS_ENABLE", "0x1", 1},
                {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "off", 0}};
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
    clearAll();
    setOne(values[i].name, values[i].value);
    CHECK_EQ_INT(symmMulticastEnvAllows(), values[i].allows);
  }

  /* Decisions use what setup agreed. The knob is read once per process: set later, and even
   * after what ncclResetDebugInit does, it keeps its first value on this rank. */
  clearAll();
  unsetenv("SYMMCOLL_MULTIMEM");
  symmParamResetAll();
  CHECK_EQ_INT(symmTunerMultimemRequested(), 0);
  setenv("SYMMCOLL_MULTIMEM", "1", 1);
  symmParamResetLogging();
  CHECK_EQ_INT(symmTunerMultimemRequested(), 0);
  CHECK_EQ_INT(symmMulticastEnvAllows(), 1); /* the guard reads the environment now */
  /* A communicator whose ranks mapped multicast at setup keeps deciding with it when a switch is
   * set later on this rank alone (its peers would not see the switch); the guard still refuses
   * new objects, and a refusal at staging is agreed (stageMulticast's votes). */
  struct symmComm* c = NULL;
  CHECK_EQ_INT(symmCommAdd((ncclComm_t)(uintptr_t)0x7000, 1, &c), ncclSuccess);
  struct symmTransport t;
  memset(&t, 0, sizeof(t));
  int mapped = 0;
  t.peers.multicastBuffer = &mapped;
  if (c != NULL) {
    c->transport = &t;
    CHECK_EQ_INT(symmTransportMulticastReady(c), 1);
    setOne("NCCL_NVLS_ENABLE", "0");
    CHECK_EQ_INT(symmMulticastEnvAllows(), 0);
    CHECK_EQ_INT(symmTransportMulticastReady(c), 1);
    t.peers.multicastBuffer = NULL; /* none mapped (not agreed, or a staging vote failed) */
    clearAll();
    CHECK_EQ_INT(symmTransportMulticastReady(c), 0);
    c->transport = NULL;
    symmCommRemove(c->real);
  }

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
