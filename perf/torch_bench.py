# SPDX-License-Identifier: Apache-2.0
"""PyTorch on 2 GPUs, 2 processes (mp.spawn), for perf/torch_bench.sh, which runs it once plain
and once under LD_PRELOAD=libsymmcoll, then prints the table (--report).

  (a) bf16 all-reduce, 1 KiB-64 MiB, eager: dist.all_reduce (NCCL, or libsymmcoll when preloaded)
      beside PyTorch symmetric memory's one_shot_all_reduce and two_shot_all_reduce_ on a
      symm_mem.empty buffer. Each call is timed on the GPU (CUDA events around it on the current
      stream, so dist.all_reduce includes ProcessGroupNCCL's hop to its own stream and back, as
      users get it, with the GPU kept busy so that host issue time stays out); the median of
      ITERS calls after WARMUP. One CSV line per size:
      <out>/allreduce.<label>.csv.
  (b) training steps of an MLP (LAYERS Linear(4096, 4096) bf16, ReLU between, batch BATCH per
      rank), once with DDP and once with FSDP2 fully_shard: median step time of STEPS steps after
      WARMUP_STEPS, and a sha256 of every rank's final parameters (FSDP2: its shards), so the plain
      and preloaded runs can be compared bit for bit. <out>/train.<label>.csv. With
      TORCH_BENCH_PROFILE=1 three more steps run under torch.profiler and rank 0 prints the GPU
      kernels by time.

usage: python3 perf/torch_bench.py OUT_DIR LABEL [allreduce] [ddp] [fsdp]   (default: all three)
       python3 perf/torch_bench.py --report OUT_DIR PLAIN_LABEL PRELOAD_LABEL
Multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1,
set here before torch loads)."""
import csv
import hashlib
import os
import socket
import statistics
import sys

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
# cuBLAS picks the same kernels in both runs: only the collectives may differ.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

WORLD = 2
SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB
WARMUP, ITERS = 10, 50
SLEEP_CYCLES = 20_000_000  # about 10 ms at H100/H200 clocks: longer than issuing ITERS calls
LAYERS, HIDDEN = 8, 4096
# Rows per rank and step. 8192 makes the GPU, not the host, the bottleneck of a DDP step on an
# H200 pair (at 1024 it is host-bound, 4-5 ms whatever runs the collectives); FSDP2's step on this
# small model stays host-bound at either size (18-26 ms, 25-30 ms of CPU per step).
BATCH = int(os.environ.get("TORCH_BENCH_BATCH", "8192"))
WARMUP_STEPS, STEPS = 3, 20


# ---- (a) all-reduce -------------------------------------------------------------------------

def time_calls(torch, dist, fn):
    """Median GPU time of one call in us: ITERS calls back to back, each between two events, queued
    behind a sleeping kernel (about 10 ms), so that the GPU runs them one after the other without
    waiting for the host: each pair of events then holds the call's own GPU time (for
    dist.all_reduce with ProcessGroupNCCL's hop to its stream and back), not the host's time to
    issue it, which is PyTorch's and the same whatever library runs the collective."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ITERS)]
    torch.cuda._sleep(SLEEP_CYCLES)
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) * 1000.0 for start, end in pairs)


def bench_allreduce(torch, dist, rank, label, out_dir):
    group = dist.group.WORLD
    symm = None
    try:
        import warnings
        import torch.distributed._symmetric_memory as symm_mem
        try:
            symm_mem.set_backend("CUDA")  # PyTorch's own memory and kernels, never NCCL's
        except Exception:  # noqa: BLE001 (older versions: CUDA is the only backend)
            pass
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            with warnings.catch_warnings():  # not needed (and deprecated) in newer versions
                warnings.simplefilter("ignore")
                symm_mem.enable_symm_mem_for_group(group.group_name)
        symm = symm_mem
    except Exception as e:  # noqa: BLE001
        if rank == 0:
            print(f"torch_bench: no torch symmetric memory ({e}): its columns stay empty", flush=True)
    rows = []
    for nbytes in SIZES:
        n = nbytes // 2
        # Small integers: sums stay finite however many calls add up in place.
        x = torch.randint(-2, 3, (n,), device="cuda").to(torch.bfloat16)
        t_nccl = time_calls(torch, dist, lambda: dist.all_reduce(x))
        t_one = t_two = float("nan")
        if symm is not None:
            try:
                buf = symm.empty(n, device="cuda", dtype=torch.bfloat16)
                symm.rendezvous(buf, group.group_name)
                buf.copy_(x)
                t_one = time_calls(torch, dist, lambda: torch.ops.symm_mem.one_shot_all_reduce(
                    buf, "sum", group.group_name))
                t_two = time_calls(torch, dist, lambda: torch.ops.symm_mem.two_shot_all_reduce_(
                    buf, "sum", group.group_name))
            except Exception as e:  # noqa: BLE001
                if rank == 0:
                    print(f"torch_bench: symm_mem op failed at {nbytes} B: {e}", flush=True)
        rows.append((nbytes, t_nccl, t_one, t_two))
        if rank == 0:
            print(f"allreduce,{label},{nbytes},{t_nccl:.2f},{t_one:.2f},{t_two:.2f}", flush=True)
    if rank == 0:
        write_allreduce_csv(os.path.join(out_dir, f"allreduce.{label}.csv"), label, rows)


def write_allreduce_csv(path, label, rows):
    """rows: (bytes, all_reduce, torch one_shot, torch two_shot_) times in us. torch_compare.py
    writes its graph-mode rows through this too, so --report reads either."""
    with open(path, "w") as f:
        f.write("bytes,label,allreduce_us,torch_one_shot_us,torch_two_shot_us\n")
        for b, a, o, t in rows:
            f.write(f"{b},{label},{a:.3f},{o:.3f},{t:.3f}\n")


# ---- (b) training steps ---------------------------------------------------------------------

def make_model(torch):
    torch.manual_seed(0)  # the same initial weights on every rank and in every run
    layers = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(HIDDEN, HIDDEN, bias=False))
        if i < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device="cuda", dtype=torch.bfloat16)


def params_digest(torch, dist, model):
    """sha256 over every rank's local parameters (DDP: replicas; FSDP2: shards), in rank order."""
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach()
        t = t.to_local() if hasattr(t, "to_local") else t
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    digests = [None] * WORLD
    dist.all_gather_object(digests, h.hexdigest())
    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]


def bench_train(torch, dist, rank, label, mode, out_dir):
    model = make_model(torch)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[rank])
    else:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    x = torch.randn(BATCH, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g)
    target = torch.randn(BATCH, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g)
    times, loss = [], None
    for step in range(WARMUP_STEPS + STEPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = (model(x).float() - target.float()).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if step >= WARMUP_STEPS:
            times.append(start.elapsed_time(end))
    if os.environ.get("TORCH_BENCH_PROFILE") == "1":
        profile_steps(torch, rank, label, mode, model, opt, x, target)
    digest = params_digest(torch, dist, model)
    if rank == 0:
        line = f"{mode},{label},{STEPS},{statistics.median(times):.3f},{digest},{loss.item():.6g},{BATCH}"
        print("train," + line, flush=True)
        path = os.path.join(out_dir, f"train.{label}.csv")
        new = not os.path.exists(path)
        with open(path, "a") as f:
            if new:
                f.write("mode,label,steps,median_step_ms,params_sha256,final_loss,batch\n")
            f.write(line + "\n")
    del model, opt
    torch.cuda.empty_cache()


def profile_steps(torch, rank, label, mode, model, opt, x, target):
    """TORCH_BENCH_PROFILE=1: three more steps under torch.profiler; rank 0 prints the GPU
    kernels by total time (where a slower step spends its time). The parameters move on by
    three steps, so digests compare only between runs that all profiled."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            loss = (model(x).float() - target.float()).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    if rank == 0:
        key = "self_device_time_total"
        print(f"profile,{label},{mode}: 3 steps", flush=True)
        print(prof.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=60), flush=True)


def worker(rank, port, out_dir, label, parts):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    torch.use_deterministic_algorithms(True, warn_only=True)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            device_id=torch.device("cuda", rank))
    if "allreduce" in parts:
        bench_allreduce(torch, dist, rank, label, out_dir)
    for mode in ("ddp", "fsdp"):
        if mode in parts:
            bench_train(torch, dist, rank, label, mode, out_dir)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the table (no torch needed) --------------------------------------------------------------

def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return None
    return v if v == v and v > 0 else None  # NaN and missing: None


def report(out_dir, plain, preload):
    """Prints the table; returns 0, or 1 when a part is missing or the parameters differ."""
    status = 0
    a = {int(r["bytes"]): r for r in read_csv(os.path.join(out_dir, f"allreduce.{plain}.csv"))}
    b = {int(r["bytes"]): r for r in read_csv(os.path.join(out_dir, f"allreduce.{preload}.csv"))}
    print(f"\n# all_reduce, bf16, {WORLD} ranks, eager: GPU time of one call, median of {ITERS} (us)")
    print("# torch best = the fastest of NCCL (dist.all_reduce), torch one_shot and two_shot_ (plain run)")
    print(f"# {'size':>8} {'NCCL':>9} {'ours':>9} {'one_shot':>9} {'two_shot_':>9} {'best':>9} {'ours vs best':>13}")
    for size in sorted(set(a) | set(b)):
        pa, pb = a.get(size, {}), b.get(size, {})
        nccl, ours = num(pa.get("allreduce_us")), num(pb.get("allreduce_us"))
        one, two = num(pa.get("torch_one_shot_us")), num(pa.get("torch_two_shot_us"))
        cands = [t for t in (nccl, one, two) if t is not None]
        best = min(cands) if cands else None
        cells = [f"{t:9.2f}" if t is not None else f"{'-':>9}" for t in (nccl, ours, one, two, best)]
        ratio = f"{best / ours:12.2f}x" if best is not None and ours is not None else f"{'-':>13}"
        print(f"  {human(size):>8} {' '.join(cells)} {ratio}")
    if not a or not b:
        status = 1
    rows = read_csv(os.path.join(out_dir, f"train.{plain}.csv")) + \
        read_csv(os.path.join(out_dir, f"train.{preload}.csv"))
    batch = sorted({r.get("batch") or "?" for r in rows})
    print(f"\n# training step, MLP {LAYERS}x Linear({HIDDEN}, {HIDDEN}) bf16, batch {'/'.join(batch)} per "
          f"rank: median of {STEPS} steps (ms), then the median over runs (TORCH_BENCH_APPEND=1 "
          f"runs add rows); parameters after {WARMUP_STEPS + STEPS} steps, every run alike")
    print(f"# {'mode':>6} {'plain':>9} {'preload':>9} {'speedup':>8}  bit-identical  runs (plain, preload; each run's median)")
    for mode, name in (("ddp", "DDP"), ("fsdp", "FSDP2")):
        ra = [r for r in rows if r["mode"] == mode and r["label"] == plain]
        rb = [r for r in rows if r["mode"] == mode and r["label"] == preload]
        ta = [t for t in (num(r["median_step_ms"]) for r in ra) if t]
        tb = [t for t in (num(r["median_step_ms"]) for r in rb) if t]
        sa = statistics.median(ta) if ta else None
        sb = statistics.median(tb) if tb else None
        same = "yes" if ra and rb and len({r["params_sha256"] for r in ra + rb}) == 1 else "no"
        if same != "yes":
            status = 1
        speed = f"{sa / sb:7.2f}x" if sa and sb else f"{'-':>8}"
        cells = [f"{t:9.2f}" if t else f"{'-':>9}" for t in (sa, sb)]
        runs = " ".join(f"{t:.2f}" for t in ta) + " | " + " ".join(f"{t:.2f}" for t in tb)
        print(f"  {name:>6} {' '.join(cells)} {speed}  {same:<13}  {runs}")
    return status


def main(argv):
    if len(argv) == 4 and argv[0] == "--report":
        return report(argv[1], argv[2], argv[3])
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, label = argv[0], argv[1]
    parts = argv[2:] or ["allreduce", "ddp", "fsdp"]
    import torch
    import torch.multiprocessing as mp
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD:
        print(f"torch_bench: needs {WORLD} GPUs", file=sys.stderr)
        return 77
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"train.{label}.csv")
    if os.path.exists(path) and os.environ.get("TORCH_BENCH_APPEND") != "1":
        os.remove(path)
    mp.spawn(worker, args=(free_port(), out_dir, label, parts), nprocs=WORLD, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
