/* SPDX-License-Identifier: Apache-2.0 */
/* Moved: the CUDA driver shim is a shared utility (src/include/cudriver.h, src/core/cudriver.c).
 * Kept only for files that still include it by this path; include "cudriver.h" instead. */
#ifndef SYMMCOLL_TRANSPORT_CUDRIVER_STUB_H
#define SYMMCOLL_TRANSPORT_CUDRIVER_STUB_H
#include "../include/cudriver.h"
#endif
