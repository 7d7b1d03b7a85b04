"""Benchmark of the all-reduce kernels (run by ``bench.py`` on every rank): the fused all-reduce
+ residual add + RMSNorm at the suite's GPU shape and at decode sizes, and the flat all-reduce
over the latency-bound sizes; against NCCL (then the eager ops) and torch's symmetric-memory
one-shot and two-shot all-reduce (copy into a symmetric buffer, then the op, then the eager ops)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import allreduce_norm as arn
from .bench_common import Measured, floors, run_impls, time_ms
from .peers import symmetric_peers

EPS = 1e-6


def cases(world: int) -> list[dict]:
    norm = [dict(case=f"ar+residual+rmsnorm {t}x8192", norm=True, rows=t, hidden=8192) for t in (1, 4, 16, 64, 256)]
    # tp_allreduce_residual_rmsnorm at the suite's GPU shape (64 MiB: bandwidth-bound).
    norm.append(dict(case="tp_allreduce_residual_rmsnorm 4096x8192", norm=True, rows=4096, hidden=8192))
    flat = [dict(case=f"all_reduce {kib} KiB", norm=False, rows=1, hidden=kib * 512) for kib in (8, 32, 64, 256, 1024, 4096)]
    return norm + flat


def _eager_norm(h, residual, weight):
    h += residual
    hf = h.float()
    return weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype), h


def measure(spec: dict, world: int, rank: int) -> Measured:
    rows, hidden = spec["rows"], spec["hidden"]
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(3000 + rank)
    x = torch.randn(rows, hidden, device="cuda", dtype=dtype, generator=gen) / world**0.5
    same = torch.Generator(device="cuda").manual_seed(3999)  # the residual stream and weight are replicated
    residual = torch.randn(rows, hidden, device="cuda", dtype=dtype, generator=same)
    weight = 1 + 0.1 * torch.randn(hidden, device="cuda", dtype=dtype, generator=same)
    group = dist.group.WORLD.group_name
    flags = max(arn.flags_needed(world, c) for c in arn.TUNING.values())
    peers = symmetric_peers(arn.buffer_numel(world, x.numel()), dtype, flags)
    symm = symmetric_peers(x.numel(), dtype, 1)  # torch's ops work on a symmetric buffer of their own
    staged = symm.data[0][: x.numel()].view_as(x)
    norm = spec["norm"]

    def finish(h):
        return _eager_norm(h, residual, weight)[0] if norm else h

    def nccl():
        h = x.clone()
        dist.all_reduce(h)
        return finish(h)

    def torch_one_shot():
        staged.copy_(x)
        return finish(torch.ops.symm_mem.one_shot_all_reduce(staged, "sum", group))

    def torch_two_shot():
        staged.copy_(x)
        torch.ops.symm_mem.two_shot_all_reduce_(staged, "sum", group)
        return finish(staged.clone())

    def ours(config):
        if norm:
            return arn.all_reduce_add_rmsnorm(x, residual, weight, EPS, peers, config)[0]
        return arn.all_reduce(x, peers, config)

    impls = {"torch+nccl": nccl}
    if hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, "one_shot_all_reduce"):
        impls["torch_symm_one_shot"] = torch_one_shot
    if hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, "two_shot_all_reduce_"):
        impls["torch_symm_two_shot"] = torch_two_shot
    for name, config in arn.TUNING.items():
        impls[f"kloom:{name}"] = lambda config=config: ours(config)
    m = Measured("allreduce_norm" if norm else "all_reduce", spec["case"], world, dict(rows=rows, hidden=hidden, dtype="bf16", bytes=x.numel() * 2))
    run_impls(m, impls, nccl().clone(), iters=50, warmup=10)
    h = x.clone()
    comm = time_ms(lambda: dist.all_reduce(h), iters=50, warmup=10)
    compute = time_ms(lambda: _eager_norm(x.clone(), residual, weight), iters=50, warmup=10) if norm else 0.0
    e = x.element_size()
    n = x.numel()
    m.floor_ms = floors(compute, comm, (5.0 if norm else 1.0) * n, e * n * (4 if norm else 2), 2 * (world - 1) / world * n * e)
    m.notes = "; ".join(filter(None, ["latency-bound" if n * e <= (1 << 20) else "bandwidth-bound", m.notes]))
    return m
