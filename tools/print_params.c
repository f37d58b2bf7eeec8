/* SPDX-License-Identifier: Apache-2.0 */
/* symmcoll-params: prints every SYMMCOLL_* knob with its value, default and help (symmcoll-run
 * --print-params runs it). */
#include <stdio.h>

#include "symmcoll.h"

int main(void) {
  int version = 0;
  symmcollGetVersion(&version);
  printf("libsymmcoll %d.%d.%d knobs (environment variables; the value shown is this process's):\n",
         version / 10000, version / 100 % 100, version % 100);
  symmcollPrintParams(stdout);
  return 0;
}
