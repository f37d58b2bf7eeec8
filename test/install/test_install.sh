#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# meson install into a destdir, then as a user would: a C program built with
# `pkg-config --cflags --libs symmcoll` links and reports the real NCCL's version; the
# libnccl.so.2 directory under LD_LIBRARY_PATH loads the real NCCL, never itself;
# symmcoll-run --print-params lists every knob. Usage: BUILD_DIR FAKE_NCCL [B_SANITIZE]
set -uo pipefail
build=$1 fake=$2 sanitize=${3:-none}
if [ "$sanitize" != none ]; then
  echo "install: skipped in a sanitized build ($sanitize): its library loads only behind the" \
       "sanitizer runtime; the plain build runs this test"
  exit 77
fi
# shellcheck source=../checks.sh
. "$(dirname "$0")/../checks.sh"
if ! DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "install: meson install failed"
  exit 1
fi
prefix=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
root="$tmp/root$prefix"
pc=$(dirname "$(find "$root" -name symmcoll.pc | head -1)")
libdir=$(dirname "$pc")
check "symmcoll.pc installed" test -f "$pc/symmcoll.pc"
check "symmcoll.h installed" test -f "$root/include/symmcoll.h"
for b in symmcoll-all-reduce-perf symmcoll-all-gather-perf symmcoll-reduce-scatter-perf symmcoll-tune symmcoll-run; do
  check "bin/$b installed" test -x "$root/bin/$b"
done
check "no nccl-tests names in bin" test ! -e "$root/bin/all_reduce_perf"

# A program built with pkg-config alone.
cat >"$tmp/user.c" <<'C'
#include <nccl.h>
#include <stdio.h>
#include "symmcoll.h"
int main(void) {
  int nccl = 0, ours = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess || symmcollGetVersion(&ours) != 0) return 1;
  printf("nccl %d symmcoll %d\n", nccl, ours);
  return ours == SYMMCOLL_VERSION_CODE ? 0 : 1;
}
C
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$root" --cflags --libs symmcoll)
  # shellcheck disable=SC2086
  check "build with pkg-config flags ($flags)" cc "$tmp/user.c" -o "$tmp/user" $flags
  out=$(SYMMCOLL_NCCL_LIB="$fake" LD_LIBRARY_PATH="$libdir" "$tmp/user" 2>&1)
  want=$(python3 -c "import ctypes; v=ctypes.c_int(); ctypes.CDLL('$fake').ncclGetVersion(ctypes.byref(v)); print(v.value)")
  check "the program reports the real NCCL's version ($out, want $want)" grep -q "nccl $want symmcoll" <<<"$out"
fi

# The libnccl.so.2 directory: a program that loads libnccl.so.2 gets libsymmcoll, which finds
# the real NCCL further down LD_LIBRARY_PATH.
compat="$libdir/symmcoll"
mkdir -p "$tmp/real"
ln -s "$fake" "$tmp/real/libnccl.so.2"
out=$(LD_LIBRARY_PATH="$compat:$tmp/real" SYMMCOLL_DEBUG=INFO python3 -c '
import ctypes
lib = ctypes.CDLL("libnccl.so.2")
v = ctypes.c_int()
print("version", lib.ncclGetVersion(ctypes.byref(v)), v.value)
print("ours", hasattr(lib, "symmcollGetVersion"))' 2>&1)
check "compat dir: libsymmcoll answers ($out)" grep -q "ours True" <<<"$out"
check "compat dir: it found the real NCCL past itself" grep -q "real NCCL $tmp/real/libnccl.so.2" <<<"$out"
check "compat dir: the call reached it" grep -q "version 0 $want" <<<"$out"

# symmcoll-run: knobs, the preload, the listing.
listed=$("$root/bin/symmcoll-run" --print-params | grep -c '^SYMMCOLL_')
every=$(python3 -c "
import ctypes, os, tempfile
lib = ctypes.CDLL('$libdir/libsymmcoll.so.0')
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
f = libc.fopen(tempfile.mktemp().encode(), b'w+')
lib.symmcollPrintParams(ctypes.c_void_p(f))
libc.rewind(ctypes.c_void_p(f))
buf = ctypes.create_string_buffer(1 << 16)
n = libc.fread(buf, 1, len(buf), ctypes.c_void_p(f))
print(sum(1 for l in buf.raw[:n].decode().splitlines() if l.startswith('SYMMCOLL_')))")
check "symmcoll-run --print-params lists every knob ($listed of $every)" test "$listed" -eq "$every" -a "$listed" -gt 10
out=$("$root/bin/symmcoll-run" SYMMCOLL_DISABLE=1 sh -c 'echo "$LD_PRELOAD $SYMMCOLL_DISABLE"')
check "symmcoll-run sets LD_PRELOAD and knobs ($out)" grep -q "libsymmcoll.so.0.* 1$" <<<"$out"
checks_done install
