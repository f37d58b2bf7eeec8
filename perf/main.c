/* SPDX-License-Identifier: Apache-2.0 */
/* Entry point of one perf binary; meson picks the collective with -DPERF_COLL=perfAllReduce etc. */
#include "common.h"

#ifndef PERF_COLL
#error "build with -DPERF_COLL=<collective descriptor>"
#endif

int main(int argc, char** argv) { return perfMain(&PERF_COLL, argc, argv); }
