"""MoE dispatch (+ expert GEMM) and combine on simulated ranks (Triton's interpreter, CPU tensors):
every rank receives exactly the rows, weights and counts the all-to-all-v dispatcher gives it, in
its layout (local expert, then source rank, then pair order), the fused expert GEMM equals the
per-expert matmuls, combine returns each token's weighted sum, and an expert tile waits only for
the sources its rows came from."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from comm_sim import assert_close
from kernels.comm import moe
from kernels.comm.peers import emulated_peers

CONFIG = moe.MoeConfig(comm_programs=3, block_m=16, block_n=16, block_k=16, block_h=16)


def _routing(world, tokens, experts, k, seed=0):
    torch.manual_seed(seed)
    popularity = torch.rand(experts) ** 2 + 0.05  # some experts hot, as the suite routes
    idx = [torch.multinomial(popularity.expand(tokens, experts).contiguous(), k, replacement=False) for _ in range(world)]
    counts_all = torch.stack([torch.bincount(t.reshape(-1), minlength=experts) for t in idx])
    return idx, counts_all


def _dispatcher(xs, ws, idx, experts, world):
    """What the all-to-all-v dispatcher returns on each rank (rows, weights, rows per local expert)."""
    local = experts // world
    out = []
    for d in range(world):
        rows, weights, tpe = [], [], []
        for j in range(local):
            e = d * local + j
            n = 0
            for s in range(world):
                flat = idx[s].reshape(-1)
                pairs = (flat == e).nonzero().reshape(-1)  # in pair order
                rows.append(xs[s][pairs // idx[s].shape[1]])
                weights.append(ws[s].reshape(-1)[pairs])
                n += pairs.numel()
            tpe.append(n)
        out.append((torch.cat(rows), torch.cat(weights), torch.tensor(tpe)))
    return out


def _peers(world, routings, hidden, config):
    numel, flags = max(moe.buffers_needed(r, hidden, config) for r in routings)
    return emulated_peers(world, numel, torch.float32, flags), emulated_peers(world, max(r.capacity for r in routings), torch.float32, 1)


@pytest.mark.parametrize("world, experts, k, push_rows", [(2, 8, 2, 1), (3, 6, 3, 1), (1, 4, 2, 1), (2, 8, 3, 4)])
def test_dispatch_gives_every_rank_the_dispatchers_rows_in_its_layout(world, experts, k, push_rows):
    """Also with several rows pushed at once (30 pairs: the last group is partial)."""
    config = dataclasses.replace(CONFIG, push_rows=push_rows)
    tokens, hidden = 10, 20
    idx, counts_all = _routing(world, tokens, experts, k)
    xs = [torch.randn(tokens, hidden) for _ in range(world)]
    ws = [torch.softmax(torch.randn(tokens, k), -1) for _ in range(world)]
    routings = [moe.route(idx[r], counts_all, r, world, experts) for r in range(world)]
    peers, peers_w = _peers(world, routings, hidden, config)
    for phase in (1, 2):
        outs = [moe.dispatch(xs[r], ws[r], routings[r], peers[r], peers_w[r], config, phase=phase, epoch=1, max_spins=2) for r in range(world)]
    for r, (want_x, want_w, want_tpe) in enumerate(_dispatcher(xs, ws, idx, experts, world)):
        got_x, got_w, got_tpe = outs[r]
        assert torch.equal(got_tpe, want_tpe)
        assert torch.equal(got_x, want_x), f"rank {r}: rows"
        assert torch.equal(got_w, want_w), f"rank {r}: weights"
        assert int(peers[r].status) == 0


def test_the_fused_expert_gemm_is_each_experts_matmul_over_calls():
    world, experts, k, tokens, hidden, ffn = 2, 4, 2, 12, 24, 20
    local = experts // world
    weights = [torch.randn(local, hidden, ffn) / hidden**0.5 for _ in range(world)]
    most = world * tokens * k  # rows a rank could receive: the buffers fit every call's routing
    peers = emulated_peers(world, most * hidden, torch.float32, world * CONFIG.comm_programs)
    peers_w = emulated_peers(world, most, torch.float32, 1)
    for epoch in (1, 2):
        idx, counts_all = _routing(world, tokens, experts, k, seed=epoch)
        xs = [torch.randn(tokens, hidden) for _ in range(world)]
        ws = [torch.ones(tokens, k) for _ in range(world)]
        routings = [moe.route(idx[r], counts_all, r, world, experts) for r in range(world)]
        for phase in (1, 2):
            outs = [moe.dispatch(xs[r], ws[r], routings[r], peers[r], peers_w[r], CONFIG, expert_weight=weights[r], phase=phase, epoch=epoch) for r in range(world)]
        for r, (want_x, _, tpe) in enumerate(_dispatcher(xs, ws, idx, experts, world)):
            want = torch.cat([rows @ weights[r][j] for j, rows in enumerate(want_x.split(tpe.tolist()))])
            assert_close(outs[r][0], want, f"rank {r}, call {epoch}")
            assert torch.equal(outs[r][1], tpe)


def test_an_expert_tile_waits_only_for_the_sources_of_its_rows():
    """Only rank 0 pushes. On rank 1 every tile holding a row from rank 1 itself times out once
    per push program; tiles holding only rank 0's rows are right."""
    world, experts, k, tokens, hidden = 2, 2, 1, 16, 16
    idx = [torch.zeros(tokens, 1, dtype=torch.int64), torch.ones(tokens, 1, dtype=torch.int64)]
    idx[0][8:] = 1  # rank 0 sends 8 rows to each expert; rank 1 sends all 16 to expert 1 (on rank 1)
    counts_all = torch.stack([torch.bincount(t.reshape(-1), minlength=experts) for t in idx])
    xs = [torch.randn(tokens, hidden) for _ in range(world)]
    ws = [torch.ones(tokens, k) for _ in range(world)]
    routings = [moe.route(idx[r], counts_all, r, world, experts) for r in range(world)]
    config = moe.MoeConfig(comm_programs=2, block_m=8, block_n=16, block_k=16, block_h=16)
    peers, peers_w = _peers(world, routings, hidden, config)
    moe.dispatch(xs[0], ws[0], routings[0], peers[0], peers_w[0], config, phase=1, epoch=1)
    got_x, _, tpe = moe.dispatch(xs[1], ws[1], routings[1], peers[1], peers_w[1], config, phase=2, epoch=1, max_spins=1)
    # Expert 1 here: rows 0-7 from rank 0 (one 8-row tile), rows 8-23 from rank 1 (two tiles).
    assert tpe.tolist() == [24]
    assert torch.equal(got_x[:8], xs[0][8:])
    assert int(peers[1].status) == 2 * config.comm_programs


@pytest.mark.parametrize("world, experts, k, reducers, push_rows", [(2, 8, 2, 0, 1), (3, 3, 2, 0, 1), (2, 8, 3, 0, 1), (2, 4, 2, 7, 4)])
def test_combine_returns_each_tokens_weighted_sum(world, experts, k, reducers, push_rows):
    """Also with k not a power of two (the K rows of a token are loaded as one padded block), with
    more summing programs than pushing ones, and with several rows pushed at once."""
    config = dataclasses.replace(CONFIG, reduce_programs=reducers, push_rows=push_rows)
    tokens, hidden = 9, 12
    idx, counts_all = _routing(world, tokens, experts, k, seed=3)
    ws = [torch.softmax(torch.randn(tokens, k), -1) for _ in range(world)]
    routings = [moe.route(idx[r], counts_all, r, world, experts) for r in range(world)]
    expert_out = [torch.randn(routings[r].received, hidden) for r in range(world)]
    maps = [moe.return_map(routings[r], counts_all) for r in range(world)]
    peers = emulated_peers(world, tokens * k * hidden, torch.float32, world * CONFIG.comm_programs)
    for phase in (1, 2):
        outs = [moe.combine(expert_out[r], ws[r], routings[r], maps[r], peers[r], config, phase=phase, epoch=1, max_spins=2) for r in range(world)]
    # The answer of pair (t, j) of rank s: the row its expert's rank holds for it.
    local = experts // world
    for s in range(world):
        want = torch.zeros(tokens, hidden)
        for t in range(tokens):
            for j in range(k):
                e = int(idx[s][t, j])
                d = e // local
                block = [(jj, ss) for jj in range(local) for ss in range(world)]
                offset = 0
                for jj, ss in block:
                    ee = d * local + jj
                    n = int(counts_all[ss, ee])
                    if (jj, ss) == (e % local, s):
                        pairs = (idx[s].reshape(-1) == e).nonzero().reshape(-1).tolist()
                        offset += pairs.index(t * k + j)
                        break
                    offset += n
                want[t] += ws[s][t, j] * expert_out[d][offset]
        assert_close(outs[s], want, f"rank {s}")
        assert int(peers[s].status) == 0


def test_routing_refuses_counts_of_another_shape():
    with pytest.raises(ValueError, match="divisible"):
        moe.route(torch.zeros(4, 2, dtype=torch.int64), torch.zeros(2, 5, dtype=torch.int64), 0, 2, 5)


@pytest.mark.parametrize("world, experts, k, seed", [(2, 8, 2, 0), (3, 6, 3, 1), (4, 16, 4, 2), (2, 32, 1, 3)])
def test_return_map_matches_a_per_segment_walk(world, experts, k, seed):
    """The device-side return map against a plain walk over (local expert, source) segments,
    with experts nobody picked (empty segments) among them."""
    tokens = 5
    idx, counts_all = _routing(world, tokens, experts, k, seed=seed)
    local = experts // world
    for rank in range(world):
        routing = moe.route(idx[rank], counts_all, rank, world, experts)
        want = []
        for j in range(local):
            e = rank * local + j
            for s in range(world):
                first = int(counts_all[s, :e].sum())
                want += [[s, first + i] for i in range(int(counts_all[s, e]))]
        got = moe.return_map(routing, counts_all)
        assert got.dtype == torch.int64 and got.shape == (routing.received, 2)
        assert got.tolist() == want
