#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Finds NCCL's header and libnccl.so.2 for building libsymmcoll: the one place that decides,
used by meson.build and by perf/build_env.sh alike.

-Dnccl_include=DIR (--nccl-include) is taken as is, except that a directory the compilers of the
build already search by default (--cc and --nvcc alike, e.g. /usr/include) is reported as no
include directory, as for "system" below: nvcc breaks when it is passed again
(-isystem=/usr/include hides math.h from libstdc++'s <cmath>). Otherwise, in this order (the first that has nccl.h wins; the library is
taken from the same place):
  1. --nccl-home DIR, else $NCCL_HOME (nccl-tests' convention: DIR/include, DIR/lib)
  2. the CUDA toolkit's include directory (--cuda-include)
  3. the C compiler's default system paths (--cc; e.g. /usr/include from NCCL's packages):
     reported as "system", so the build passes no -I for it (nvcc breaks on -isystem=/usr/include)
  4. pkg-config nccl
  5. the nvidia-nccl wheel of python3 on PATH, of this interpreter, or of the Python beside meson

Output, --format meson: three lines (source, include dir or empty for system, library or empty).
--format shell: NCCL_SOURCE=..., NCCL_INCLUDE_DIR=..., NCCL_LIB_FILE=... lines for `eval`.
Exit 1 with one line naming what was tried and what to set when nothing is found."""
import argparse
import os
import shlex
import shutil
import subprocess
import sys

LIB_NAMES = ("libnccl.so.2", "libnccl.so")


def lib_in(dirs):
    for d in dirs:
        for name in LIB_NAMES:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return os.path.realpath(path) if name == "libnccl.so" else path
    return ""


def root_candidate(root):
    inc = os.path.join(root, "include")
    if not os.path.isfile(os.path.join(inc, "nccl.h")):
        return None
    return inc, lib_in([os.path.join(root, "lib"), os.path.join(root, "lib64"),
                        os.path.join(root, "lib", "x86_64-linux-gnu")])


def system_lib():
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if "libnccl.so.2 " in line and "=>" in line:
                return line.split("=>")[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return lib_in(["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                   "/usr/lib", "/usr/local/lib"])


def compiler_finds_header(cc):
    if not cc:
        return False
    try:
        r = subprocess.run(shlex.split(cc) + ["-E", "-x", "c", "-"], input="#include <nccl.h>\n",
                           capture_output=True, text=True, timeout=30)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def default_include_dirs(cmd, lang):
    """The directories `cmd` searches for #include <...> without flags (from its -v output)."""
    if not cmd:
        return set()
    verbose = ["-Xcompiler", "-v"] if lang == "cu" else ["-v"]
    try:
        r = subprocess.run(shlex.split(cmd) + ["-E", "-x", lang] + verbose + [os.devnull],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return set()
    dirs, inside = set(), False
    for line in (r.stderr + r.stdout).splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            inside = False
        elif inside and line.startswith(" "):
            dirs.add(os.path.realpath(line.strip()))
    return dirs


def is_default_include(inc, cc, nvcc):
    """Is `inc` searched by default by the C compiler and by nvcc (when given) alike?"""
    real = os.path.realpath(inc)
    compilers = [(cmd, lang) for cmd, lang in ((cc, "c"), (nvcc, "cu")) if cmd]
    return bool(compilers) and all(real in default_include_dirs(cmd, lang) for cmd, lang in compilers)


def pkg_config():
    if shutil.which("pkg-config") is None:
        return None
    try:
        r = subprocess.run(["pkg-config", "--variable=includedir", "nccl"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0 or not r.stdout.strip():
            return None
        inc = r.stdout.strip()
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "nccl"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not os.path.isfile(os.path.join(inc, "nccl.h")):
        return None
    return inc, lib_in([libdir]) if libdir else ""


def pythons():
    seen = []
    for py in (shutil.which("python3"), sys.executable,
               os.path.join(os.path.dirname(shutil.which("meson") or "/nonexistent/x"), "python3")):
        if py and os.path.isfile(py) and os.path.realpath(py) not in [os.path.realpath(s) for s in seen]:
            seen.append(py)
    return seen


def wheel(py):
    code = "import nvidia.nccl as m; print(list(m.__path__)[0])"
    try:
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return root_candidate(r.stdout.strip().splitlines()[-1])


def find(args):
    tried = []
    if args.nccl_include:
        inc = args.nccl_include
        if is_default_include(inc, args.cc, args.nvcc):
            return "-Dnccl_include=" + inc + ", a default include directory of the compilers", "", "", tried
        return "-Dnccl_include", inc, "", tried
    home = args.nccl_home or os.environ.get("NCCL_HOME", "")
    if home:
        found = root_candidate(home)
        if found:
            return "nccl_home " + home, found[0], found[1], tried
        # Named outright: no other NCCL may stand in for it.
        return None, None, None, ["the NCCL home " + home + " (it has no include/nccl.h)"]
    else:
        tried.append("-Dnccl_home/NCCL_HOME (unset)")
    if args.cuda_include:
        if os.path.isfile(os.path.join(args.cuda_include, "nccl.h")):
            root = os.path.dirname(args.cuda_include)
            return ("cuda " + args.cuda_include, args.cuda_include,
                    lib_in([os.path.join(root, "lib64"), os.path.join(root, "lib")]), tried)
        tried.append(args.cuda_include)
    if compiler_finds_header(args.cc):
        return "system", "", system_lib(), tried
    tried.append("the compiler's system paths")
    found = pkg_config()
    if found:
        return "pkg-config", found[0], found[1], tried
    tried.append("pkg-config nccl")
    for py in pythons():
        found = wheel(py)
        if found:
            return "wheel of " + py, found[0], found[1], tried
    tried.append("the nvidia-nccl wheel of " + (", ".join(pythons()) or "python3"))
    return None, None, None, tried


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nccl-include", default="", help="nccl.h's directory, named outright")
    ap.add_argument("--nccl-home", default="")
    ap.add_argument("--cuda-include", default="")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--nvcc", default="", help="the CUDA compiler (its default include directories)")
    ap.add_argument("--format", choices=("meson", "shell"), default="meson")
    args = ap.parse_args()
    if args.nccl_include and not os.path.isfile(os.path.join(args.nccl_include, "nccl.h")):
        print("nccl.h not found in -Dnccl_include=" + args.nccl_include)
        return 1
    source, inc, lib, tried = find(args)
    if source is None:
        print("nccl.h not found (tried " + "; ".join(tried) + "): set -Dnccl_home=DIR or "
              "NCCL_HOME=DIR, a directory with include/nccl.h and lib/libnccl.so.2")
        return 1
    if args.format == "shell":
        print("NCCL_SOURCE=" + shlex.quote(source))
        print("NCCL_INCLUDE_DIR=" + shlex.quote(inc))
        print("NCCL_LIB_FILE=" + shlex.quote(lib))
    else:
        print(source)
        print(inc)
        print(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
