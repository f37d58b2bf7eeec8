#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The multimem kernels of all three collectives really contain their multimem instructions
# (all-reduce: ld_reduce and st; all-gather: st; reduce-scatter: ld_reduce) and their emulation
# holds none: checked in the PTX nvcc kept while compiling the library (src/meson.build: --keep),
# for the lowest sm_90+ architecture built, and, where cuobjdump exists, in the SASS of every
# sm_90+ image. In SASS, multimem.ld_reduce has its own opcode (LDGMC), but multimem.st compiles
# to the same STG.E.128.STRONG.SYS as a plain st.relaxed.sys.global.v4 (a store to a multicast
# address is what makes it multicast): there the PTX is the proof, and the SASS check only
# asserts that the 16-byte system-scope store is still there. The emulated kernels hold no LDGMC
# (the store cannot be told apart, the PTX check covers it).
# Every kernel of ours also starts with programmatic dependent launch's instructions (sm_90+,
# src/algos/sync.cuh, kernelEntry): griddepcontrol.wait before any memory access but parameter
# loads, then griddepcontrol.launch_dependents; checked in the same PTX. In SASS (not checked, the
# opcodes are not documented) they show as ACQBULK and PREEXIT: the check prints how many of the
# disassembled kernels hold each.
# Usage: test_disasm.py LIBRARY KEEP_DIR
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
failures = 0
checks = 0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg)


def split_functions(text, header_re, keep=lambda name: True):
    """{name: body} for every function whose header matches header_re (group 1 = name; `^`
    anchors at line starts) and whose name `keep` accepts. Bodies are cut out of the text
    directly: a SASS listing of one image is ~300 MB."""
    heads = [(m.start(), m.end(), m.group(1)) for m in re.finditer(header_re, text, re.M)]
    funcs = {}
    for i, (_, end, name) in enumerate(heads):
        if keep(name):
            funcs[name] = text[end:heads[i + 1][0] if i + 1 < len(heads) else len(text)]
    return funcs


# Kernel family (the template's name) -> (fewest real instances, PTX instructions it must hold).
FAMILIES = {
    "multimemKernel": (10, ("multimem.ld_reduce", "multimem.st")),
    "allGatherMultimemKernel": (10, ("multimem.st",)),
    "reduceScatterMultimemKernel": (10, ("multimem.ld_reduce",)),
}


def family(name):
    """The multimem family of a mangled kernel name (symm::<family><...>), or None."""
    m = re.match(r"_ZN4symm\d+(\w+?)I", name)
    return m.group(1) if m and m.group(1) in FAMILIES else None


def multimem_kernels(funcs):
    """{family: (real {name: body}, emulated {name: body})}; the last bool argument is Emulate."""
    out = {f: ({}, {}) for f in FAMILIES}
    for n, b in funcs.items():
        f = family(n)
        if f:
            out[f][1 if "Lb1E" in n else 0][n] = b
    return out


# A multimem instruction in PTX. Not the bare text "multimem.": the body of a module's last
# kernel runs into the module's .file table, which names src/algos/multimem.cuh wherever the
# file includes it.
MULTIMEM_PTX = re.compile(r"^\s*(?:@!?%p\d+\s+)?multimem\.", re.M)


def check_ptx(ptx):
    # Kernels are .visible entries, or .weak ones in device-debug (-G) builds.
    funcs = split_functions(ptx, r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+(\w+)\(")
    for f, (real, emul) in multimem_kernels(funcs).items():
        least, needs = FAMILIES[f]
        check(len(real) >= least, "PTX: expected >= %d real %s, found %d" % (least, f, len(real)))
        check(len(real) == len(emul), "PTX: %d real vs %d emulated %s" % (len(real), len(emul), f))
        for n, b in real.items():
            for insn in needs:
                check(insn in b, "PTX: %s lacks %s" % (n, insn))
        for n, b in emul.items():
            check(not MULTIMEM_PTX.search(b), "PTX: emulated %s contains multimem instructions" % n)
        print("PTX: %s: %d real, %d emulated" % (f, len(real), len(emul)))
    others = [n for n in funcs if family(n) is None]
    for n in others:
        check(not MULTIMEM_PTX.search(funcs[n]), "PTX: %s contains multimem instructions" % n)
    print("PTX: %d other kernels hold none" % len(others))
    check_pdl(funcs)


# A memory access in PTX other than a kernel parameter load (ld.param).
MEMORY_PTX = re.compile(r"^\s*(?:@!?%p\d+\s+)?(?:ld|st|atom|red|multimem|cp|prefetch)\.(?!param)",
                        re.M)


def check_pdl(funcs):
    ours = {n: b for n, b in funcs.items() if n.startswith("_ZN4symm")}
    check(len(ours) > 0, "PTX: no kernel of ours found")
    for n, b in ours.items():
        wait = b.find("griddepcontrol.wait;")
        trigger = b.find("griddepcontrol.launch_dependents;")
        check(wait >= 0, "PTX: %s lacks griddepcontrol.wait" % n)
        check(trigger > wait, "PTX: %s lacks griddepcontrol.launch_dependents after the wait" % n)
        first = MEMORY_PTX.search(b)
        check(wait >= 0 and (first is None or first.start() > wait),
              "PTX: %s touches memory before griddepcontrol.wait: %s" %
              (n, first.group(0).strip() if first else ""))
    print("PTX: %d kernels of ours start with griddepcontrol.wait, then launch_dependents" %
          len(ours))


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
    # SASS differs per architecture: every image from sm_90 on.
    listing = subprocess.run([tool, "-lelf", lib_path], capture_output=True, text=True).stdout
    images = sorted(set(re.findall(r"\.(sm_(\d+)[a-z]?)\.cubin", listing)), key=lambda a: int(a[1]))
    images = [a for a, n in images if int(n) >= 90]
    check(len(images) > 0, "SASS: no image for sm_90 or newer in %s" % lib_path)
    for image, sass in sass_by_image(tool, lib_path, images).items():
        check_sass(sass, image)
    print("test_disasm: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


def sass_by_image(tool, lib_path, images):
    """{image: SASS of the multimem kernels' translation units}. The library's ELF files are
    extracted once and only those naming a multimem kernel are disassembled, side by side;
    where extraction gives nothing usable, the whole library once per image (about 30 s each
    on an H100 machine's host)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool, "-xelf", "all", os.path.abspath(lib_path)], cwd=tmp,
                       capture_output=True)
        files = {}
        for f in sorted(os.listdir(tmp)):
            m = re.search(r"\.(sm_(\d+)[a-z]?)\.cubin$", f)
            if m and int(m.group(2)) >= 90:
                with open(os.path.join(tmp, f), "rb") as fh:
                    if b"ultimemKernel" in fh.read():
                        files.setdefault(m.group(1), []).append(os.path.join(tmp, f))
        if set(files) == set(images):
            jobs = [(image, [tool, "-sass", f]) for image in images for f in files[image]]
            print("SASS: %d extracted ELF files with multimem kernels" % len(jobs))
        else:
            jobs = [(image, [tool, "-sass", "-arch", image, lib_path]) for image in images]
            print("SASS: ELF extraction gave no usable files; the whole library per image")
        procs = [(image, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
                 for image, cmd in jobs]
        out = {image: "" for image in images}
        for image, proc in procs:
            out[image] += proc.communicate()[0]
        return out


# Family -> (SASS every real instance must hold, what that is). Seen on sm_90a, sm_100a and sm_120
# (-O3 and -G): multimem.ld_reduce is LDGMC (e.g. LDGMC.E.ADD.F32x4.RN.STRONG.SYS), multimem.st is
# STG.E.128.STRONG.SYS.
MULTIMEM_SASS = re.compile(r"\bLDGMC\b|\bREDGMC\b|\bSTGMC\b|MULTIMEM")
SASS_NEEDS = {
    "multimemKernel": (MULTIMEM_SASS, "multimem.ld_reduce (LDGMC)"),
    "allGatherMultimemKernel": (re.compile(r"\bSTG\.E\.128\.STRONG\.SYS\b"),
                                "STG.E.128.STRONG.SYS, the store multimem.st compiles to"),
    "reduceScatterMultimemKernel": (MULTIMEM_SASS, "multimem.ld_reduce (LDGMC)"),
}


def check_sass(sass, image):
    every = split_functions(sass, r"Function : (\S+)", keep=lambda n: n.startswith("_ZN4symm"))
    print("SASS %s: of %d kernels disassembled, %d hold ACQBULK, %d PREEXIT (griddepcontrol)" %
          (image, len(every), sum("ACQBULK" in b for b in every.values()),
           sum("PREEXIT" in b for b in every.values())))
    funcs = split_functions(sass, r"Function : (\S+)", keep=family)
    for f, (real, emul) in multimem_kernels(funcs).items():
        least = FAMILIES[f][0]
        need, what = SASS_NEEDS[f]
        check(len(real) >= least,
              "SASS %s: expected >= %d real %s, found %d" % (image, least, f, len(real)))
        for n, b in real.items():
            check(need.search(b) is not None, "SASS %s: %s has no %s" % (image, n, what))
        for n, b in emul.items():
            check(MULTIMEM_SASS.search(b) is None,
                  "SASS %s: emulated %s has a multimem instruction" % (image, n))
        print("SASS %s: %s: %d real, %d emulated checked" % (image, f, len(real), len(emul)))


sys.exit(main())
