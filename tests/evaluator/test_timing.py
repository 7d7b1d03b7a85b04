"""The timing protocol inside a rank: a comparison times both functions call by call, in
alternating order, so that a slow spell of the machine weighs on both alike."""

from __future__ import annotations

import time

import torch

from services.worker.evaluator.timing import Timer


def test_a_pair_is_timed_interleaved_in_alternating_order():
    calls: list[str] = []
    timer = Timer(torch.device("cpu"), flush_bytes=1024)
    a, b = timer.measure_pair(
        (lambda: calls.append("a"), None), (lambda: calls.append("b"), None), warmup=1, min_iters=6, max_iters=6, budget_s=0.0
    )
    assert len(a) == len(b) == 6
    timed = calls[2:]  # after one warm-up call of each
    assert timed == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a"]


def _slowing_down_after(n_calls: int):
    """The same work every call, but the machine is four times slower after ``n_calls`` calls.
    The work waits rather than computes, so that other load on the test machine (CI shares its
    two cores) does not drown the slowdown in noise."""
    count = {"calls": 0}

    def same_work() -> None:
        count["calls"] += 1
        time.sleep(0.002 if count["calls"] <= n_calls else 0.008)

    return same_work


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def test_a_slow_spell_weighs_on_both_sides_of_a_pair():
    """Two functions doing the same work while the machine slows down halfway: timed one after
    the other, the first looks several times faster; interleaved, they match."""
    timer = Timer(torch.device("cpu"), flush_bytes=1024)
    fn = _slowing_down_after(41)  # one warm-up and 40 timed calls at full speed
    first = timer.measure(fn, restore=None, warmup=1, min_iters=40, max_iters=40, budget_s=0.0)
    second = timer.measure(fn, restore=None, warmup=1, min_iters=40, max_iters=40, budget_s=0.0)
    assert _median(second) / _median(first) > 2

    fn = _slowing_down_after(42)  # a warm-up call of each, then 20 pairs at full speed
    a, b = timer.measure_pair((fn, None), (fn, None), warmup=1, min_iters=40, max_iters=40, budget_s=0.0)
    assert 0.6 < _median(b) / _median(a) < 1.6


def test_restore_runs_before_each_call_of_its_own_function():
    timer = Timer(torch.device("cpu"), flush_bytes=1024)
    seen: list[str] = []
    timer.measure_pair(
        (lambda: seen.append("a"), lambda: seen.append("restore a")),
        (lambda: seen.append("b"), None),
        warmup=1,
        min_iters=2,
        max_iters=2,
        budget_s=0.0,
    )
    assert all(seen[i - 1] == "restore a" for i, s in enumerate(seen) if s == "a")
