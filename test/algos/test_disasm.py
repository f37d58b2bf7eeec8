#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The multimem kernels really contain multimem instructions and their emulation does not:
# checked in the PTX nvcc kept while compiling the library (src/meson.build: --keep), for every
# sm_90+ architecture built, and, where cuobjdump exists, in the library's SASS.
# Usage: test_disasm.py LIBRARY KEEP_DIR
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
failures = 0
checks = 0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg)


def split_functions(text, header_re):
    """{name: body} for every function whose header matches header_re (group 1 = name)."""
    funcs, name, body = {}, None, []
    for line in text.splitlines():
        m = re.search(header_re, line)
        if m:
            if name:
                funcs[name] = "\n".join(body)
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        funcs[name] = "\n".join(body)
    return funcs


def multimem_kernels(funcs):
    real = {n: b for n, b in funcs.items() if "multimemKernel" in n and "Lb0E" in n}
    emul = {n: b for n, b in funcs.items() if "multimemKernel" in n and "Lb1E" in n}
    return real, emul


def check_ptx(ptx):
    # Kernels are .visible entries, or .weak ones in device-debug (-G) builds.
    funcs = split_functions(ptx, r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+(\w+)\(")
    real, emul = multimem_kernels(funcs)
    check(len(real) >= 10, "PTX: expected >= 10 real multimem kernels, found %d" % len(real))
    check(len(real) == len(emul), "PTX: %d real vs %d emulated kernels" % (len(real), len(emul)))
    for n, b in real.items():
        check("multimem.ld_reduce" in b, "PTX: %s lacks multimem.ld_reduce" % n)
        check("multimem.st" in b, "PTX: %s lacks multimem.st" % n)
    for n, b in emul.items():
        check("multimem." not in b, "PTX: emulated %s contains multimem instructions" % n)
    others = [n for n in funcs if "multimemKernel" not in n]
    for n in others:
        check("multimem." not in funcs[n], "PTX: %s contains multimem instructions" % n)
    print("PTX: %d real multimem kernels, %d emulated, %d others checked" %
          (len(real), len(emul), len(others)))


def main():
    lib_path = sys.argv[1]
    keep_dir = sys.argv[2] if len(sys.argv) > 2 else None
    kept = sorted(glob.glob(os.path.join(keep_dir, "*.ptx"))) if keep_dir else []
    # One PTX file per translation unit and architecture; multimem exists from sm_90 on (below
    # that the kernels trap and hold no instruction). The PTX of every architecture comes from
    # the same source: the lowest one from sm_90 on is checked, all its files at once.
    by_arch = {}
    for path in kept:
        with open(path) as f:
            text = f.read()
        target = re.search(r"^\.target sm_(\d+)", text, re.M)
        if target and int(target.group(1)) >= 90:
            by_arch.setdefault(int(target.group(1)), []).append(text)
    if by_arch:
        arch = min(by_arch)
        print("PTX for sm_%d (%d files)" % (arch, len(by_arch[arch])))
        check_ptx("\n".join(by_arch[arch]))
    tool = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if shutil.os.path.exists("/usr/local/cuda/bin/cuobjdump")
        else None)
    if tool is None:
        print("SASS: cuobjdump not found, not checked")
        print("test_disasm: %d checks, %d failed" % (checks, failures))
        return 1 if failures else (SKIP if checks == 0 else 0)
    # SASS differs per architecture: every image from sm_90 on, one at a time.
    listing = subprocess.run([tool, "-lelf", lib_path], capture_output=True, text=True).stdout
    images = sorted(set(re.findall(r"\.(sm_(\d+)[a-z]?)\.cubin", listing)), key=lambda a: int(a[1]))
    images = [a for a, n in images if int(n) >= 90]
    check(len(images) > 0, "SASS: no image for sm_90 or newer in %s" % lib_path)
    for image in images:
        check_sass(subprocess.run([tool, "-sass", "-arch", image, lib_path],
                                  capture_output=True, text=True).stdout, image)
    print("test_disasm: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


def check_sass(sass, image):
    funcs = split_functions(sass, r"Function : (\S+)")
    real, emul = multimem_kernels(funcs)
    check(len(real) >= 10, "SASS %s: expected >= 10 real multimem kernels, found %d" % (image, len(real)))
    # The SASS spelling of multimem.ld_reduce / multimem.st is not documented; accept the known
    # spellings, else opcodes that appear in real multimem kernels and in no other kernel.
    mm = re.compile(r"MULTIMEM|LDGMC|REDGMC|STGMC|\.MMEM\b")
    opcode = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
    others = set()
    for n, b in funcs.items():
        if not ("multimemKernel" in n and "Lb0E" in n):
            others |= set(opcode.findall(b))
    for n, b in real.items():
        named = mm.search(b) is not None
        unique = sorted(set(opcode.findall(b)) - others)
        if not named:
            print("SASS %s %s: no known multimem mnemonic; opcodes found only in real multimem "
                  "kernels: %s" % (image, n, " ".join(unique) or "(none)"))
        check(named or unique, "SASS %s: %s has no multimem/multicast instruction" % (image, n))
    for n, b in emul.items():
        check(mm.search(b) is None, "SASS %s: emulated %s has a multimem instruction" % (image, n))
    print("SASS %s: %d real multimem kernels, %d emulated checked" % (image, len(real), len(emul)))


sys.exit(main())
