/* SPDX-License-Identifier: Apache-2.0 */
/* Compare mode (-X): the same sweep with NCCL alone and with libsymmcoll, side by side. */
#ifndef PERF_COMPARE_H
#define PERF_COMPARE_H

#include "common.h"

/* Re-runs this binary twice (SYMMCOLL_DISABLE=1, then without), collects both CSVs, prints the
 * comparison, writes <prefix>.csv and, through plot.py, <prefix>.png. Returns an exit code. */
int perfCompareMain(const struct perfColl* coll, const struct perfOptions* opt, int argc, char** argv);

/* The child's argument list: argv without -X/--compare/--csv/--label (and their values), then
 * "--csv <csv> --label <label>". Returns a NULL-terminated array to free(), or NULL. */
char** perfCompareChildArgs(int argc, char** argv, const char* csv, const char* label);

#endif
