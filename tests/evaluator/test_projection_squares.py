"""The quadratic projection ``p2 = sum_j r'_j w_j^2`` and the per-call signs (``projection.py``,
``projection_check.py``): honest outputs with legitimate rounding differences pass both
projections across many seeds; outputs made to fit the linear projection alone (the shortcut a
linear operation allows) fail the quadratic one."""

from __future__ import annotations

import pytest
import torch

from services.worker.evaluator import EvalSettings
from services.worker.evaluator import projection as P
from services.worker.evaluator import projection_check as C
from services.worker.evaluator.compare import DEFAULT_TOLERANCE, compare_leaf

K = EvalSettings().projection_sigmas
TOL = dict(DEFAULT_TOLERANCE)
SEEDS = 1000


def _ratios(got: torch.Tensor, want: torch.Tensor, seeds: int = SEEDS) -> tuple[float, float]:
    """The largest |p_c - p_r| / allowed at one sigma, of either projection, over ``seeds``
    seeds; and asserts that no seed fails at ``K`` sigmas."""
    worst = [0.0, 0.0]
    for seed in range(seeds):
        c, r = P.project([got], seed, TOL), P.project([want], seed, TOL)
        assert C.first_mismatch(c, r, K) is None, (seed, C.first_mismatch(c, r, K))
        for i, (mine, ref, bound, total) in enumerate(((c.p, r.p, r.bound, r.total), (c.p2, r.p2, r.bound2, r.total2))):
            worst[i] = max(worst[i], abs(mine[0][0] - ref[0][0]) / C.allowed(bound[0][0], total[0][0], 1.0))
    return worst[0], worst[1]


def _rows_of_magnitudes(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled from 1e-6 to 1e4: outputs of very different sizes in one tensor."""
    scale = torch.logspace(-6, 4, x.shape[0], dtype=torch.float64).to(x.dtype)
    return x * scale[:, None]


# Honest candidates -------------------------------------------------------------------------------
def test_a_matmul_summed_in_another_order_passes_with_large_and_tiny_outputs():
    gen = torch.Generator().manual_seed(2)
    x = _rows_of_magnitudes(torch.randn(64, 256, generator=gen))
    w = torch.randn(256, 48, generator=gen) / 16
    want = x @ w
    got = sum(x[:, k:k + 32] @ w[k:k + 32] for k in reversed(range(0, 256, 32)))  # blocks of k, last first
    assert not torch.equal(got, want) and compare_leaf(got, want, TOL, "y")[0]
    assert want.abs().max() > 1e4 and want.abs().min() < 1e-5
    linear, quadratic = _ratios(got, want)
    assert linear < 1 and quadratic < 1  # rounding of float32 is far inside the tolerance


def test_bf16_outputs_at_bf16_tolerance_pass():
    """A bf16 matmul, and the same sums rounded otherwise (as another order of accumulation
    rounds them): elements one bf16 ulp (up to 2^-7 relative) up or down at random, with
    magnitudes from 1e-6 to 1e4."""
    gen = torch.Generator().manual_seed(3)
    x = _rows_of_magnitudes(torch.randn(96, 128, generator=gen)).bfloat16()
    w = (torch.randn(128, 80, generator=gen) / 11).bfloat16()
    want = x @ w
    step = torch.randint(-1, 2, want.shape, generator=gen)
    towards = torch.where(step == 0, want.float(), step * torch.inf).bfloat16()
    got = torch.nextafter(want, towards)
    assert (got != want).float().mean() > 0.6 and compare_leaf(got, want, TOL, "y")[0]
    linear, quadratic = _ratios(got, want)
    assert 0.01 < linear < K and 0.01 < quadratic < K


def test_errors_spread_over_the_whole_tolerance_pass_and_the_bound_is_not_loose():
    """Every element moved by a uniform fraction of its tolerance (in its dtype): both
    projections pass for every seed, and the largest quadratic difference is a fair part of one
    bound (a bound many times too large would let more through than it must)."""
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        w = (torch.randn(40, 50, generator=gen) * 3).to(dtype)
        atol, rtol = TOL[dtype]
        room = atol + rtol * w.double().abs()
        g = (w.double() + (torch.rand(w.shape, generator=gen, dtype=torch.float64) * 2 - 1) * room).to(dtype)
        g = torch.where((g.double() - w.double()).abs() <= room, g, w)
        assert compare_leaf(g, w, TOL, "y")[0]
        linear, quadratic = _ratios(g, w, seeds=500)
        assert 0.5 < quadratic < K and 0.5 < linear < K, (dtype, linear, quadratic)


def test_errors_at_the_tolerance_all_one_way_pass():
    """Each element moved outward by its whole tolerance: every square grows by its most, the
    same sign everywhere (the largest systematic difference an honest candidate can make)."""
    w = torch.randn(5000, dtype=torch.float64).float() * 100
    atol, rtol = TOL[torch.float32]
    g = (w.double() + torch.sign(w.double()) * (atol + rtol * w.double().abs()) * 0.999).float()
    assert compare_leaf(g, w, TOL, "y")[0]
    _ratios(g, w, seeds=300)


def test_integers_must_match_in_both_projections():
    w = torch.arange(-300, 300, dtype=torch.int64)
    want = P.project([w], 6, TOL)
    assert want.bound2 == [[0.0]] and C.first_mismatch(P.project([w.clone()], 6, TOL), want, K) is None
    # Swap two elements with the same linear sign and different quadratic signs: p stays, p2 moves.
    r = P.signs(6, 0, 0, w.numel())
    j, k = next((j, k) for j in range(w.numel()) for k in range(j + 1, w.numel())
                if r[0, j] == r[0, k] and r[1, j] != r[1, k] and abs(int(w[j])) != abs(int(w[k])))
    g = w.clone()
    g[j], g[k] = w[k], w[j]
    bad = C.first_mismatch(P.project([g], 6, TOL), want, K)
    assert bad is not None and bad.projection == C.QUADRATIC


# What the linear projection alone let through ----------------------------------------------------
def test_outputs_made_to_fit_the_linear_projection_fail_the_quadratic():
    """A candidate knows the signs: garbage with its component along ``r`` set to match the
    reference's ``p`` passes the linear check for every seed and fails the quadratic one."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(64, 48, generator=gen)
    for seed in range(200):
        want = P.project([w], seed, TOL)
        r = P.signs(seed, 0, 0, w.numel())[0].view(w.shape)
        garbage = torch.randn(w.shape, generator=gen, dtype=torch.float64)
        g = (garbage + (want.p[0][0] - float((r * garbage).sum())) / w.numel() * r).float()
        bad = C.first_mismatch(P.project([g], seed, TOL), want, K)
        assert bad is not None and bad.projection == C.QUADRATIC, seed


def test_a_collective_skipped_for_a_sum_of_projections_fails_the_quadratic():
    """``y = a + b`` (an all-reduce of two ranks' partials): the linear projection of ``y`` is the
    sum of the partials' projections, so the sum could be skipped; the quadratic one is not."""
    gen = torch.Generator().manual_seed(6)
    for seed in range(100):
        a, b = torch.randn(32, 40, generator=gen, dtype=torch.float64), torch.randn(32, 40, generator=gen, dtype=torch.float64)
        want, pa, pb = (P.project([t], seed, TOL) for t in (a + b, a, b))
        summed = C.Projections([[pa.p[0][0] + pb.p[0][0]]], [[pa.p2[0][0] + pb.p2[0][0]]], *([[0.0]] for _ in range(4)))
        bad = C.first_mismatch(summed, want, K)
        assert bad is not None and bad.projection == C.QUADRATIC, seed


def test_what_a_block_built_from_one_calls_signs_does_not_serve_the_next():
    """``p = <X, R W^T>``: with the block's signs ``R W^T`` would be built once and every call cost
    ``m k``; so would the quadratic forms ``W diag(r'_i) W^T`` of ``p2``. The signs change with the
    call: what call 0's signs built misses call 1."""
    gen = torch.Generator().manual_seed(7)
    m, k, n = 16, 8, 24
    weight = torch.randn(k, n, generator=gen, dtype=torch.float64)
    xs = [torch.randn(m, k, generator=gen, dtype=torch.float64) for _ in range(2)]
    ref = P.Projector(99, "cpu", TOL)
    for x in xs:
        ref.add([x @ weight])
    want = ref.finish()
    r, r2 = P.signs(99, 0, 0, m * n, call=0).view(2, m, n)
    linear = r @ weight.t()  # built once from call 0's signs
    forms = torch.einsum("kn,in,ln->ikl", weight, r2, weight)  # W diag(r'_i) W^T per row
    for call, x in enumerate(xs):
        p, p2 = float((x * linear).sum()), float(torch.einsum("ik,ikl,il->", x, forms, x))
        fits = [abs(p - want.p[call][0]) <= 1e-9 * want.total[call][0], abs(p2 - want.p2[call][0]) <= 1e-9 * want.total2[call][0]]
        assert fits == ([True, True] if call == 0 else [False, False]), call


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_the_judge_names_the_quadratic_projection(dtype):
    from services.worker.evaluator.interleaved import Block, Timing
    from services.worker.evaluator.judge import Stop

    w = torch.randn(20, 10, dtype=dtype)
    want = P.project([w], 3, TOL)
    off = [[want.p2[0][0] + 10 * C.allowed(want.bound2[0][0], want.total2[0][0], K)]]
    got = C.Projections(want.p, off, *([[0.0]] for _ in range(4)))
    flags: list[str] = []
    timing = Timing(None, EvalSettings(), None, None, None, {}, flags.append)
    with pytest.raises(Stop) as stop:
        timing._check_projections(Block({0: [1.0]}, 1.0, {0: want}), Block({0: [1.0]}, 1.0, {0: got}), 0)
    assert stop.value.status == "incorrect"
    assert "tensor output 0's quadratic (signed sum of squares) projection off by" in flags[0], flags
