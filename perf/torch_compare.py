# SPDX-License-Identifier: Apache-2.0
"""bf16 all-reduce through PyTorch, 2 processes, 20 ops captured in one CUDA graph (median of
replays, CUDA events): torch.distributed.all_reduce (NCCL, or libsymmcoll when preloaded) against
PyTorch symmetric memory's one_shot_all_reduce and two_shot_all_reduce_ in the same harness.
usage: [LD_PRELOAD=.../libsymmcoll.so.0] python3 perf/torch_compare.py <label> [out.csv]
Multicast stays off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 are forced here."""
import os
import statistics
import sys

os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
from torch_bench import write_allreduce_csv  # noqa: E402 (this folder; it does not import torch)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SIZES = [1 << k for k in (10, 12, 14, 16, 18, 20, 22, 24, 26)]
OPS_PER_GRAPH = 20
REPLAYS = 15


def time_graph(fn):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(OPS_PER_GRAPH):
            fn()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / OPS_PER_GRAPH)
    return statistics.median(times)


def worker(rank, label, csv_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    try:
        import torch.distributed._symmetric_memory as symm_mem
        symm_mem.enable_symm_mem_for_group(group.group_name)
        have_symm = True
    except Exception as e:  # noqa: BLE001
        if rank == 0:
            print(f"no torch symmetric memory: {e}")
        have_symm = False
    rows = []
    for nbytes in SIZES:
        n = nbytes // 2
        x = torch.randint(-8, 8, (n,), device="cuda").to(torch.bfloat16)
        y = x.clone()
        dist.all_reduce(y)
        torch.cuda.synchronize()
        t_nccl = time_graph(lambda: dist.all_reduce(y))
        t_one = t_two = float("nan")
        if have_symm:
            try:
                buf = symm_mem.empty(n, device="cuda", dtype=torch.bfloat16)
                symm_mem.rendezvous(buf, group.group_name)
                buf.copy_(x)
                t_one = time_graph(lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group.group_name))
                t_two = time_graph(lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group.group_name))
            except Exception as e:  # noqa: BLE001
                if rank == 0:
                    print(f"symm_mem op failed at {nbytes}: {e}")
        rows.append((nbytes, t_nccl, t_one, t_two))
    if rank == 0:
        print(f"{'bytes':>10} {label + ' all_reduce':>22} {'torch one_shot':>15} {'torch two_shot_':>15}")
        for b, a, o, t in rows:
            print(f"{b:>10} {a:22.2f} {o:15.2f} {t:15.2f}")
        if csv_path:
            write_allreduce_csv(csv_path, label, rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    label = sys.argv[1] if len(sys.argv) > 1 else "nccl"
    csv_path = sys.argv[2] if len(sys.argv) > 2 else ""
    mp.spawn(worker, args=(label, csv_path), nprocs=2)
