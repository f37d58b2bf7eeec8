#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# perf/torch_bench.py --report on synthetic CSVs (no torch, no GPU): PyTorch's best of NCCL and
# its symmetric-memory ops per size against ours, missing values, step times, "bit-identical",
# and the exit status (1 when the parameters differ or a part is missing).
# Usage: test_torch_bench_report.py PERF_DIR
import os
import subprocess
import sys
import tempfile

from checks import Checks  # beside this file

check = Checks("test_torch_bench_report")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    with tempfile.TemporaryDirectory() as d:
        return run(os.path.join(sys.argv[1], "torch_bench.py"), d)


def run(script, d):
    head = "bytes,label,allreduce_us,torch_one_shot_us,torch_two_shot_us\n"
    write(os.path.join(d, "allreduce.nccl.csv"), head + "1024,nccl,10.000,6.000,7.000\n"
          "67108864,nccl,250.000,370.000,nan\n")
    write(os.path.join(d, "allreduce.libsymmcoll.csv"), head + "1024,libsymmcoll,3.000,6.100,7.100\n"
          "67108864,libsymmcoll,200.000,371.000,212.000\n")
    thead = "mode,label,steps,median_step_ms,params_sha256,final_loss\n"
    write(os.path.join(d, "train.nccl.csv"), thead + "ddp,nccl,20,12.000,aaaa,1.5\nfsdp,nccl,20,15.000,bbbb,1.5\n")
    write(os.path.join(d, "train.libsymmcoll.csv"),
          thead + "ddp,libsymmcoll,20,10.000,aaaa,1.5\nfsdp,libsymmcoll,20,16.000,cccc,1.5\n")
    r = subprocess.run([sys.executable, script, "--report", d, "nccl", "libsymmcoll"], capture_output=True, text=True)
    out = r.stdout
    # 1 KiB: best = one_shot 6.00 (plain run), ours 3.00: 2.00x; 64 MiB: two_shot_ NaN, best NCCL 250.
    check("row small", "     1 KiB     10.00      3.00      6.00      7.00      6.00         2.00x" in out, out)
    check("row nan", "    64 MiB    250.00    200.00    370.00         -    250.00         1.25x" in out, out)
    check("ddp", "     DDP     12.00     10.00    1.20x  yes" in out, out)
    check("fsdp", "   FSDP2     15.00     16.00    0.94x  no" in out, out)
    check("exit differs", r.returncode == 1, f"exit {r.returncode}")
    write(os.path.join(d, "train.libsymmcoll.csv"),
          thead + "ddp,libsymmcoll,20,10.000,aaaa,1.5\nfsdp,libsymmcoll,20,16.000,bbbb,1.5\n")
    r = subprocess.run([sys.executable, script, "--report", d, "nccl", "libsymmcoll"], capture_output=True, text=True)
    check("exit identical", r.returncode == 0, f"exit {r.returncode}\n{r.stdout}{r.stderr}")
    # Several runs (TORCH_BENCH_APPEND=1): the median over runs, each run listed; one run's
    # parameters differing makes the whole mode "no".
    thead2 = thead.rstrip("\n") + ",batch\n"
    write(os.path.join(d, "train.nccl.csv"), thead2 + "ddp,nccl,20,12.000,aaaa,1.5,8192\n"
          "ddp,nccl,20,14.000,aaaa,1.5,8192\nddp,nccl,20,13.000,aaaa,1.5,8192\n"
          "fsdp,nccl,20,15.000,bbbb,1.5,8192\n")
    write(os.path.join(d, "train.libsymmcoll.csv"), thead2 + "ddp,libsymmcoll,20,10.000,aaaa,1.5,8192\n"
          "ddp,libsymmcoll,20,11.000,aaaa,1.5,8192\nfsdp,libsymmcoll,20,15.000,bbbb,1.5,8192\n"
          "fsdp,libsymmcoll,20,15.000,bbbc,1.5,8192\n")
    r = subprocess.run([sys.executable, script, "--report", d, "nccl", "libsymmcoll"], capture_output=True, text=True)
    out = r.stdout
    check("runs median", "     DDP     13.00     10.50    1.24x  yes            12.00 14.00 13.00 | 10.00 11.00" in out, out)
    check("runs differ", "   FSDP2     15.00     15.00    1.00x  no " in out, out)
    check("batch", "batch 8192 per rank" in out, out)
    check("exit runs differ", r.returncode == 1, f"exit {r.returncode}")
    os.remove(os.path.join(d, "allreduce.libsymmcoll.csv"))
    r = subprocess.run([sys.executable, script, "--report", d, "nccl", "libsymmcoll"], capture_output=True, text=True)
    check("exit missing", r.returncode == 1 and "     1 KiB     10.00         -" in r.stdout, f"exit {r.returncode}\n{r.stdout}")
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
