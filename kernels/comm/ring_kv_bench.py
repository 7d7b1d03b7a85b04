"""Benchmark of ring attention's KV exchange (run by ``bench.py`` on every rank): the suite's ring
(NCCL send/recv of the next block each step), the same ring with each exchange issued a step
early on a side stream (what the ``prefetch_exchange`` rewrite does), and ``ring_kv`` (every
block pushed by the copy engines at once, each step waiting only for its block), at the suite's
GPU shape (1 x 32 heads x 16384 tokens x 128, bf16), causal and not. Torch has no fused
symmetric-memory ring attention to compare with."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import ring_kv
from .bench_common import Measured, floors, run_impls, time_ms
from .peers import symmetric_peers

B, H, S, D = 1, 32, 16384, 128


def cases(world: int) -> list[dict]:
    return [dict(case="cp_ring_attention", causal=False), dict(case="cp_ring_attention_causal", causal=True)]


def _attend(q, k, v, causal):
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[:2]


def _pass_along(k, v):
    rank, world = dist.get_rank(), dist.get_world_size()
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    ops = [
        dist.P2POp(dist.isend, k, (rank + 1) % world), dist.P2POp(dist.isend, v, (rank + 1) % world),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % world), dist.P2POp(dist.irecv, v_next, (rank - 1) % world),
    ]  # fmt: skip
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_next, v_next


def _merge(out, lse, block_out, block_lse):
    if out is None:
        return block_out.float(), block_lse
    merged = torch.logaddexp(lse, block_lse)
    return out * torch.exp(lse - merged).unsqueeze(-1) + block_out.float() * torch.exp(block_lse - merged).unsqueeze(-1), merged


def _ring(q, k, v, causal, prefetch):
    rank, world = dist.get_rank(), dist.get_world_size()
    out = lse = None
    side = torch.cuda.Stream() if prefetch else None
    pending = None
    for step in range(world):
        if step:
            if prefetch:
                torch.cuda.current_stream().wait_stream(side)
                k, v = pending
                k.record_stream(torch.cuda.current_stream())
                v.record_stream(torch.cuda.current_stream())
            else:
                k, v = _pass_along(k, v)
        if prefetch and step + 1 < world:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                pending = _pass_along(k, v)
        source = (rank - step) % world
        if causal and source > rank:
            continue
        out, lse = _merge(out, lse, *_attend(q, k, v, causal and source == rank))
    return out.to(q.dtype)


def measure(spec: dict, world: int, rank: int) -> Measured:
    causal = spec["causal"]
    gen = torch.Generator(device="cuda").manual_seed(5000 + rank)
    q, k, v = (torch.randn(B, H, S // world, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    peers = symmetric_peers(ring_kv.buffer_numel(world, k, v), torch.bfloat16, world)
    dests, sources = ring_kv.ring_order(rank, world, causal)

    def ours():
        return ring_kv.ring_attention(q, ring_kv.exchange((k, v), peers, dests), sources, _attend, causal)

    impls = {"torch+nccl": lambda: _ring(q, k, v, causal, False), "torch+nccl prefetched": lambda: _ring(q, k, v, causal, True), "kloom:ring_kv": ours}
    m = Measured("ring_kv", spec["case"], world, dict(batch=B, heads=H, seq=S, head_dim=D, dtype="bf16", causal=causal))
    run_impls(m, impls, impls["torch+nccl"]().clone())
    compute = time_ms(lambda: [_attend(q, k, v, causal and s == rank) for s in sources])
    comm = time_ms(lambda: [_pass_along(k, v) for _ in range(world - 1)])
    pairs = (S // world) ** 2 * (len(sources) - (0.5 if causal else 0))
    m.floor_ms = floors(compute, comm, 4.0 * B * H * D * pairs, 2 * q.numel() * 2 + 2 * k.numel() * 2 * len(sources), 2 * k.numel() * 2 * len(dests))
    return m
