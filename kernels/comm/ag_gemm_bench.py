"""Benchmark of all-gather + GEMM (run by ``bench.py`` on every rank): NCCL's all-gather then
cuBLAS, torch's ``fused_all_gather_matmul``, and each of ``ag_gemm.TUNING``, side by side on the
same fresh random inputs, at the suite's GPU shapes and 8192^3."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import ag_gemm
from .bench_common import Measured, floors, run_impls, time_ms
from .peers import symmetric_peers


def cases(world: int) -> list[dict]:
    return [
        # tp_allgather_gemm: tokens 8192 gathered, hidden 8192, ffn 28672 split over ranks.
        dict(case="tp_allgather_gemm", ms=8192 // world, k=8192, n=28672 // world, weight=False),
        # The 8192^3: the gathered 8192 x 8192 times an 8192 x 8192 weight on every rank.
        dict(case="8192^3", ms=8192 // world, k=8192, n=8192, weight=False),
        # fsdp_allgather_gemm: the 28672 x 8192 weight gathered by rows, 4096 tokens.
        dict(case="fsdp_allgather_gemm", ms=28672 // world, k=8192, n=4096, weight=True),
    ]


def measure(spec: dict, world: int, rank: int) -> Measured:
    ms, k, n = spec["ms"], spec["k"], spec["n"]
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
    shard = torch.randn(ms, k, device="cuda", dtype=dtype, generator=gen)
    other = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / k**0.5  # a weight (N, K), or tokens (N, K)
    b = other.t()  # the right operand of gathered @ b
    group = dist.group.WORLD.group_name
    flags = max(ag_gemm.flags_needed(world, c) for c in ag_gemm.TUNING.values())
    peers = symmetric_peers(ag_gemm.buffer_numel(world, ms, k), dtype, flags)
    gathered = torch.empty(world * ms, k, device="cuda", dtype=dtype)

    def nccl():
        dist.all_gather_into_tensor(gathered, shard)
        # A gathered weight is F.linear's: tokens @ W.T, (tokens, out features).
        return other @ gathered.t() if spec["weight"] else gathered @ b

    def fused():
        y = torch.ops.symm_mem.fused_all_gather_matmul(shard, [b], 0, group)[1][0]
        return y.t().contiguous() if spec["weight"] else y

    def ours(config):
        if not spec["weight"]:
            return ag_gemm.all_gather_matmul(shard, b, peers, config)
        y = torch.empty(n, world * ms, device="cuda", dtype=dtype)  # written through its transpose, as the runtime does
        ag_gemm.all_gather_matmul(shard, b, peers, config, out=y.t())
        return y

    impls = {"torch+nccl": nccl}
    if hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, "fused_all_gather_matmul"):
        impls["torch_fused_symm"] = fused
    for name, config in ag_gemm.TUNING.items():
        impls[f"kloom:{name}"] = lambda config=config: ours(config)
    m = Measured("ag_gemm", spec["case"], world, dict(gathered_m=world * ms, k=k, n=n, dtype="bf16", weight_gathered=spec["weight"]))
    run_impls(m, impls, nccl().clone())
    full = torch.randn(world * ms, k, device="cuda", dtype=dtype, generator=gen)
    compute = time_ms(lambda: full @ b)
    comm = time_ms(lambda: dist.all_gather_into_tensor(gathered, shard))
    e = shard.element_size()
    m.floor_ms = floors(compute, comm, 2.0 * world * ms * k * n, e * (world * ms * k + k * n + world * ms * n), e * ms * k * (world - 1))
    return m
