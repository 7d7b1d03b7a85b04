"""How many calls a timing block holds: sized from the warm-up calls' times so that the timing
budget, not ``max_iters``, bounds the phase (the warm-up blocks once timed no call, every job
ran ``max_iters`` calls a side whatever a call took: 1018 calls of a 5.7 ms KernelBench problem
on a 1 s budget, results/gpu/h200-session24/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.worker.evaluator import EvalSettings
from services.worker.evaluator.interleaved import Block, calls_per_side, round_count

HERE = Path(__file__).parent
SETTINGS = EvalSettings.for_device("cpu", timing_budget_s=1.0, min_iters=5, max_iters=500)


def _block(times: list[float], overhead_ms: float = 1.0, ranks: int = 2) -> Block:
    """A block whose calls took ``times`` on every rank, with ``overhead_ms`` a call around them."""
    return Block({r: list(times) for r in range(ranks)}, sum(times) + overhead_ms * len(times))


def test_the_budget_sets_the_calls_from_the_median_call():
    # A first call that compiles (500 ms) does not shrink the blocks: the median is 10 ms.
    ref = _block([500.0, 10.0, 10.0, 10.0, 10.0])
    cand = _block([800.0, 10.0, 10.0, 10.0, 10.0])
    assert calls_per_side(ref, cand, 5, 0.0, SETTINGS) == 100


def test_a_faster_candidate_gets_the_calls_of_the_mean_of_both_sides():
    ref, cand = _block([10.0] * 5), _block([2.0] * 5)
    assert calls_per_side(ref, cand, 5, 0.0, SETTINGS) == 167  # 1 s / 6 ms


def test_input_draws_count_in_a_call():
    ref, cand = _block([10.0] * 5), _block([10.0] * 5)
    assert calls_per_side(ref, cand, 5, 0.010, SETTINGS) == 50


def test_a_candidate_that_reports_slow_calls_gets_no_fewer_calls_than_its_wall_time_gives():
    """Its own clock says 1 s a call; the judge's wall clock saw 10 ms (less the reference's
    overhead): it gets the calls of 10 ms."""
    ref = _block([10.0] * 5)
    liar = Block({0: [1000.0] * 5}, 5 * 11.0)
    assert calls_per_side(ref, liar, 5, 0.0, SETTINGS) == 100


def test_a_candidate_slow_in_its_warm_up_cuts_the_calls_by_half_at_most():
    """Slow for real in the warm-up (its wall time agrees), fast afterwards: the blocks are sized
    as if its calls took three of the reference's, half the calls the reference alone would get."""
    ref = _block([10.0] * 5)
    assert calls_per_side(ref, _block([1000.0] * 5), 5, 0.0, SETTINGS) == 50


def test_a_candidate_that_reports_no_time_is_bounded_by_max_iters():
    ref, cand = _block([0.5] * 5), Block({0: [0.0] * 5}, 5.0)
    assert calls_per_side(ref, cand, 5, 0.0, SETTINGS) == 500


def test_the_slowest_rank_sizes_the_blocks():
    ref = Block({0: [10.0] * 5, 1: [30.0] * 5}, 160.0)
    cand = Block({0: [10.0] * 5, 1: [30.0] * 5}, 160.0)
    assert calls_per_side(ref, cand, 5, 0.0, SETTINGS) == 34


def test_min_iters_holds_for_calls_longer_than_the_budget():
    ref, cand = _block([2000.0] * 5), _block([2000.0] * 5)
    assert calls_per_side(ref, cand, 5, 0.0, SETTINGS) == 5


@pytest.mark.parametrize("evaluator", ["cpu"], indirect=True)
def test_an_evaluation_of_slow_calls_times_what_its_budget_holds(evaluator):
    """The shared fast settings give 0.2 s a side: for calls of ~10 ms, about 20 (a few a block
    over eight rounds), not the 100 of ``max_iters`` (the old warm-up gave 64)."""
    workload = HERE / "workloads" / "steady_call.py"
    copy = workload.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"  # its own model: the same calls
    result = evaluator.evaluate(workload, candidate_source=copy, world_size=2)
    assert result.status == "correct", result.summary()
    timing = result.timing
    iters = {t.iters for t in [*timing.reference, *timing.candidate]}
    assert len(iters) == 1, timing
    calls = iters.pop()
    # What the budget holds at the calls' measured medians (warm-up and timed calls run alike):
    # within a factor of two, for the noise of a warm-up of five calls on a loaded machine.
    wanted = 200.0 / ((timing.reference_ms + timing.candidate_ms) / 2)
    assert calls < 100 and wanted / 2 <= calls <= 2 * wanted + 8, (calls, wanted, timing)


def test_long_calls_keep_every_round():
    # 100 calls of 10 ms a side: 1 s a side, far above 8 blocks of 50 ms.
    assert round_count(100, 10.0, 0.0, SETTINGS) == 8


def test_blocks_of_sub_millisecond_calls_come_in_fewer_rounds():
    # 100 calls of 0.15 ms (+0.15 ms to draw each): 30 ms a side, under one 50 ms block; two
    # rounds stay, one of each order.
    assert round_count(100, 0.15, 0.00015, SETTINGS) == 2
    # 500 calls of 0.5 ms: 250 ms a side -> five blocks' worth, made even.
    assert round_count(500, 0.5, 0.0, SETTINGS) == 4


def test_rounds_never_exceed_the_calls_or_the_setting():
    assert round_count(1, 0.01, 0.0, SETTINGS) == 1
    # Few long calls: one a block, as many rounds as calls (an even count would time more calls:
    # five of a 1.1 s KernelBench reference on the CPU became eight in four rounds of two).
    assert round_count(3, 100.0, 0.0, SETTINGS) == 3
    assert round_count(5, 1100.0, 0.0, SETTINGS) == 5
    one = EvalSettings.for_device("cpu", timing_rounds=1)
    assert round_count(100, 10.0, 0.0, one) == 1
    # Off: every round the setting asks for.
    off = EvalSettings.for_device("cpu", timing_min_block_s=0.0)
    assert round_count(100, 0.01, 0.0, off) == 8
