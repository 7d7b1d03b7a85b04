"""All-reduce + residual add + RMSNorm on simulated ranks (Triton's interpreter, CPU tensors):
one-shot and two-shot give every rank the eager ops' result (the same bits on every rank where
the residual is the same), over consecutive calls, for each way of applying the weight; the flat
all-reduce takes any size; the sequence-parallel variant reduce-scatters, norms the shard and
gathers it; a missing peer is waited for and reported, never read."""

from __future__ import annotations

import pytest
import torch

from comm_sim import assert_close, run_ranks
from kernels.comm import allreduce_norm as arn
from kernels.comm.peers import emulated_peers

EPS = 1e-6
PHASES = {"one_shot": (1, 2), "two_shot": (1, 2, 3)}


def _peers(world, numel, config, dtype=torch.float32):
    return emulated_peers(world, arn.buffer_numel(world, numel), dtype, arn.flags_needed(world, config))


def _eager(xs, residual, weight, mode, dtype):
    h = sum(x.float() for x in xs).to(dtype)
    if residual is not None:
        h = h + residual
    hf = h.float()
    normed = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)
    if weight is None:
        return normed.to(dtype), h
    if mode == "round_then_scale":
        return weight * normed.to(dtype), h
    return (normed * weight.float()).to(dtype), h


@pytest.mark.parametrize("algo", sorted(PHASES))
@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_rank_gets_the_norm_of_the_sum_plus_its_residual_over_calls(algo, world):
    config = arn.ArNormConfig(algo=algo, programs=3, num_warps=4)
    rows, hidden = 7, 40  # rows do not divide among ranks or programs; hidden is not a power of 2
    peers = _peers(world, rows * hidden, config)
    weight = torch.randn(hidden)
    for epoch in (1, 2, 3):
        xs = [torch.randn(rows, hidden) for _ in range(world)]
        residuals = [torch.randn(rows, hidden) for _ in range(world)]  # may differ by rank
        outs = [(torch.full((rows, hidden), float("nan")), torch.full((rows, hidden), float("nan"))) for _ in range(world)]
        run_ranks(
            lambda r, phase, epoch: arn.all_reduce_add_rmsnorm(xs[r], residuals[r], weight, EPS, peers[r], config, phase=phase, epoch=epoch, out=outs[r], max_spins=2),
            world,
            epoch,
            phases=PHASES[algo],
        )
        for r in range(world):
            y, h = _eager(xs, residuals[r], weight, "round_then_scale", torch.float32)
            assert_close(outs[r][1], h, f"h on rank {r}, call {epoch}")
            assert_close(outs[r][0], y, f"y on rank {r}, call {epoch}")
            assert int(peers[r].status) == 0


@pytest.mark.parametrize("algo", sorted(PHASES))
@pytest.mark.parametrize("mode, with_weight, with_residual", [("round_then_scale", True, True), ("float32", True, False), ("round_then_scale", False, True)])
def test_half_precision_rounds_where_the_eager_ops_round(algo, mode, with_weight, with_residual):
    world, rows, hidden = 2, 4, 64
    dtype = torch.float16
    config = arn.ArNormConfig(algo=algo, programs=2, num_warps=4)
    peers = _peers(world, rows * hidden, config, dtype)
    xs = [torch.randn(rows, hidden).to(dtype) for _ in range(world)]
    residual = torch.randn(rows, hidden).to(dtype) if with_residual else None
    weight = (1 + 0.1 * torch.randn(hidden)).to(dtype) if with_weight else None
    outs = run_ranks(
        lambda r, phase, epoch: arn.all_reduce_add_rmsnorm(xs[r], residual, weight, EPS, peers[r], config, weight_mode=mode, phase=phase, epoch=epoch, out=(torch.empty_like(xs[r]), torch.empty_like(xs[r]))),
        world,
        1,
        phases=PHASES[algo],
    )
    y, h = _eager(xs, residual, weight, mode, dtype)
    for r in range(world):
        assert torch.equal(outs[r][1], h), "h is the rounded sum plus the residual, rounded"
        assert_close(outs[r][0].float(), y.float(), f"y on rank {r}", atol=2e-3, rtol=2e-3)
        assert torch.equal(outs[r][0], outs[0][0]), "the same bits on every rank"


@pytest.mark.parametrize("algo", sorted(PHASES))
@pytest.mark.parametrize("numel", [1, 5000, 8192 + 17, arn.MAX_ROW + 8192 + 3])
def test_the_flat_all_reduce_takes_any_size(algo, numel):
    world = 3
    config = arn.ArNormConfig(algo=algo, programs=2, num_warps=4)
    peers = _peers(world, numel + arn.FLAT_ROW, config)
    xs = [torch.randn(numel) for _ in range(world)]
    outs = run_ranks(lambda r, phase, epoch: arn.all_reduce(xs[r], peers[r], config, phase=phase, epoch=epoch, out=torch.empty(numel)), world, 1, phases=PHASES[algo])
    for r in range(world):
        assert_close(outs[r], sum(xs), f"rank {r}")


def test_sequence_parallel_norm_reduce_scatters_norms_the_shard_and_gathers_it():
    world, rows, hidden = 3, 6, 32
    config = arn.ArNormConfig(algo="two_shot", programs=2, num_warps=4)
    peers = _peers(world, rows * hidden, config)
    weight = torch.randn(hidden)
    for epoch in (1, 2):
        xs = [torch.randn(rows, hidden) for _ in range(world)]
        shards = [torch.randn(rows // world, hidden) for _ in range(world)]
        outs = [(torch.empty(rows, hidden), torch.empty(rows // world, hidden)) for _ in range(world)]
        run_ranks(
            lambda r, phase, epoch: arn.reduce_scatter_add_rmsnorm_all_gather(xs[r], shards[r], weight, EPS, peers[r], config, phase=phase, epoch=epoch, out=outs[r]),
            world,
            epoch,
            phases=(1, 2, 3),
        )
        total = sum(xs)
        ys = []
        for r in range(world):
            h = total[r * 2 : (r + 1) * 2] + shards[r]
            ys.append(weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)))
            assert_close(outs[r][1], h, f"h shard on rank {r}")
        for r in range(world):
            assert_close(outs[r][0], torch.cat(ys), f"gathered y on rank {r}")


@pytest.mark.parametrize("algo", sorted(PHASES))
def test_a_missing_peer_is_waited_for_and_reported(algo):
    world, rows, hidden = 2, 4, 16
    config = arn.ArNormConfig(algo=algo, programs=2, num_warps=4)
    peers = _peers(world, rows * hidden, config)
    xs = [torch.randn(rows, hidden) for _ in range(world)]
    # Rank 1 never stores into rank 0's inbox: each of rank 0's programs times out once on it.
    arn.all_reduce_add_rmsnorm(xs[0], None, None, EPS, peers[0], config, phase=2, epoch=1, max_spins=1)
    assert int(peers[0].status) == config.programs
    with pytest.raises(RuntimeError, match="timed out"):
        peers[0].check()


@pytest.mark.parametrize(
    "x, residual, weight, why",
    [
        (torch.randn(4, 8).t(), None, None, "a non-contiguous input"),
        (torch.randn(4, 8), torch.randn(4, 8).half(), None, "a residual of another dtype"),
        (torch.randn(4, 8), torch.randn(4, 4), None, "a residual of another shape"),
        (torch.randn(4, 8), None, torch.randn(4), "a weight of another width"),
        (torch.randn(2, arn.MAX_ROW + 1), None, None, "rows wider than a program holds"),
        (torch.randn(4, 8).double(), None, None, "float64"),
    ],
)
def test_operands_outside_the_envelope_are_refused(x, residual, weight, why):
    peers = emulated_peers(1, 1 << 16, x.dtype, 64)[0]
    with pytest.raises(ValueError, match="does not take"):
        arn.all_reduce_add_rmsnorm(x, residual, weight, EPS, peers)


@pytest.mark.parametrize(
    "x, why",
    [
        (torch.randn(4, 8).t(), "not contiguous (its reshape would be a copy the kernel never reads)"),
        (torch.randn(4, 8)[:, ::2], "strided"),
        (torch.randn(16).double(), "float64"),
        (torch.randn(0), "empty"),
    ],
)
def test_the_flat_all_reduce_refuses_what_it_cannot_read_flat(x, why):
    peers = emulated_peers(1, 1 << 16, x.dtype, 64)[0]
    with pytest.raises(ValueError, match="does not take"):
        arn.all_reduce(x, peers)
