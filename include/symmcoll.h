/* SPDX-License-Identifier: Apache-2.0 */
/* libsymmcoll's own additions to the NCCL API (use nccl.h for everything else). */
#ifndef SYMMCOLL_H
#define SYMMCOLL_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prints every SYMMCOLL_* environment knob with its current value, default and help text. */
void symmcollPrintParams(FILE* out);

#ifdef __cplusplus
}
#endif

#endif
