"""Benchmark of MoE dispatch (+ the expert GEMM) and combine (run by ``bench.py`` on every rank):
the all-to-all-v dispatcher over NCCL as the suite's references write it (counts exchanged, split
sizes read on the host, per-expert matmuls), against ``moe.dispatch`` / ``moe.combine`` (counts
exchanged with one NCCL all-gather, rows stored straight into their destinations), on the same
routing, at the suite's GPU shapes (DeepSeek-V3 routing: 4096 tokens, hidden 7168, 256 experts,
top-8; expert ffn 2048). Torch has no fused symmetric-memory MoE op to compare with."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import moe
from .bench_common import Measured, floors, run_impls, time_ms
from .peers import symmetric_peers

TOKENS, HIDDEN, FFN, EXPERTS, TOPK = 4096, 7168, 2048, 256, 8


def cases(world: int) -> list[dict]:
    return [dict(case="moe_dispatch_grouped_gemm", gemm=True), dict(case="moe_dispatch", gemm=False), dict(case="moe_combine", combine=True)]


def _reference_dispatch(x, topk_idx, topk_w, weight, world, local):
    k = topk_idx.shape[1]
    flat = topk_idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=world * local)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    send_splits = counts.view(world, local).sum(1).tolist()
    recv_splits = recv_counts.view(world, local).sum(1).tolist()
    recv_x = x.new_empty(sum(recv_splits), x.shape[1])
    dist.all_to_all_single(recv_x, x.index_select(0, order // k), recv_splits, send_splits)
    chunks = recv_x.split(recv_counts.tolist())
    expert_x = torch.cat([chunks[s * local + j] for j in range(local) for s in range(world)])
    tpe = recv_counts.view(world, local).sum(0)
    if weight is None:
        send_w = topk_w.reshape(-1).index_select(0, order)
        recv_w = send_w.new_empty(sum(recv_splits))
        dist.all_to_all_single(recv_w, send_w, recv_splits, send_splits)
        w_chunks = recv_w.split(recv_counts.tolist())
        return expert_x, torch.cat([w_chunks[s * local + j] for j in range(local) for s in range(world)]), tpe
    rows = expert_x.split(tpe.tolist())
    return torch.cat([rows[j] @ weight[j] for j in range(local)]), tpe


def _reference_combine(expert_out, topk_idx, topk_w, world, local):
    tokens, k = topk_idx.shape
    flat = topk_idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=world * local)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    per_source = recv_counts.view(world, local)
    pieces = expert_out.split(per_source.t().reshape(-1).tolist())
    by_source = torch.cat([pieces[j * world + s] for s in range(world) for j in range(local)])
    returned = expert_out.new_empty(flat.numel(), expert_out.shape[1])
    dist.all_to_all_single(returned, by_source, counts.view(world, local).sum(1).tolist(), per_source.sum(1).tolist())
    per_slot = torch.empty_like(returned).index_copy_(0, order, returned)
    return (per_slot.view(tokens, k, -1).float() * topk_w.unsqueeze(-1)).sum(1).to(expert_out.dtype)


def measure(spec: dict, world: int, rank: int) -> Measured:
    local = EXPERTS // world
    gen = torch.Generator(device="cuda").manual_seed(4000 + rank)
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    popularity = torch.rand(EXPERTS, device="cuda", generator=gen) ** 2 + 0.05
    topk_idx = torch.multinomial(popularity.expand(TOKENS, EXPERTS).contiguous(), TOPK, replacement=False, generator=gen)
    topk_w = torch.softmax(torch.randn(TOKENS, TOPK, device="cuda", generator=gen), -1)
    weight = torch.randn(local, HIDDEN, FFN, device="cuda", dtype=torch.bfloat16, generator=gen) / HIDDEN**0.5 if spec.get("gemm") else None
    counts = torch.bincount(topk_idx.reshape(-1), minlength=EXPERTS)
    counts_all = torch.empty(world, EXPERTS, dtype=counts.dtype, device="cuda")
    dist.all_gather_into_tensor(counts_all, counts)
    routing = moe.route(topk_idx, counts_all, rank, world, EXPERTS)
    most = world * TOKENS * TOPK  # rows any rank could receive: one allocation fits every routing
    flags = world * max(c.comm_programs for c in moe.TUNING.values())
    peers = symmetric_peers(most * HIDDEN, torch.bfloat16, flags)
    peers_w = symmetric_peers(most, torch.float32, 1)

    def routed():
        c = torch.bincount(topk_idx.reshape(-1), minlength=EXPERTS)
        everyone = torch.empty(world, EXPERTS, dtype=c.dtype, device="cuda")
        dist.all_gather_into_tensor(everyone, c)
        return moe.route(topk_idx, everyone, rank, world, EXPERTS), everyone

    m = Measured("moe", spec["case"], world, dict(tokens=TOKENS, hidden=HIDDEN, ffn=FFN if weight is not None else None, experts=EXPERTS, topk=TOPK, dtype="bf16"))
    if spec.get("combine"):
        expert_out = torch.randn(routing.received, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)

        def ours(config):
            r, everyone = routed()
            return moe.combine(expert_out, topk_w, r, moe.return_map(r, everyone), peers, config)

        impls = {"torch+nccl": lambda: _reference_combine(expert_out, topk_idx, topk_w, world, local)}
        impls.update({f"kloom:{n}": (lambda c=c: ours(c)) for n, c in moe.TUNING.items()})
        run_impls(m, impls, impls["torch+nccl"]().clone())
        link = 2 * HIDDEN * TOKENS * TOPK * (world - 1) / world
        compute = 0.0
    else:

        def ours(config):
            out = moe.dispatch(x, topk_w, routed()[0], peers, peers_w, config, expert_weight=weight)
            return out[0]

        impls = {"torch+nccl": lambda: _reference_dispatch(x, topk_idx, topk_w, weight, world, local)[0]}
        impls.update({f"kloom:{n}": (lambda c=c: ours(c)) for n, c in moe.TUNING.items()})
        run_impls(m, impls, impls["torch+nccl"]().clone())
        link = 2 * HIDDEN * TOKENS * TOPK * (world - 1) / world
        rows = torch.randn(routing.received, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
        compute = time_ms(lambda: [r @ weight[j] for j, r in enumerate(rows.split(routing.tokens_per_expert.tolist()))]) if weight is not None else 0.0
    comm = time_ms(lambda: _reference_dispatch(x, topk_idx, topk_w, None, world, local))
    flops = 2.0 * TOKENS * TOPK * HIDDEN * FFN if weight is not None else 0.0
    m.floor_ms = floors(compute, comm, flops, 2 * TOKENS * TOPK * HIDDEN * 2, link)
    m.notes = "; ".join(filter(None, ["communication alone = the reference's dispatch (counts, split sizes on the host, all-to-all-v)", m.notes]))
    return m
