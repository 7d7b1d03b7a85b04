"""GEMM + reduce-scatter on simulated ranks (Triton's interpreter, CPU tensors): each rank's rows
of the summed product equal torch's matmul-then-reduce-scatter for both consumers, over
consecutive calls; an owner waits for every peer's tile before it writes, a stale flag satisfies
nothing, and operands outside the envelope are refused."""

from __future__ import annotations

import pytest
import torch

from comm_sim import assert_close, run_ranks
from kernels.comm import gemm_rs as rs
from kernels.comm.peers import emulated_peers

SMALL = dict(block_m=16, block_n=16, block_k=16, group_m=2)
CONFIGS = {"triton": rs.GemmRsConfig(**SMALL), "cublas": rs.GemmRsConfig(consumer="cublas")}


def _peers(world, ms, n, config, dtype=torch.float32):
    return emulated_peers(world, rs.buffer_numel(world, ms, n), dtype, rs.flags_needed(world, ms, n, config))


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("world", [1, 3])
def test_each_rank_gets_its_rows_of_the_sum_over_calls(name, world):
    config = CONFIGS[name]
    ms, k, n = 18, 20, 24  # tiles are ragged at every edge
    peers = _peers(world, ms, n, config)
    for epoch in (1, 2, 3):
        a = [torch.randn(world * ms, k) for _ in range(world)]
        b = [torch.randn(n, k).t() for _ in range(world)]  # a transposed weight
        outs = run_ranks(lambda r, phase, epoch: rs.matmul_reduce_scatter(a[r], b[r], peers[r], config, phase=phase, epoch=epoch, max_spins=2), world, epoch)
        total = sum(a[r] @ b[r] for r in range(world))
        for r in range(world):
            assert_close(outs[r], total[r * ms : (r + 1) * ms], f"rank {r}, call {epoch}")
            assert int(peers[r].status) == 0


def test_half_precision_sums_in_float32_and_rounds_once():
    world, ms, k, n = 2, 16, 32, 16
    config = CONFIGS["triton"]
    peers = _peers(world, ms, n, config, torch.float16)
    a = [torch.randn(world * ms, k).half() for _ in range(world)]
    b = [torch.randn(k, n).half() for _ in range(world)]
    outs = run_ranks(lambda r, phase, epoch: rs.matmul_reduce_scatter(a[r], b[r], peers[r], config, phase=phase, epoch=epoch), world, 1)
    total = sum(a[r].float() @ b[r].float() for r in range(world))
    for r in range(world):
        assert_close(outs[r].float(), total[r * ms : (r + 1) * ms], f"rank {r}", atol=3e-2, rtol=1e-2)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_owner_waits_for_every_peers_contribution(name):
    """Ranks 1 and 2 push; rank 3 does not. Rank 0's own tiles each time out once (on rank 3)
    and miss its share."""
    config = CONFIGS[name]
    world, ms, k, n = 4, 16, 16, 32
    peers = _peers(world, ms, n, config)
    a = [torch.randn(world * ms, k) for _ in range(world)]
    b = [torch.randn(k, n) for _ in range(world)]
    for r in (1, 2):
        rs.matmul_reduce_scatter(a[r], b[r], peers[r], config, phase=1, epoch=1)
    out = rs.matmul_reduce_scatter(a[0], b[0], peers[0], config, phase=2, epoch=1, max_spins=1)
    tiles = rs.tiles_per_owner(ms, n, config)
    # The Triton consumer waits per tile; the reduction kernel's programs each wait per source.
    expected = tiles if name == "triton" else -(-ms * n // 4096)
    assert int(peers[0].status) == expected
    partial = sum(a[r] @ b[r] for r in (0, 1, 2))[:ms]
    assert_close(out, partial, "the sum of the ranks that pushed")


def test_a_flag_from_an_earlier_call_satisfies_nothing():
    config = CONFIGS["triton"]
    world, ms, k, n = 2, 16, 16, 16
    peers = _peers(world, ms, n, config)
    a = [torch.randn(world * ms, k) for _ in range(world)]
    run_ranks(lambda r, phase, epoch: rs.matmul_reduce_scatter(a[r], torch.eye(k), peers[r], config, phase=phase, epoch=epoch), world, 1)
    rs.matmul_reduce_scatter(a[0], torch.eye(k), peers[0], config, phase=2, epoch=2, max_spins=2)
    assert int(peers[0].status) == 1


@pytest.mark.parametrize(
    "a, b, world, why",
    [
        (torch.randn(6, 8), torch.randn(8, 3), 4, "rows not divisible by the world size"),
        (torch.randn(8, 8), torch.randn(7, 3), 2, "mismatched inner dimensions"),
        (torch.randn(8, 8), torch.randn(8, 3).half(), 2, "mixed dtypes"),
        (torch.randn(2, 8, 8), torch.randn(8, 3), 2, "a 3-d left operand"),
    ],
)
def test_operands_outside_the_envelope_are_refused(a, b, world, why):
    assert not rs.supported(a, b, world), why
    peers = emulated_peers(world, 256, a.dtype, 64)[0]
    with pytest.raises(ValueError, match="does not take"):
        rs.matmul_reduce_scatter(a, b, peers)


# GEMM + all-reduce: the same kernel, owners pushing the reduced tiles back --------------------------
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("world", [1, 2, 3])
def test_all_reduce_gives_every_rank_the_same_whole_sum_over_calls(name, world):
    from kernels.comm import gemm_ar

    config = CONFIGS[name]
    ms, k, n = 18, 20, 24
    peers = emulated_peers(world, gemm_ar.buffer_numel(world, ms, n), torch.float32, gemm_ar.flags_needed(world, ms, n, config))
    for epoch in (1, 2, 3):
        a = [torch.randn(world * ms, k) for _ in range(world)]
        b = [torch.randn(n, k).t() for _ in range(world)]
        outs = [torch.full((world * ms, n), float("nan")) for _ in range(world)]
        run_ranks(
            lambda r, phase, epoch: gemm_ar.matmul_all_reduce(a[r], b[r], peers[r], config, out=outs[r], phase=phase, epoch=epoch, max_spins=2),
            world,
            epoch,
            phases=(1, 2, 3),
        )
        total = sum(a[r] @ b[r] for r in range(world))
        for r in range(world):
            assert_close(outs[r], total, f"rank {r}, call {epoch}")
            assert torch.equal(outs[r], outs[0]), "every rank holds the owners' rounded values"
            assert int(peers[r].status) == 0


def test_all_reduce_waits_for_every_owners_reduced_rows():
    """Phase 3 on rank 0 before rank 2 reduced: the rows rank 2 owns time out and stay unwritten."""
    from kernels.comm import gemm_ar

    config = CONFIGS["triton"]
    world, ms, k, n = 3, 16, 16, 16
    peers = emulated_peers(world, gemm_ar.buffer_numel(world, ms, n), torch.float32, gemm_ar.flags_needed(world, ms, n, config))
    a = [torch.randn(world * ms, k) for _ in range(world)]
    outs = [torch.full((world * ms, n), float("nan")) for _ in range(world)]
    call = lambda r, phase: gemm_ar.matmul_all_reduce(a[r], torch.eye(k), peers[r], config, out=outs[r], phase=phase, epoch=1, max_spins=1)  # noqa: E731
    for r in range(world):
        call(r, 1)
    for r in (0, 1):
        call(r, 2)
    call(0, 3)
    assert int(peers[0].status) == 1
    total = sum(a)
    assert_close(outs[0][: 2 * ms], total[: 2 * ms], "rows of the owners that reduced")
    assert torch.isnan(outs[0][2 * ms :]).all()
