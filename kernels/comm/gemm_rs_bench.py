"""Benchmark of GEMM + reduce-scatter and GEMM + all-reduce (run by ``bench.py`` on every rank):
cuBLAS then NCCL, torch's ``fused_matmul_reduce_scatter`` (reduce-scatter only: torch has no fused
matmul + all-reduce), and each of ``gemm_rs.TUNING``, side by side on the same fresh random
inputs, at the suite's GPU shapes."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import gemm_ar, gemm_rs
from .bench_common import Measured, floors, run_impls, time_ms
from .peers import symmetric_peers


def cases(world: int) -> list[dict]:
    return [
        # tp_gemm_reducescatter: 8192 tokens, ffn 28672 split over ranks, hidden 8192.
        dict(case="tp_gemm_reducescatter", collective="reduce_scatter", m=8192, k=28672 // world, n=8192),
        # tp_gemm_allreduce: a 4096-token prefill chunk, the same weights.
        dict(case="tp_gemm_allreduce", collective="all_reduce", m=4096, k=28672 // world, n=8192),
    ]


def measure(spec: dict, world: int, rank: int) -> Measured:
    m_rows, k, n = spec["m"], spec["k"], spec["n"]
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(2000 + rank)
    a = torch.randn(m_rows, k, device="cuda", dtype=dtype, generator=gen)
    b = (torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / (k * world) ** 0.5).t()  # a row-parallel weight, transposed
    group = dist.group.WORLD.group_name
    scatter = spec["collective"] == "reduce_scatter"
    module = gemm_rs if scatter else gemm_ar
    flags = max(module.flags_needed(world, m_rows // world, n, c) for c in gemm_rs.TUNING.values())
    peers = symmetric_peers(module.buffer_numel(world, m_rows // world, n), dtype, flags)
    out = torch.empty(m_rows // world, n, device="cuda", dtype=dtype)

    def nccl():
        y = a @ b
        if scatter:
            dist.reduce_scatter_tensor(out, y)
            return out
        dist.all_reduce(y)
        return y

    impls = {"torch+nccl": nccl}
    if scatter and hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, "fused_matmul_reduce_scatter"):
        impls["torch_fused_symm"] = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group)
    for name, config in gemm_rs.TUNING.items():
        if scatter:
            impls[f"kloom:{name}"] = lambda config=config: gemm_rs.matmul_reduce_scatter(a, b, peers, config)
        else:
            impls[f"kloom:{name}"] = lambda config=config: gemm_ar.matmul_all_reduce(a, b, peers, config)
    m = Measured("gemm_rs" if scatter else "gemm_ar", spec["case"], world, dict(m=m_rows, k=k, n=n, dtype="bf16"))
    run_impls(m, impls, nccl().clone())
    y = a @ b
    compute = time_ms(lambda: a @ b)
    comm = time_ms(lambda: dist.reduce_scatter_tensor(out, y) if scatter else dist.all_reduce(y))
    e = a.element_size()
    share = (world - 1) / world
    link = e * m_rows * n * share * (1 if scatter else 2)
    m.floor_ms = floors(compute, comm, 2.0 * m_rows * k * n, e * (m_rows * k + k * n + m_rows * n), link)
    return m
