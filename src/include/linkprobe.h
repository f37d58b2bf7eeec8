/* SPDX-License-Identifier: Apache-2.0 */
/* How two CUDA devices of this process reach each other: the one probe that communicator setup,
 * the tuner's machine facts and symmcoll-tune all use. */
#ifndef SYMMCOLL_LINKPROBE_H
#define SYMMCOLL_LINKPROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/* How the GPUs of a communicator reach each other (the weakest pair decides). */
enum symmLink {
  SYMM_LINK_UNKNOWN = 0,
  SYMM_LINK_NVLINK = 1,
  SYMM_LINK_PCIE = 2,
  SYMM_LINK_SAME_GPU = 3 /* several ranks on one GPU: the tests' bootstrap only */
};

/* SAME_GPU when devA == devB; NVLINK: peer access with native peer atomics, which CUDA offers over
 * NVLink (and C2C) only; PCIE: peer access without; UNKNOWN: no peer access, or a CUDA error.
 * `access` (may be NULL): whether devA can access devB's memory at all, also when the atomics
 * query failed (UNKNOWN). Clears the CUDA error it may leave. */
enum symmLink symmProbeLink(int devA, int devB, int* access);

#ifdef __cplusplus
}
#endif

#endif
