/* SPDX-License-Identifier: Apache-2.0 */
/* libsymmcoll's own additions to the NCCL API (use nccl.h for everything else). */
#ifndef SYMMCOLL_H
#define SYMMCOLL_H

#include <stdio.h>

/* This header's version (keep in step with meson.build's project version; test_params checks). */
#define SYMMCOLL_VERSION_MAJOR 0
#define SYMMCOLL_VERSION_MINOR 2
#define SYMMCOLL_VERSION_PATCH 0
#define SYMMCOLL_VERSION_CODE \
  (SYMMCOLL_VERSION_MAJOR * 10000 + SYMMCOLL_VERSION_MINOR * 100 + SYMMCOLL_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The loaded library's version as SYMMCOLL_VERSION_CODE computes it (0.2.0 -> 200). Returns 0
 * (1 when version is NULL). */
int symmcollGetVersion(int* version);

/* Prints every SYMMCOLL_* environment knob with its current value, default and help text. */
void symmcollPrintParams(FILE* out);

#ifdef __cplusplus
}
#endif

#endif
