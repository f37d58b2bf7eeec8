/* SPDX-License-Identifier: Apache-2.0 */
/* Multicast create/import/bind/map. Every entry re-checks the environment guard; never run on
 * machines where multicast is forbidden (they set the variables, and have < 4 GPUs per rank set).
 * The guard reads the environment as it is now: it can only turn multicast off. Whether a
 * communicator uses multicast is decided once, at setup, from every rank's record. */
#include "multicast.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "param.h"
#include "vmm.h"

static atomic_long attempts;

/* "Set" means a value other than empty/0/false/no/n. */
static int envSet(const char* name) {
  const char* v = getenv(name);
  if (v == NULL || v[0] == '\0') return 0;
  return !(strcmp(v, "0") == 0 || symmAsciiCaseEqual(v, "false") || symmAsciiCaseEqual(v, "no") ||
           symmAsciiCaseEqual(v, "n"));
}

/* NCCL reads NCCL_NVLS_ENABLE with strtoll, so any value that is not a number ("off", "false",
 * " 0", "-0") is 0 there: NVLS off. Fail closed: set and not wholly a non-zero integer (trailing
 * blanks allowed) means off. */
static int envNvlsOff(const char* name) {
  const char* v = symmNcclGetEnv(name); /* NCCL's configuration files too */
  if (v == NULL || v[0] == '\0') return 0;
  char* end = NULL;
  const long long n = strtoll(v, &end, 0);
  if (end == v) return 1;
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  return n == 0 || *end != '\0';
}

/* Multicast is opt-in: only an explicit SYMMCOLL_MULTIMEM=1 asks for it. */
static int envIsOne(const char* name) {
  const char* v = getenv(name);
  if (v == NULL || v[0] == '\0') return 0;
  char* end = NULL;
  return strtol(v, &end, 0) == 1 && end != v && *end == '\0';
}

int symmMulticastEnvAllows(void) {
  if (envNvlsOff("NCCL_NVLS_ENABLE")) return 0;
  if (envSet("TORCH_SYMM_MEM_DISABLE_MULTICAST")) return 0;
  if (envSet("NVSHMEM_DISABLE_NVLS")) return 0;
  return envIsOne("SYMMCOLL_MULTIMEM");
}

int symmMulticastUsable(int cudaDev) {
  if (!symmMulticastEnvAllows()) return 0; /* first: no device query when forbidden */
  if (symmCuLoad() != ncclSuccess || symmCu.p_cuMulticastCreate == NULL) return 0;
  CUdevice dev;
  int supported = 0;
  if (CU_CALL(SYMM_LOG_INFO, cuDeviceGet, (&dev, cudaDev)) != CUDA_SUCCESS) return 0;
  if (CU_CALL(SYMM_LOG_INFO, cuDeviceGetAttribute,
              (&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev)) != CUDA_SUCCESS)
    return 0;
  return supported != 0;
}

long symmMulticastAttempts(void) { return atomic_load(&attempts); }

/* Second line of defence: refuse even if a caller forgot the guard. */
static ncclResult_t guard(const char* what) {
  atomic_fetch_add(&attempts, 1);
  if (!symmMulticastEnvAllows()) {
    WARN("symmetric memory: multicast %s refused: disabled by the environment", what);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

ncclResult_t symmMulticastCreate(int nranks, size_t bytes, CUmemGenericAllocationHandle* mc,
                                 size_t* mcBytes, int* fd) {
  ncclResult_t res = guard("create");
  if (res != ncclSuccess) return res;
  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = (unsigned)nranks;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  prop.size = bytes;
  CUCHECK(cuMulticastGetGranularity, (&gran, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
  if (gran == 0) return ncclInternalError;
  prop.size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle handle;
  CUCHECK(cuMulticastCreate, (&handle, &prop));
  int exported = -1;
  CUCHECKGOTO(cuMemExportToShareableHandle,
              (&exported, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), res, release_mc);
  *mc = handle;
  *mcBytes = prop.size;
  *fd = exported;
  return ncclSuccess;
release_mc:
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (handle));
  return res;
}

ncclResult_t symmMulticastImport(int fd, CUmemGenericAllocationHandle* mc) {
  ncclResult_t res = guard("import");
  if (res == ncclSuccess) res = symmVmmImportFd(fd, mc);
  close(fd);
  return res;
}

ncclResult_t symmMulticastAddDevice(CUmemGenericAllocationHandle mc, int cudaDev) {
  if (!symmMulticastEnvAllows()) return ncclInvalidUsage;
  CUdevice dev;
  CUCHECK(cuDeviceGet, (&dev, cudaDev));
  CUCHECK(cuMulticastAddDevice, (mc, dev));
  return ncclSuccess;
}

ncclResult_t symmMulticastBindAndMap(CUmemGenericAllocationHandle mc, size_t mcBytes,
                                     CUmemGenericAllocationHandle mem, size_t memOffset,
                                     int cudaDev, CUdeviceptr* mcBase) {
  if (!symmMulticastEnvAllows()) return ncclInvalidUsage;
  ncclResult_t res = ncclSuccess;
  CUdevice dev;
  CUCHECK(cuDeviceGet, (&dev, cudaDev));
  CUCHECK(cuMulticastBindMem, (mc, 0, mem, memOffset, mcBytes, 0));
  res = symmVmmMap(mc, mcBytes, cudaDev, mcBase);
  if (res != ncclSuccess) goto unbind;
  return ncclSuccess;
unbind:
  (void)CU_CALL(SYMM_LOG_WARN, cuMulticastUnbind, (mc, dev, 0, mcBytes));
  return res;
}

void symmMulticastRelease(CUmemGenericAllocationHandle mc, size_t mcBytes, int cudaDev, int bound,
                          CUdeviceptr mcBase) {
  if (mcBase != 0) symmVmmUnmap(mcBase, mcBytes);
  if (bound) {
    CUdevice dev;
    if (CU_CALL(SYMM_LOG_WARN, cuDeviceGet, (&dev, cudaDev)) == CUDA_SUCCESS)
      (void)CU_CALL(SYMM_LOG_WARN, cuMulticastUnbind, (mc, dev, 0, mcBytes));
  }
  (void)CU_CALL(SYMM_LOG_WARN, cuMemRelease, (mc));
}
