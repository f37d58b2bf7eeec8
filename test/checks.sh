# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by the shell tests: a scratch directory $tmp (removed at exit); check NAME COMMAND...
# (counted, a failed one named on stderr); check_failed NAME (a failure seen otherwise);
# checks_done TEST: the closing line, and status 0 only when checks ran and every one passed.
checks=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check_failed() { # name
  failed=$((failed + 1))
  echo "FAILED: $1" >&2
}
check() { # name, command...
  local name=$1
  shift
  checks=$((checks + 1))
  "$@" || check_failed "$name"
}
checks_done() { # test name
  echo "$1: $checks checks, $failed failed"
  [ "$failed" = 0 ] && [ "$checks" -gt 0 ]
}
