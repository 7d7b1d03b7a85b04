"""All-gather + GEMM on simulated ranks (Triton's interpreter, CPU tensors): the product equals
torch's all-gather-then-matmul for every way of pushing and consuming, over consecutive calls
(both buffer parities); each tile waits on exactly the chunks its rows come from, a flag left by
an earlier call satisfies nothing, and what the kernel does not take is refused with a reason."""

from __future__ import annotations

import pytest
import torch

from comm_sim import assert_close, run_ranks
from kernels.comm import ag_gemm as ag
from kernels.comm.peers import emulated_peers

SMALL = dict(block_m=16, block_n=16, block_k=16, group_m=2)
CONFIGS = {
    "copy engine, one chunk": ag.AgGemmConfig(**SMALL),
    "copy engine, 3 chunks": ag.AgGemmConfig(**SMALL, chunks=3),
    "SM pushes": ag.AgGemmConfig(**SMALL, chunks=2, comm="sm", comm_programs=2),
    "cuBLAS consumer": ag.AgGemmConfig(chunks=2, consumer="cublas"),
}


def _setup(world, ms, k, config, dtype=torch.float32):
    peers = emulated_peers(world, ag.buffer_numel(world, ms, k), dtype, ag.flags_needed(world, config))
    return peers


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_product_is_the_gathered_matmul_on_every_rank_over_calls(name):
    config = CONFIGS[name]
    world, ms, k, n = 3, 5, 24, 20  # tiles straddle shards and chunks; K is not a multiple of BLOCK_K
    peers = _setup(world, ms, k, config)
    b = torch.randn(n, k).t()  # a transposed weight, as F.linear's
    for epoch in (1, 2, 3):
        shards = [torch.randn(ms, k) for _ in range(world)]
        gathered = [torch.empty(world * ms, k) for _ in range(world)]
        outs = run_ranks(
            lambda r, phase, epoch: ag.all_gather_matmul(shards[r], b, peers[r], config, gathered_out=gathered[r], phase=phase, epoch=epoch, max_spins=2),
            world,
            epoch,
        )
        want = torch.cat(shards)
        for r in range(world):
            assert_close(outs[r], want @ b, f"rank {r}, call {epoch}")
            assert torch.equal(gathered[r], want)
            assert int(peers[r].status) == 0


@pytest.mark.parametrize("world", [1, 2, 4])
def test_world_sizes_and_half_precision(world):
    config = ag.AgGemmConfig(**SMALL, chunks=2)
    ms, k, n = 16, 32, 16
    peers = _setup(world, ms, k, config, torch.float16)
    shards = [torch.randn(ms, k).half() for _ in range(world)]
    b = torch.randn(k, n).half()
    outs = run_ranks(lambda r, phase, epoch: ag.all_gather_matmul(shards[r], b, peers[r], config, phase=phase, epoch=epoch, max_spins=2), world, 1)
    want = (torch.cat(shards).float() @ b.float()).half()
    for r in range(world):
        assert_close(outs[r], want, f"rank {r}", atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("comm", ["ce", "sm"])
def test_a_tile_waits_only_for_the_chunks_its_rows_come_from(comm):
    """Only rank 1 pushes; rank 0 then computes with waits that give up at once. Its own rows
    and rank 1's are right and waited on nothing that failed; every tile holding rows of rank 2
    timed out once per chunk of rank 2 it touches."""
    world, ms, k, n = 3, 32, 16, 16
    config = ag.AgGemmConfig(**SMALL, chunks=2, comm=comm, comm_programs=1 if comm == "sm" else 0)
    peers = _setup(world, ms, k, config)
    shards = [torch.randn(ms, k) for _ in range(world)]
    b = torch.randn(k, n)
    ag.all_gather_matmul(shards[1], b, peers[1], config, phase=1, epoch=1)
    out = ag.all_gather_matmul(shards[0], b, peers[0], config, phase=2, epoch=1, max_spins=1)
    want = torch.cat(shards) @ b
    assert_close(out[: 2 * ms], want[: 2 * ms], "rows of rank 0 and rank 1")
    # Rank 2's 32 rows are two 16-row chunks, each covered by one 16-row tile; one column tile.
    assert int(peers[0].status) == 2
    assert not torch.allclose(out[2 * ms :], want[2 * ms :])


def test_a_flag_from_an_earlier_call_satisfies_nothing():
    world, ms, k, n = 2, 16, 16, 16
    config = ag.AgGemmConfig(**SMALL)
    peers = _setup(world, ms, k, config)
    shards = [torch.randn(ms, k) for _ in range(world)]
    b = torch.randn(k, n)
    run_ranks(lambda r, phase, epoch: ag.all_gather_matmul(shards[r], b, peers[r], config, phase=phase, epoch=epoch), world, 1)
    # Call 2 on rank 0 before rank 1 pushed: the flag still holds epoch 1.
    ag.all_gather_matmul(shards[0], b, peers[0], config, phase=2, epoch=2, max_spins=3)
    assert int(peers[0].status) == 1
    with pytest.raises(RuntimeError, match="timed out"):
        peers[0].check()


def test_consuming_before_anyone_pushed_is_caught():
    """Control: without its waits the kernel would read rows that were never written."""
    world, ms, k, n = 2, 16, 16, 16
    config = ag.AgGemmConfig(**SMALL)
    peers = _setup(world, ms, k, config)
    shards = [torch.randn(ms, k) for _ in range(world)]
    out = run_ranks(lambda r, phase, epoch: ag.all_gather_matmul(shards[r], torch.eye(k), peers[r], config, phase=phase, epoch=epoch, max_spins=1), world, 1, phases=(2,))
    assert int(peers[0].status) == 1 and int(peers[1].status) == 1
    assert not torch.equal(out[0][ms:], shards[1])


@pytest.mark.parametrize(
    "shard, b, why",
    [
        (torch.randn(4, 8).t(), torch.randn(4, 3), "a non-contiguous shard"),
        (torch.randn(4, 8), torch.randn(7, 3), "mismatched inner dimensions"),
        (torch.randn(4, 8), torch.randn(8, 3).double(), "mixed dtypes"),
        (torch.randn(2, 4, 8), torch.randn(8, 3), "a 3-d shard"),
        (torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64), "float64"),
    ],
)
def test_operands_outside_the_envelope_are_refused(shard, b, why):
    assert not ag.supported(shard, b), why
    peers = emulated_peers(1, 64, shard.dtype, 4)[0]
    with pytest.raises(ValueError, match="does not take"):
        ag.all_gather_matmul(shard, b, peers)


def test_buffers_too_small_are_refused():
    peers = emulated_peers(2, 8, torch.float32, 2)[0]
    with pytest.raises(ValueError, match="too small"):
        ag.all_gather_matmul(torch.randn(4, 8), torch.randn(8, 3), peers)


@pytest.mark.parametrize(
    "kwargs",
    [dict(comm="nvlink"), dict(comm="sm"), dict(comm_programs=2), dict(comm="sm", comm_programs=2, consumer="cublas"), dict(chunks=0)],
)
def test_inconsistent_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        ag.AgGemmConfig(**kwargs)
