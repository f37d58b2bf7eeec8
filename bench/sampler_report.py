# SPDX-License-Identifier: Apache-2.0
"""Report of bench/sampler.c's samples of bench/host_path: per kind of call (the outermost
issue* function on the stack), samples split by leaf module and converted to microseconds per
call; the leaf functions inside libsymmcoll; and for our calls, which function of ours called
into libc or the driver when a sample landed there.

usage: sampler_report.py SAMPLES CALLS_PER_KIND_PER_RANK RANKS
Symbols come from addr2line (binutils) on libsymmcoll and host_path (not stripped)."""
import collections, subprocess, sys, os
path, calls, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path).read().splitlines()
cpu = float(lines[0].split()[2]); total = int(lines[0].split()[4])
samples = [l.split() for l in lines[1:]]
per = cpu / max(total, 1)
mods = collections.defaultdict(set)
for s in samples:
    for f in s:
        m, o = f.rsplit('+', 1); mods[m].add(o)
names = {}
for m, offs in mods.items():
    if m == '?' or not (('libsymmcoll' in m) or ('host_path' in m)): continue
    offs = sorted(offs)
    out = subprocess.run(['addr2line', '-f', '-C', '-e', m], input='\n'.join(offs), capture_output=True, text=True).stdout.splitlines()
    for i, o in enumerate(offs): names[(m, o)] = out[2 * i] if 2 * i < len(out) else '??'
def short(m): return os.path.basename(m)
def kindOf(sample):
    """The outermost issue* function on the stack (the host_path kind), or 'other'."""
    kind = 'other'
    for f in sample:
        m, o = f.rsplit('+', 1)
        n = names.get((m, o), '')
        if n.startswith('issue') and n != 'issue': kind = n
    return kind
sampleKinds = [kindOf(s) for s in samples]
kinds = collections.Counter(); leafmod = collections.defaultdict(collections.Counter); leaffn = collections.defaultdict(collections.Counter)
for s, kind in zip(samples, sampleKinds):
    kinds[kind] += 1
    m, o = s[0].rsplit('+', 1)
    leafmod[kind][short(m)] += 1
    if 'libsymmcoll' in m: leaffn[kind][names.get((m, o), '??')] += 1
print(f"cpu {cpu:.2f} s, {total} samples, {per*1e3:.2f} ms per sample; us per call = samples x {per*1e6/(calls*ranks):.4f}")
for k, c in kinds.most_common():
    print(f"{k:22s} {c:6d} samples = {c*per*1e6/(calls*ranks):7.3f} us/call   " + ', '.join(f"{m} {v}" for m, v in leafmod[k].most_common(6)))
for k in leaffn:
    print(k, 'libsymmcoll leaves:', ', '.join(f"{fn} {v}" for fn, v in leaffn[k].most_common(25)))
# Where ours spends its time outside libsymmcoll: for samples of issueAllReduce whose leaf is in
# libc or libcuda, the innermost libsymmcoll frame (its caller on our side).
callers = collections.defaultdict(collections.Counter)
for s, kind in zip(samples, sampleKinds):
    if kind != 'issueAllReduce': continue
    leaf = short(s[0].rsplit('+', 1)[0])
    if 'libsymmcoll' in leaf: continue
    who = 'no libsymmcoll frame'
    for f in s[1:]:
        m, o = f.rsplit('+', 1)
        if 'libsymmcoll' in m: who = names.get((m, o), '??'); break
    callers[leaf][who] += 1
for leaf, c in callers.items():
    print(f"issueAllReduce, leaf in {leaf}, innermost libsymmcoll caller:", ', '.join(f"{fn} {v}" for fn, v in c.most_common(20)))
