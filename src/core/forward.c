/* SPDX-License-Identifier: Apache-2.0 */
/* Finds and loads the real NCCL once, and fills the table of its entry points. */
#define _GNU_SOURCE
#include "forward.h"
#include "symmcoll.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "param.h"

SYMMCOLL_PARAM_STR(NcclLib, "NCCL_LIB", NULL,
                   "path of the real libnccl.so.2 to forward to (wins over every other search)")
/* Agreed: a rank that sets it still takes part in every communicator's setup (as "disabled"),
 * so that every rank forwards. */
SYMMCOLL_PARAM_FULL(Disable, "DISABLE", 0, INT64_MIN, INT64_MAX, SYMM_PARAM_AGREED,
                    "1: forward every call to the real NCCL, never use our kernels (on every "
                    "rank of a communicator if set on one)")

#ifndef SYMMCOLL_DEFAULT_NCCL_LIB
#define SYMMCOLL_DEFAULT_NCCL_LIB ""
#endif

struct symmRealNccl symmReal;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static ncclResult_t loadResult = ncclSystemError; /* its address also identifies our object */
__thread int symmRealDepth;
uintptr_t symmRealLo, symmRealHi;

int symmDisabled(void) { return symmParamDisable() != 0; }

/* Base address of the object that holds `addr`, or NULL. */
static void* objectBase(const void* addr, const char** fname) {
  Dl_info info;
  if (addr == NULL || dladdr(addr, &info) == 0) return NULL;
  if (fname) *fname = info.dli_fname;
  return info.dli_fbase;
}

static int isOurself(const void* fn) {
  return fn != NULL && objectBase(fn, NULL) == objectBase(&loadResult, NULL);
}

/* The executable segments of the object that holds the code at `arg` (the real NCCL's
 * ncclGetVersion): where its calls of its own exported functions come from. */
static int codeSegmentsOf(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  const uintptr_t probe = (uintptr_t)arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  int holds = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    const uintptr_t start = (uintptr_t)info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
    holds |= start <= probe && probe < end;
    if (start < lo) lo = start;
    if (end > hi) hi = end;
  }
  if (!holds) return 0; /* another object */
  symmRealLo = lo;
  __atomic_store_n(&symmRealHi, hi, __ATOMIC_RELEASE); /* Hi last: readers load it first */
  return 1;
}

static void recordRange(void* probe) {
  if (probe != NULL && dl_iterate_phdr(codeSegmentsOf, probe))
    TRACE(SYMM_INIT, "real NCCL's code at [%#lx, %#lx)", (unsigned long)symmRealLo,
          (unsigned long)symmRealHi);
  else
    INFO(SYMM_INIT, "the real NCCL's code segments were not found: its calls of its own "
         "functions from its own threads are taken for the application's");
}

/* Why the last candidate was refused (only touched inside loadOnceFn, under pthread_once). */
static char rejectReason[512];

/* Accepts `handle` if it defines NCCL's entry points in an object other than ours. Another copy
 * of libsymmcoll is refused too: forwarding to it could come straight back here. */
static int adoptHandle(void* handle, const char* how) {
  if (handle == NULL) return 0;
  void* probe = dlsym(handle, "ncclGetVersion");
  const char* fname = NULL;
  const char* why = NULL;
  if (probe == NULL || objectBase(probe, &fname) == NULL) why = "it defines no ncclGetVersion";
  else if (isOurself(probe)) why = "it is libsymmcoll itself";
  else if (dlsym(handle, "symmcollPrintParams") != NULL) why = "it is another copy of libsymmcoll";
  if (why != NULL) {
    snprintf(rejectReason, sizeof(rejectReason), "%s", why);
    TRACE(SYMM_INIT, "not the real NCCL (%s): %s", how, why);
    dlclose(handle);
    return 0;
  }
  symmReal.handle = handle;
  recordRange(probe);
  snprintf(symmReal.path, sizeof(symmReal.path), "%s", fname ? fname : "?");
  INFO(SYMM_INIT, "libsymmcoll %d.%d.%d: real NCCL %s (%s)", SYMMCOLL_VERSION_MAJOR,
       SYMMCOLL_VERSION_MINOR, SYMMCOLL_VERSION_PATCH, symmReal.path, how);
  return 1;
}

static int tryOpen(const char* name, const char* how) {
  if (name == NULL || name[0] == '\0') return 0;
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char* err = dlerror();
    snprintf(rejectReason, sizeof(rejectReason), "%s", err ? err : "dlopen failed");
    TRACE(SYMM_INIT, "dlopen(%s): %s", name, rejectReason);
    return 0;
  }
  return adoptHandle(handle, how);
}

/* When preloaded, the application's own NCCL is the next definition in the process. */
static int tryNextDefinition(void) {
  void* next = dlsym(RTLD_NEXT, "ncclGetVersion");
  const char* fname = NULL;
  if (next == NULL || isOurself(next) || objectBase(next, &fname) == NULL) return 0;
  return adoptHandle(dlopen(fname, RTLD_NOW | RTLD_NOLOAD), "next definition in the process");
}

struct loadedSearch {
  char path[4096];
};

static int findLoadedNccl(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  struct loadedSearch* search = arg;
  const char* base = strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  if (strncmp(base, "libnccl.so", 10) != 0) return 0;
  void* handle = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
  if (handle == NULL) return 0;
  void* probe = dlsym(handle, "ncclGetVersion");
  int ok = probe != NULL && !isOurself(probe);
  dlclose(handle);
  if (!ok) return 0;
  snprintf(search->path, sizeof(search->path), "%s", info->dlpi_name);
  return 1;
}

/* A libnccl that the process loaded privately (RTLD_LOCAL), as PyTorch's does. */
static int tryAlreadyLoaded(void) {
  struct loadedSearch search = {{0}};
  if (!dl_iterate_phdr(findLoadedNccl, &search)) return 0;
  return adoptHandle(dlopen(search.path, RTLD_NOW | RTLD_NOLOAD), "already loaded in the process");
}

/* libnccl.so.2 in each directory of LD_LIBRARY_PATH, then in the usual system directories,
 * skipping files that are this library (a directory holding a libnccl.so.2 link to libsymmcoll
 * puts us first in the plain library search; the real NCCL comes after). */
static int tryPathsSkippingSelf(void) {
  Dl_info self;
  char selfPath[4096] = "";
  if (dladdr((const void*)&loadResult, &self) != 0 && self.dli_fname != NULL)
    (void)realpath(self.dli_fname, selfPath);
  const char* env = getenv("LD_LIBRARY_PATH");
  char dirs[8192];
  snprintf(dirs, sizeof(dirs), "%s:/usr/lib/x86_64-linux-gnu:/usr/lib/aarch64-linux-gnu:"
           "/usr/lib64:/usr/lib:/usr/local/lib", env ? env : "");
  char* save = NULL;
  for (char* dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    char path[4096], real[4096];
    snprintf(path, sizeof(path), "%s/libnccl.so.2", dir);
    if (realpath(path, real) == NULL || strcmp(real, selfPath) == 0) continue;
    if (tryOpen(path, "library path, past libsymmcoll's own libnccl.so.2")) return 1;
  }
  return 0;
}

static void loadOnceFn(void) {
  const char* forced = symmParamNcclLib();
  int found;
  if (forced != NULL && forced[0] != '\0') {
    found = tryOpen(forced, "SYMMCOLL_NCCL_LIB");
    if (!found) {
      WARN("SYMMCOLL_NCCL_LIB=%s cannot be used as the real NCCL (%s); every NCCL call will fail "
           "with ncclSystemError",
           forced, rejectReason);
      return;
    }
  } else {
    found = tryNextDefinition() || tryAlreadyLoaded() || tryOpen("libnccl.so.2", "library search") ||
            tryPathsSkippingSelf() || tryOpen("libnccl.so", "library search") ||
            tryOpen(SYMMCOLL_DEFAULT_NCCL_LIB, "build-time default");
    if (!found) {
      WARN("no real NCCL found (set SYMMCOLL_NCCL_LIB=/path/libnccl.so.2); every NCCL call will "
           "fail with ncclSystemError");
      return;
    }
  }
#define SYMM_LOOKUP(ret, name, params, args, fail)                                       \
  *(void**)&symmReal.name = dlsym(symmReal.handle, #name);                                \
  if (symmReal.name == NULL) INFO(SYMM_INIT, "real NCCL has no %s; calls to it fail", #name);
  SYMMCOLL_ALL_FUNCS(SYMM_LOOKUP)
#undef SYMM_LOOKUP
  loadResult = ncclSuccess;
}

ncclResult_t symmRealLoad(void) {
  pthread_once(&loadOnce, loadOnceFn);
  return loadResult;
}
