"""The random projection that checks every timed call (``services/worker/evaluator/projection.py``)
and the judge's use of it (``Timing._projections``, ``Timing._check_projections``)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from services.worker.evaluator import EvalSettings
from services.worker.evaluator import projection as P
from services.worker.evaluator import projection_check as C
from services.worker.evaluator.compare import DEFAULT_TOLERANCE, compare_leaf
from services.worker.evaluator.interleaved import Block, Timing
from services.worker.evaluator.judge import Stop
from services.worker.evaluator.pool import Replies

K = EvalSettings().projection_sigmas
TOL = dict(DEFAULT_TOLERANCE)


def _within_tolerance(w: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``w`` moved by up to its tolerance per element, in its own dtype (an element that rounding
    takes outside stays as it was)."""
    atol, rtol = TOL[w.dtype]
    room = atol + rtol * w.double().abs()
    step = (torch.rand(w.shape, generator=gen, dtype=torch.float64) * 2 - 1) * room
    g = (w.double() + step).to(w.dtype)
    return torch.where((g.double() - w.double()).abs() <= room, g, w)


def _check(got: C.Projections, want: C.Projections, sigmas: float = K) -> C.Mismatch | None:
    assert not C.shape_problem(got, want)
    return C.first_mismatch(got, want, sigmas)


def _one_call(block: C.Projections, call: int) -> C.Projections:
    """Call ``call`` of a block's numbers, as a block of its own."""
    return C.Projections(*([table[call]] for table in (block.p, block.p2, block.bound, block.bound2, block.total, block.total2)))


def _numbers(p: list[list[float]], p2: list[list[float]] | None = None) -> C.Projections:
    """A candidate's numbers (no bounds) with these projections."""
    p2 = p2 if p2 is not None else [[0.0] * len(row) for row in p]
    zeros = [[0.0] * len(row) for row in p]
    return C.Projections(p, p2, zeros, zeros, zeros, zeros)


# The signs ---------------------------------------------------------------------------------------
def test_signs_depend_on_the_index_alone_not_on_where_a_run_starts():
    whole = P.signs(77, 2, 0, 5000, call=4)
    assert whole.shape == (2, 5000) and set(whole.unique().tolist()) == {-1.0, 1.0}
    for start, n in ((0, 1), (13, 100), (4999, 1), (1234, 3766)):
        assert torch.equal(P.signs(77, 2, start, n, call=4), whole[:, start:start + n])
    # Across a multiple of 2**32, where the key changes with the index's upper bits.
    edge = 1 << 32
    across = P.signs(77, 2, edge - 3, 6)
    assert torch.equal(across[:, :3], P.signs(77, 2, edge - 3, 3)) and torch.equal(across[:, 3:], P.signs(77, 2, edge, 3))


def test_signs_differ_by_seed_leaf_call_and_projection_and_look_independent():
    """The linear and the quadratic signs (two bits of one hash), and those of another seed, leaf
    or call: no correlation between any two, nor within one across lags."""
    n = 1 << 16
    (a, a2), (b, _), (c, _), (d, d2) = (P.signs(1, 0, 0, n), P.signs(2, 0, 0, n), P.signs(1, 1, 0, n),
                                        P.signs(1, 0, 0, n, call=1))
    vectors = [a, a2, b, c, d, d2]
    for i, x in enumerate(vectors):
        for y in vectors[i + 1:]:
            assert abs(float((x * y).mean())) < 5 / math.sqrt(n)
    for lag in (1, 2, 3, 1024):
        assert abs(float((a[lag:] * a2[:-lag]).mean())) < 5 / math.sqrt(n)
    for x, y in ((a, b), (a, c), (b, c)):
        assert abs(float((x * y).mean())) < 5 / math.sqrt(n)
    for x in (a, b, c):
        assert abs(float(x.mean())) < 5 / math.sqrt(n)
        for lag in (1, 2, 3, 1024):
            assert abs(float((x[lag:] * x[:-lag]).mean())) < 5 / math.sqrt(n)


def test_the_same_signs_in_another_process():
    """Both sides compute the signs in their own processes, whatever state torch is in there."""
    code = ("import torch; torch.manual_seed(5); torch.rand(3); "
            "from services.worker.evaluator.projection import signs; print(signs(991, 3, 10**6, 64).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == P.signs(991, 3, 10**6, 64).tolist()  # noqa: S307 - our own subprocess's list of floats


# Chunks ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torch.randn(37, 11),
    lambda: torch.randn(11, 37).t(),
    lambda: torch.randn(6, 9, 20)[:, ::2, 3:17],
    lambda: torch.randn(5, 4).expand(3, 5, 4),
    lambda: torch.tensor(2.5),
    lambda: torch.zeros(0, 4),
    lambda: torch.randn(4, 0, 3)[:, :, ::2],
])
@pytest.mark.parametrize("limit", [1, 7, 64, 10_000])
def test_chunks_cover_the_tensor_in_row_major_order_within_the_limit(make, limit):
    t = make()
    pieces = list(P._chunks(t, limit))
    assert all(piece.numel() <= max(limit, 1) and piece.dim() == 1 for _, piece in pieces)
    flat = torch.cat([piece for _, piece in pieces]) if pieces else torch.zeros(0)
    assert torch.equal(flat, t.reshape(-1))
    starts = [start for start, _ in pieces]
    assert starts == [sum(p.numel() for _, p in pieces[:i]) for i in range(len(pieces))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.complex64, torch.int32, torch.bool])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_chunking_and_layout_give_the_result_of_one_chunk(dtype, layout):
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(40, 33, generator=gen, dtype=torch.float64)
    if dtype.is_complex:
        t = torch.complex(base, base.flip(0)).to(dtype)
    elif dtype == torch.bool:
        t = base > 0
    elif not dtype.is_floating_point:
        t = (base * 1000).to(dtype)
    else:
        t = base.to(dtype)
    t = {"contiguous": t, "transposed": t.t(), "strided": t[::3, 1::2]}[layout]
    one = P.project([t.contiguous()], 123, TOL, chunk=1 << 20)
    for chunk in (1, 2, 5, 64, 333):
        many = P.project([t], 123, TOL, chunk=chunk)
        for a, b, s in ((one.p, many.p, one.total), (one.total, many.total, one.total), (one.bound, many.bound, one.total)):
            assert abs(a[0][0] - b[0][0]) <= 1e-12 * (s[0][0] + 1), (chunk, a, b)


# Each dtype ----------------------------------------------------------------------------------------
def _manual(t: torch.Tensor, seed: int, position: int = 0) -> float:
    x = torch.view_as_real(t.resolve_conj()).reshape(-1) if t.is_complex() else t.reshape(-1)
    x = x.to(torch.float64)
    return float((x * P.signs(seed, position, 0, x.numel())[0]).sum())


FP8 = [getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
                                   torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool] + FP8)
def test_every_dtype_projects_to_its_float64_sum(dtype):
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(300, generator=gen)
    if dtype.is_complex:
        t = torch.complex(base, base.roll(1)).to(dtype)
    elif dtype == torch.bool:
        t = base > 0.3
    elif not dtype.is_floating_point:
        t = (base * 50).clamp(0 if dtype == torch.uint8 else -100, 100).to(dtype)
    else:
        t = base.to(dtype)
    got = P.project([t], 42, TOL)
    assert len(got.p) == 1 and len(got.p[0]) == 1
    assert got.p[0][0] == pytest.approx(_manual(t, 42), rel=1e-12, abs=1e-12)
    real = (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t).double().reshape(-1)
    r2 = P.signs(42, 0, 0, real.numel())[1]
    assert got.p2[0][0] == pytest.approx(float(r2 @ real.square()), rel=1e-12, abs=1e-12)
    assert got.total[0][0] == pytest.approx(float(real.abs().sum()), rel=1e-12)
    assert got.total2[0][0] == pytest.approx(float(real.square().sum()), rel=1e-12)
    if t.is_floating_point() or t.is_complex():
        atol, rtol = TOL[dtype]
        w = t.abs().double() if t.is_complex() else t.double().abs()
        parts = 2 if t.is_complex() else 1
        exact = math.sqrt(float(((atol + rtol * w) ** 2).sum()) * parts)
        assert exact <= got.bound[0][0] * (1 + 1e-9) <= 1.5 * exact  # complex: a little looser, never tighter
        tol = atol + rtol * w
        exact2 = math.sqrt(float((tol * (2 * w + tol)).square().sum()) * parts)
        assert exact2 <= got.bound2[0][0] * (1 + 1e-9) <= 1.5 * exact2
    else:
        assert got.bound[0][0] == got.bound2[0][0] == 0.0  # integers and bools must match exactly


def test_a_conjugated_view_projects_as_its_values():
    z = torch.randn(20, 8, dtype=torch.complex64)
    assert P.project([z.conj()], 5, TOL).p == P.project([z.conj().resolve_conj()], 5, TOL).p


def test_non_tensor_leaves_are_skipped_and_positions_keep_their_signs():
    t = torch.randn(50)
    got = P.project([3.0, t, "name", None, t], 8, TOL)
    assert len(got.p[0]) == 2
    assert got.p[0][0] == pytest.approx(_manual(t, 8, position=1), rel=1e-12)
    assert got.p[0][1] == pytest.approx(_manual(t, 8, position=4), rel=1e-12)
    assert P.project([4, "x"], 8, TOL).p == [[]]


def test_a_block_of_calls_moves_to_the_host_once_and_keeps_its_order():
    projector = P.Projector(9, "cpu", TOL, chunk=16)  # chunks of 16: a leaf read in pieces
    outputs = [[torch.randn(30), torch.arange(7)] for _ in range(5)]
    for leaves in outputs:
        projector.add(leaves)
    block = projector.finish()
    assert block.shape == [2] * 5
    for call, leaves in enumerate(outputs):
        single = P.project(leaves, 9, TOL)
        for position, leaf in enumerate(leaves):
            r = P.signs(9, position, 0, leaf.numel(), call=call)
            x = leaf.double()
            assert block.p[call][position] == pytest.approx(float(r[0] @ x), rel=1e-12, abs=1e-12)
            assert block.p2[call][position] == pytest.approx(float(r[1] @ (x * x)), rel=1e-12, abs=1e-12)
        assert block.bound[call] == pytest.approx(single.bound[0], rel=1e-12, abs=1e-15)
        assert block.bound2[call] == pytest.approx(single.bound2[0], rel=1e-12, abs=1e-15)
        assert (block.p[call] == single.p[0]) == (call == 0)  # the signs change with the call


def _projected_block(leaves_per_call: list[list], seed: int, calls: int) -> C.Projections:
    projector = P.Projector(seed, "cpu", TOL, calls=calls)
    for leaves in leaves_per_call:
        projector.add(leaves)
    return projector.finish()


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "strided", "complex", "bool", "int", "scalar", "fp8"])
def test_a_staged_block_has_the_numbers_of_calls_projected_one_by_one(monkeypatch, kind):
    """Small leaves are copied as each call returns and projected together at the block's end:
    the same numbers, call by call, as projecting each call as it returns."""
    g = torch.Generator().manual_seed(3)
    make = {
        "float32": lambda: torch.randn(40, 33, generator=g),
        "bfloat16": lambda: torch.randn(40, 33, generator=g).bfloat16(),
        "strided": lambda: torch.randn(33, 80, generator=g).t()[::2],
        "complex": lambda: torch.randn(40, 33, dtype=torch.complex64, generator=g).conj(),
        "bool": lambda: torch.rand(40, 33, generator=g) > 0.5,
        "int": lambda: torch.randint(-9, 9, (40, 33), generator=g),
        "scalar": lambda: torch.randn((), generator=g),
        "fp8": lambda: torch.randn(40, 33, generator=g).to(torch.float8_e4m3fn),
    }[kind]
    calls = [[make(), 7, make()] for _ in range(5)]
    projector = P.Projector(21, "cpu", TOL, calls=5)
    projector.add(calls[0])
    assert sorted(projector._stages) == [0, 2]  # both tensor leaves staged, none projected yet
    staged = _projected_block(calls, 21, calls=5)
    monkeypatch.setattr(P, "STAGE_BYTES", 0)  # nothing fits: every leaf projected as its call returns
    alone = _projected_block(calls, 21, calls=5)
    for name in ("p", "p2", "bound", "bound2", "total", "total2"):
        for a, b in zip(getattr(staged, name), getattr(alone, name)):
            assert a == pytest.approx(b, rel=1e-12, abs=1e-12), name
    assert staged.p[0] != staged.p[1]  # the signs change with the call


def test_leaves_that_do_not_fit_their_stage_are_projected_in_place_and_keep_their_order(monkeypatch):
    """More calls than the block said, a leaf whose shape or dtype changes, a position past the
    staging budget: projected as the call returns, in the order the calls came."""
    g = torch.Generator().manual_seed(4)
    small, other = torch.randn(30, generator=g), torch.randn(31, generator=g)
    monkeypatch.setattr(P, "STAGE_BYTES", 2 * 30 * 4)  # one position of two calls
    calls = [[small, small], [small, other], [other.double(), small], [small, small]]
    got = _projected_block(calls, 5, calls=2)
    for call, leaves in enumerate(calls):
        for position, leaf in enumerate(leaves):
            r = P.signs(5, position, 0, leaf.numel(), call=call)
            assert got.p[call][position] == pytest.approx(float(r[0] @ leaf.double()), rel=1e-12, abs=1e-12)
            assert got.p2[call][position] == pytest.approx(float(r[1] @ (leaf.double() ** 2)), rel=1e-12, abs=1e-12)


# The check -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.complex64])
def test_an_honest_candidate_within_tolerance_passes_across_many_seeds(dtype):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=gen).to(dtype) if not dtype.is_complex else torch.randn(64, 48, generator=gen, dtype=dtype)
    if dtype.is_complex:
        atol, rtol = TOL[dtype]
        room = (atol + rtol * w.abs().double()) * 0.7  # each part by up to 0.7: the modulus stays within
        g = w + torch.complex((torch.rand(w.shape, generator=gen, dtype=torch.float64) * 2 - 1) * room,
                              (torch.rand(w.shape, generator=gen, dtype=torch.float64) * 2 - 1) * room).to(dtype)
    else:
        g = _within_tolerance(w, gen)
    assert compare_leaf(g, w, TOL, "output")[0]
    tight = 0
    for seed in range(1500):
        want, got = P.project([w], seed, TOL), P.project([g], seed, TOL)
        assert _check(got, want) is None, seed
        tight += _check(got, want, sigmas=0.05) is not None
    assert tight > 0  # the bound is what lets them pass: at a twentieth of a sigma some fail


def test_errors_at_the_tolerance_with_one_sign_pattern_pass():
    """Every element off by its whole tolerance, all in the same direction (the worst an honest
    candidate may do elementwise): still within K bounds for every seed."""
    w = torch.randn(5000, dtype=torch.float64).float()
    atol, rtol = TOL[torch.float32]
    g = (w.double() + (atol + rtol * w.double().abs()) * 0.999).float()
    assert compare_leaf(g, w, TOL, "output")[0]
    assert all(_check(P.project([g], s, TOL), P.project([w], s, TOL)) is None for s in range(300))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_stale_outputs_of_other_inputs_fail(dtype):
    """The previous call's outputs handed back for this call's inputs. A call's projection misses
    with probability about P(|N(0, 1)| < K b / ||now - previous||): below 1e-3 at float32's
    tolerance, several percent at bfloat16's (rtol 1.6e-2); a block of calls that mostly hand
    back stale outputs is caught for every seed."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(32, 16, dtype=torch.float64, generator=gen)
    outputs = [(torch.randn(8, 32, dtype=torch.float64, generator=gen) @ weight).to(dtype) for _ in range(9)]
    caught = 0
    for seed in range(300):
        ref, cand = P.Projector(seed, "cpu", TOL), P.Projector(seed, "cpu")
        for call in range(1, 9):
            ref.add([outputs[call]])
            cand.add([outputs[call - 1]])
        want, got = ref.finish(), cand.finish()
        assert _check(got, want) is not None, seed
        caught += sum(C.first_mismatch(_one_call(got, call), _one_call(want, call), K) is not None for call in range(8))
    assert caught / (300 * 8) > (0.8 if dtype == torch.bfloat16 else 0.99)


def test_one_element_far_off_is_caught_whatever_the_signs():
    w = torch.randn(1000)
    want = P.project([w], 4, TOL)
    allowed = C.allowed(want.bound[0][0], want.total[0][0], K)
    g = w.clone()
    g[123] += 1.5 * allowed
    assert all(_check(P.project([g], 4, TOL), want) is not None for _ in range(3))
    g[123] = w[123] + 0.5 * allowed
    assert _check(P.project([g], 4, TOL), want) is None


def test_integers_must_match_exactly_and_nan_never_passes():
    w = torch.arange(-500, 500, dtype=torch.int64)
    want = P.project([w], 6, TOL)
    assert _check(P.project([w.clone()], 6, TOL), want) is None
    g = w.clone()
    g[7] += 1
    assert _check(P.project([g], 6, TOL), want) is not None
    f = torch.randn(100)
    nan = f.clone()
    nan[3] = float("nan")
    assert _check(P.project([nan], 6, TOL), P.project([f], 6, TOL)) is not None
    inf = f.clone()
    inf[3] = float("inf")
    assert _check(P.project([inf], 6, TOL), P.project([f], 6, TOL)) is not None


def test_replies_are_read_strictly():
    block = P.project([torch.randn(10), torch.ones(2)], 1, TOL)
    assert C.Projections.from_reply(block.reply(bounds=True), bounds=True) == block
    cand = C.Projections.from_reply(block.reply(bounds=False), bounds=False)
    assert cand.p == block.p and cand.p2 == block.p2 and "bounds" not in block.reply(bounds=False)
    for bad in ({}, {"projections": 3}, {"projections": [1.0]}, {"projections": [["x"]]}, {"projections": [[True]]},
                {"projections": [[1.0]]}, {"projections": [[1.0]], "square_projections": [[1.0, 2.0]]}):
        with pytest.raises(ValueError):
            C.Projections.from_reply(bad, bounds=False)
    with pytest.raises(ValueError):
        C.Projections.from_reply({"projections": [[1.0]], "square_projections": [[1.0]], "bounds": [[1.0, 2.0]], "totals": [[1.0]],
                                  "square_bounds": [[1.0]], "square_totals": [[1.0]]}, bounds=True)
    assert C.shape_problem(block, block) == ""
    assert C.shape_problem(_numbers([[1.0]]), block) == "timed call 0: 1 projections (1 of squares) for 2 tensor outputs"
    assert C.shape_problem(_numbers([[1.0, 2.0]], [[1.0]]), block) == "timed call 0: 2 projections (1 of squares) for 2 tensor outputs"
    assert C.shape_problem(_numbers([]), block) == "0 calls' projections (0 of squares) for 1 timed calls"


# The judge's side ----------------------------------------------------------------------------------
def _timing(flags: list[str]) -> Timing:
    # Only the settings and the flag are used by the checks below (no pools, no clock).
    return Timing(None, EvalSettings(), None, None, None, {}, flags.append)


def _block(projections: dict[int, C.Projections]) -> Block:
    return Block(times={r: [1.0] for r in projections}, wall_ms=1.0, projections=projections)


def test_the_judge_finds_the_call_that_did_not_compute():
    ref_outputs = [[torch.randn(16, 4)] for _ in range(4)]
    cand_outputs = ref_outputs[:2] + [ref_outputs[1]] + ref_outputs[3:]  # call 2 hands back call 1's
    ref, cand = P.Projector(31, "cpu", TOL), P.Projector(31, "cpu")
    for r_leaves, c_leaves in zip(ref_outputs, cand_outputs):
        ref.add(r_leaves)
        cand.add(c_leaves)
    want, got = ref.finish(), cand.finish()
    flags: list[str] = []
    timing = _timing(flags)
    timing._check_projections(_block({0: want, 1: want}), _block({0: want, 1: want}), 3)  # the reference's own numbers pass
    with pytest.raises(Stop) as stop:
        timing._check_projections(_block({0: want, 1: want}), _block({0: want, 1: got}), 3)
    assert stop.value.status == "incorrect"
    assert flags and flags[0].startswith("timed call 2 of round 3 did not match the reference on rank 1")
    assert "computes only some of the timed calls" in flags[0]


def test_the_judge_rejects_projections_that_do_not_fit_the_block():
    want = P.project([torch.randn(5)], 1, TOL)
    timing = _timing([])
    for got in ({}, {0: _numbers([[1.0], [2.0]])}, {0: _numbers([[]])}):
        with pytest.raises(Stop) as stop:
            timing._check_projections(_block({0: want}), _block(got), 0)
        assert stop.value.status == "rejected" and stop.value.error.kind == "integrity"
    replies = Replies(by_rank={0: {"ok": True, "times": [1.0], "projections": "forged"}})
    with pytest.raises(Stop) as stop:
        timing._projections("candidate", replies)
    assert stop.value.status == "rejected" and "malformed projections" in stop.value.error.message
    nan = Replies(by_rank={0: {"ok": True, "projections": [[1.0]], "square_projections": [[float("nan")]], "bounds": [[1.0]],
                               "totals": [[1.0]], "square_bounds": [[1.0]], "square_totals": [[1.0]]}})
    with pytest.raises(Stop) as stop:
        timing._projections("reference", nan)
    assert stop.value.status == "workload_error"
