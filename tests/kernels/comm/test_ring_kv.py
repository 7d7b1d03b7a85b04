"""The ring-attention KV exchange on simulated ranks (CPU; flags through Triton's interpreter):
every rank's ring attention over the pushed blocks equals attention over the whole sequence
(causal and not) over consecutive calls; a block is waited for only when it is attended to, and
one that never arrives is reported, not read."""

from __future__ import annotations

import pytest
import torch

from comm_sim import assert_close
from kernels.comm import ring_kv
from kernels.comm.peers import emulated_peers


def _attend(q, k, v, causal):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)


def _full(q, k_all, v_all, rank, s_local, causal):
    """This rank's rows of attention over the whole sequence (contiguous shards)."""
    scores = (q @ k_all.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        rows = rank * s_local + torch.arange(s_local)[:, None]
        scores = scores.masked_fill(torch.arange(k_all.shape[-2])[None, :] > rows, float("-inf"))
    return torch.softmax(scores, -1) @ v_all


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world", [2, 3])
def test_ring_attention_over_pushed_blocks_is_attention_over_the_sequence(world, causal):
    b, h, s_local, d = 1, 2, 8, 16
    k0 = torch.randn(b, h, s_local, d)
    peers = emulated_peers(world, ring_kv.buffer_numel(world, k0, k0), torch.float32, world)
    for epoch in (1, 2, 3):
        qs, ks, vs = ([torch.randn(b, h, s_local, d) for _ in range(world)] for _ in range(3))
        handles, sources = [], []
        for r in range(world):
            dests, src = ring_kv.ring_order(r, world, causal)
            handles.append(ring_kv.exchange((ks[r], vs[r]), peers[r], dests, epoch=epoch, max_spins=2))
            sources.append(src)
        k_all, v_all = torch.cat(ks, 2), torch.cat(vs, 2)
        for r in range(world):
            got = ring_kv.ring_attention(qs[r], handles[r], sources[r], _attend, causal)
            assert_close(got, _full(qs[r], k_all, v_all, r, s_local, causal), f"rank {r}, call {epoch}")
            assert int(peers[r].status) == 0


def test_a_block_is_waited_for_only_when_attended_to_and_a_missing_one_is_reported():
    world, shape = 3, (1, 1, 4, 8)
    k, v = torch.randn(shape), torch.randn(shape)
    peers = emulated_peers(world, ring_kv.buffer_numel(world, k, v), torch.float32, world)
    ring_kv.exchange((torch.randn(shape), torch.randn(shape)), peers[1], [0], epoch=1)  # only rank 1 pushes, to rank 0
    handle = ring_kv.exchange((k, v), peers[0], [], epoch=1, max_spins=1)
    handle.block(0)
    handle.block(1)
    assert int(peers[0].status) == 0
    handle.block(2)
    assert int(peers[0].status) == 1


def test_causal_ring_order_pushes_only_to_later_ranks():
    assert ring_kv.ring_order(1, 4, causal=True) == ([2, 3], [1, 0])
    assert ring_kv.ring_order(1, 4, causal=False) == ([2, 3, 0], [1, 0, 3, 2])
