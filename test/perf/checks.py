# SPDX-License-Identifier: Apache-2.0
"""What the Python tests of test/perf share: named checks, counted, and the closing line."""
import sys


class Checks:
    """check(name, ok, detail): counts a check, prints the failed ones; report() ends main()."""

    def __init__(self, test):
        self.test = test
        self.checks = self.failed = 0

    def __call__(self, name, ok, detail=""):
        self.checks += 1
        if not ok:
            self.failed += 1
            print(f"FAILED: {name}: {detail}", file=sys.stderr)

    def report(self):
        print(f"{self.test}: {self.checks} checks, {self.failed} failed")
        return 1 if self.failed else 0
