"""Where the time of the slowest suite steps goes, measured side by side on one GPU machine, to
decide which strategies are worth writing (not part of the service).

1. Large all-gather / all-to-all: NCCL against copy-engine transfers through torch symmetric
   memory (each rank stages its block in a symmetric buffer, then pulls its peers' blocks with
   device-to-device copies, one stream per peer, between two barriers).
2. Per-rank kernel time of suite references (torch profiler): how unequal the ranks' work is and
   which kernels dominate.

    torchrun-free: python3 benchmarks/gpu/collective_paths.py --world-size 4 --out DIR
Results: DIR/collective_paths.json and the same as text on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]


def _time(fn, iters: int = 20, warmup: int = 5) -> float:
    """Median milliseconds of fn, every rank starting together; the slowest rank's median."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    med = torch.tensor([statistics.median(samples)], device="cuda")
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med)


class PullExchange:
    """Every rank's block staged in a symmetric buffer; each rank copies what it needs from each
    peer with the copy engines (one stream per peer)."""

    def __init__(self, numel: int, dtype: torch.dtype):
        import torch.distributed._symmetric_memory as symm_mem

        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.buf = symm_mem.empty(numel, dtype=dtype, device="cuda")
        self.handle = symm_mem.rendezvous(self.buf, dist.group.WORLD.group_name)
        self.peers = [self.handle.get_buffer(p, (numel,), dtype) for p in range(self.world)]
        self.streams = [torch.cuda.Stream() for _ in range(self.world)]

    def run(self, src: torch.Tensor, dst_blocks, src_block) -> None:
        """``dst_blocks[p]`` receives ``src_block(p, peer_buffer)`` from rank p."""
        self.buf.copy_(src.reshape(-1))
        self.handle.barrier(channel=0)
        main = torch.cuda.current_stream()
        for p in range(self.world):
            s = self.streams[p]
            s.wait_stream(main)
            with torch.cuda.stream(s):
                dst_blocks[p].copy_(src_block(p, self.peers[p]))
        for s in self.streams:
            main.wait_stream(s)
        self.handle.barrier(channel=1)  # nobody overwrites its buffer while a peer still reads it


def collectives(results: dict) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, hidden = 16384 // world, 8192  # the suite's gpu shapes: 256 MiB gathered
    shard = torch.randn(rows, hidden, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(world * rows, hidden, dtype=shard.dtype, device="cuda")
    ex = PullExchange(shard.numel(), shard.dtype)
    blocks = out.view(world, -1)

    def ag_nccl():
        dist.all_gather_into_tensor(out, shard)

    def ag_pull():
        ex.run(shard, blocks, lambda p, peer: peer)

    ag_nccl()
    want = out.clone()
    ag_pull()
    ok_ag = torch.equal(out, want)
    results["all_gather"] = {"bytes_out": 2 * shard.numel() * (world - 1), "nccl_ms": _time(ag_nccl), "ce_pull_ms": _time(ag_pull), "equal": ok_ag}

    x = torch.randn(16384, hidden, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    ex2 = PullExchange(x.numel(), x.dtype)
    per = x.numel() // world
    yb = y.view(world, -1)

    def a2a_nccl():
        dist.all_to_all_single(y, x)

    def a2a_pull():
        ex2.run(x, yb, lambda p, peer: peer[rank * per:(rank + 1) * per])

    a2a_nccl()
    want = y.clone()
    a2a_pull()
    results["all_to_all"] = {"nccl_ms": _time(a2a_nccl), "ce_pull_ms": _time(a2a_pull), "equal": torch.equal(y, want)}
    names = sorted(n for n in dir(torch.ops.symm_mem) if not n.startswith("_") or "all_gather" in n or "scatter" in n)
    results["symm_mem_ops"] = names


def profile_references(results: dict, names: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    from kloom.workload import import_file

    rank = dist.get_rank()
    os.environ["KLOOM_SHAPES"] = "gpu"
    for name in names:
        path = next(ROOT.glob(f"suite/*/{name}.py"))
        torch.manual_seed(1 + rank)
        with torch.device("cuda"):
            wl = import_file(str(path), f"paths_{name}")
            model = wl.Model(*wl.get_init_inputs())
            inputs = wl.get_inputs()
        with torch.no_grad():
            step_ms = _time(lambda: model(*inputs), iters=10, warmup=3)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as prof:
                model(*inputs)
                torch.cuda.synchronize()
        kernels: dict[str, float] = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                kernels[ev.name[:90]] = kernels.get(ev.name[:90], 0.0) + ev.device_time / 1000
        top = sorted(kernels.items(), key=lambda kv: -kv[1])[:8]
        mine = {"kernel_ms": round(sum(kernels.values()), 4), "top": [(k, round(v, 4)) for k, v in top]}
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        results.setdefault("references", {})[name] = {"step_ms": step_ms, "per_rank": gathered}


def worker(rank: int, world: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    results: dict = {"world_size": world, "gpu": torch.cuda.get_device_name()}
    for part in (lambda: collectives(results), lambda: profile_references(results, args.workloads)):
        try:
            part()
        except Exception as exc:  # keep what the other part measured
            results.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}"[:400])
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "collective_paths.json").write_text(json.dumps(results, indent=1, default=str))
        print(json.dumps(results, indent=1, default=str))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=torch.cuda.device_count())
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workloads", nargs="*", default=["moe_dispatch", "moe_combine", "moe_dispatch_grouped_gemm", "cp_allgather_kv_attention", "distributed_sort", "tp_gemm_allreduce"])
    args = ap.parse_args()
    mp.spawn(worker, args=(args.world_size, args), nprocs=args.world_size)


if __name__ == "__main__":
    main()
