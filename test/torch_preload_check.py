# SPDX-License-Identifier: Apache-2.0
"""Two-process PyTorch (NCCL backend) run of all_reduce, all_gather_into_tensor,
reduce_scatter_tensor, broadcast and send/recv on deterministic random data; prints a digest.

Run it with and without LD_PRELOAD=<build>/src/libsymmcoll.so.0 and diff the outputs
(test/torch_preload_check.sh does both). Every result is also checked against a host reference
computed from the same seeds (each rank regenerates its peer's inputs), so a wrong answer fails
even without the diff: exit status 1 and MISMATCH lines.

Inputs are small integers stored in every dtype, so sums are exact whatever the reduction order
and the digest can be compared bit for bit between NCCL and libsymmcoll.
"""
import hashlib
import os
import socket
import sys

# Multicast (NVLS) is forbidden on the machines this runs on: off before torch loads NCCL.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
          torch.uint8]
# Odd sizes on purpose (not multiples of 16 bytes), up to a few MiB.
SIZES = [1, 7, 1000, 4099, 65537, 262147, 1 << 20, 3000017]


def make_input(rank, case, n, dtype):
    """The input `rank` contributes to case `case`: integers in [-8, 8] (uint8: [0, 15])."""
    g = torch.Generator().manual_seed(1_000_003 * (case + 1) + 7919 * rank)
    lo, hi = (0, 16) if dtype == torch.uint8 else (-8, 9)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def digest(t):
    """sha256 of the tensor's bytes plus a few values, one short string."""
    host = t.detach().contiguous().cpu()
    raw = host.view(torch.uint8).numpy().tobytes()
    head = ",".join(f"{v:g}" for v in host[:3].double().tolist())
    return f"{hashlib.sha256(raw).hexdigest()[:20]} n={host.numel()} [{head}]"


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.lines = []
        self.mismatches = 0

    def record(self, name, got, want):
        ok = torch.equal(got.cpu(), want.to(got.dtype))
        if not ok:
            self.mismatches += 1
            diff = (got.cpu().double() - want.double()).abs()
            print(f"MISMATCH rank {self.rank} {name}: max abs diff {diff.max().item():g} "
                  f"at {int(diff.argmax())}", file=sys.stderr, flush=True)
        self.lines.append(f"{name:<44} {digest(got)}")


def reference_reduce(inputs, op):
    stack = torch.stack([x.double() for x in inputs])
    if op == "sum":
        return stack.sum(0)
    if op == "max":
        return stack.max(0).values
    if op == "min":
        return stack.min(0).values
    if op == "avg":
        return stack.mean(0)
    raise ValueError(op)


REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
              "avg": dist.ReduceOp.AVG}


def ops_for(dtype):
    ops = ["sum", "max", "min"]
    if dtype.is_floating_point:
        ops.append("avg")  # NCCL has no integer average
    return ops


def run_cases(rank, dev, check):
    case = 0
    for dtype in DTYPES:
        dname = str(dtype).replace("torch.", "")
        for n in SIZES:
            if dtype == torch.uint8 and n > 65537:
                continue  # uint8 sums of [0,15] x2 stay < 256; large sizes add nothing new
            # all_reduce, one case per op, in place on a copy of the input
            for op in ops_for(dtype):
                case += 1
                mine = make_input(rank, case, n, dtype)
                both = [make_input(r, case, n, dtype) for r in range(WORLD)]
                t = mine.to(dev)
                dist.all_reduce(t, op=REDUCE_OPS[op])
                check.record(f"all_reduce {op} {dname} {n}", t, reference_reduce(both, op))

            # all_gather_into_tensor
            case += 1
            both = [make_input(r, case, n, dtype) for r in range(WORLD)]
            out = torch.full((n * WORLD,), 77, dtype=dtype, device=dev)  # poisoned
            dist.all_gather_into_tensor(out, both[rank].to(dev))
            check.record(f"all_gather {dname} {n}", out, torch.cat(both))

            # reduce_scatter_tensor (sum): each rank contributes n * WORLD elements
            case += 1
            both = [make_input(r, case, n * WORLD, dtype) for r in range(WORLD)]
            out = torch.full((n,), 77, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, both[rank].to(dev), op=dist.ReduceOp.SUM)
            want = reference_reduce(both, "sum")[rank * n:(rank + 1) * n]
            check.record(f"reduce_scatter sum {dname} {n}", out, want)

            # broadcast from each root in turn
            for root in range(WORLD):
                case += 1
                src = make_input(root, case, n, dtype)
                t = src.to(dev) if rank == root else torch.full((n,), 77, dtype=dtype, device=dev)
                dist.broadcast(t, src=root)
                check.record(f"broadcast root{root} {dname} {n}", t, src)

            # send/recv: a ring exchange, grouped (batch_isend_irecv) so neither side blocks
            case += 1
            peer = (rank + 1) % WORLD
            src_rank = (rank - 1) % WORLD
            mine = make_input(rank, case, n, dtype)
            recv = torch.full((n,), 77, dtype=dtype, device=dev)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine.to(dev), peer),
                                           dist.P2POp(dist.irecv, recv, src_rank)])
            for r in reqs:
                r.wait()
            check.record(f"sendrecv {dname} {n}", recv, make_input(src_rank, case, n, dtype))

    # Plain blocking send/recv once as well (rank 0 sends first).
    case += 1
    n = 12345
    payload = make_input(0, case, n, torch.float32)
    if rank == 0:
        dist.send(payload.to(dev), dst=1)
        back = torch.full((n,), 77.0, device=dev)
        dist.recv(back, src=1)
        check.record("send/recv roundtrip float32", back, payload * 2)
    else:
        got = torch.full((n,), 77.0, device=dev)
        dist.recv(got, src=0)
        dist.send(got * 2, dst=0)
        check.record("send/recv roundtrip float32", got, payload)
    torch.cuda.synchronize(dev)


def worker(rank, port, result_path):
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, device_id=dev)
    check = Checker(rank)
    run_cases(rank, dev, check)
    # Rank 0 prints both ranks' lines in a fixed order, so two runs can be diffed.
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, (check.lines, check.mismatches))
    if rank == 0:
        lines = [f"torch {torch.__version__} world {WORLD}"]
        for r, (rank_lines, _) in enumerate(gathered):
            lines += [f"rank{r} {line}" for line in rank_lines]
        total = sum(m for _, m in gathered)
        overall = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:20]
        lines.append(f"checked {sum(len(l) for l, _ in gathered)} results, {total} mismatches, "
                     f"overall {overall}")
        text = "\n".join(lines) + "\n"
        if result_path:
            with open(result_path, "w") as out:
                out.write(text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    if check.mismatches:
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    """Usage: torch_preload_check.py [digest file] (default: stdout)."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD:
        print(f"needs {WORLD} GPUs", file=sys.stderr)
        return 77
    result_path = sys.argv[1] if len(sys.argv) > 1 else None
    mp.spawn(worker, args=(free_port(), result_path), nprocs=WORLD, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
