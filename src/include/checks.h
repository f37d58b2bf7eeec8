/* SPDX-License-Identifier: Apache-2.0 */
/* Error-checking macros: each failure is logged once where it is first seen, with file and line. */
#ifndef SYMMCOLL_CHECKS_H
#define SYMMCOLL_CHECKS_H

#include <cuda_runtime.h>
#include <errno.h>
#include <string.h>

#include "debug.h"
#include "nccl_api.h"

#define CUDACHECK(cmd)                                                           \
  do {                                                                           \
    cudaError_t e_ = (cmd);                                                      \
    if (e_ != cudaSuccess) {                                                     \
      WARN("cuda failure '%s' in %s", cudaGetErrorString(e_), #cmd);             \
      return ncclUnhandledCudaError;                                             \
    }                                                                            \
  } while (0)

#define CUDACHECKGOTO(cmd, res, label)                                           \
  do {                                                                           \
    cudaError_t e_ = (cmd);                                                      \
    if (e_ != cudaSuccess) {                                                     \
      WARN("cuda failure '%s' in %s", cudaGetErrorString(e_), #cmd);             \
      (res) = ncclUnhandledCudaError;                                            \
      goto label;                                                                \
    }                                                                            \
  } while (0)

#define NCCLCHECK(cmd)                                                           \
  do {                                                                           \
    ncclResult_t r_ = (cmd);                                                     \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                             \
      INFO(SYMM_ALL, "%s failed: %d", #cmd, (int)r_);                            \
      return r_;                                                                 \
    }                                                                            \
  } while (0)

#define NCCLCHECKGOTO(cmd, res, label)                                           \
  do {                                                                           \
    (res) = (cmd);                                                               \
    if ((res) != ncclSuccess && (res) != ncclInProgress) {                       \
      INFO(SYMM_ALL, "%s failed: %d", #cmd, (int)(res));                         \
      goto label;                                                                \
    }                                                                            \
  } while (0)

#define SYSCHECK(cmd)                                                            \
  do {                                                                           \
    if ((cmd) < 0) {                                                             \
      WARN("system call %s failed: %s", #cmd, strerror(errno));                  \
      return ncclSystemError;                                                    \
    }                                                                            \
  } while (0)

#define SYSCHECKGOTO(cmd, res, label)                                            \
  do {                                                                           \
    if ((cmd) < 0) {                                                             \
      WARN("system call %s failed: %s", #cmd, strerror(errno));                  \
      (res) = ncclSystemError;                                                   \
      goto label;                                                                \
    }                                                                            \
  } while (0)

#endif
