"""Which statistic a speedup divides (``kloom.speedup.judged_times``): the sides' medians, unless
the candidate's calls are skewed past the reference's, and then their means, which no shifting of
time between calls can move. A candidate that does a block's work in a few calls had a median of
almost nothing (credited 295x on the CPU: ``tests/evaluator/adversarial/front_loads_block.py``,
caught end to end in ``tests/evaluator/test_staged_rounds.py``)."""

from __future__ import annotations

import random
import statistics

from kloom.evaluation import TimeStats
from kloom.speedup import excess_skew, judged_times, paired_interval


def _stats(samples: list[float]) -> TimeStats:
    return TimeStats.from_samples(samples)


def _noisy(center: float, n: int, seed: int, tail: float = 0.05) -> list[float]:
    """Calls within 10% of ``center``, and a ``tail`` of them twenty times slower (the long tail
    a shared CPU gives them)."""
    rng = random.Random(seed)
    return [center * (20.0 if rng.random() < tail else 1.0 + rng.uniform(-0.1, 0.1)) for _ in range(n)]


def test_alike_calls_keep_the_median():
    ref, cand = [_stats(_noisy(2.0, 60, 1))], [_stats(_noisy(1.0, 60, 2))]
    ref_ms, cand_ms, statistic = judged_times(ref, cand, 0.5)
    assert statistic == "median" and (ref_ms, cand_ms) == (ref[0].median_ms, cand[0].median_ms)


def test_a_front_loaded_block_is_judged_by_its_mean():
    # The same total time as an honest 1 ms call, done in one call of every 25.
    front = ([25.0] + [0.01] * 24) * 4
    ref, cand = [_stats(_noisy(1.0, 100, 3, tail=0.0))], [_stats(front)]
    assert cand[0].median_ms < 0.02  # the median alone: a speedup of ~100x
    ref_ms, cand_ms, statistic = judged_times(ref, cand, 0.5)
    assert statistic == "mean" and cand_ms == statistics.fmean(front) and ref_ms / cand_ms < 2.0
    assert excess_skew(ref, cand) > 8.0  # past the judge's rejection bound too


def test_what_shaping_can_gain_is_bounded_by_the_tolerance():
    """Calls made lopsided just under the bound: the median ratio gains at most (1 + tolerance)
    over the mean ratio."""
    ref = [_stats([1.0] * 50)]
    for light in (0.9, 0.7, 0.6, 0.5, 0.3):
        heavy = (50 - 26 * light) / 24  # 26 light calls and 24 heavy: the mean stays 1 ms
        cand = [_stats([light] * 26 + [heavy] * 24)]
        ref_ms, cand_ms, _ = judged_times(ref, cand, 0.5)
        assert ref_ms / cand_ms <= 1.5 + 1e-9, (light, ref_ms / cand_ms)


def test_the_interval_follows_the_statistic():
    front = ([25.0] + [0.01] * 24) * 4
    ref = _noisy(1.0, 100, 4, tail=0.0)
    median_low, _ = paired_interval([ref], [front])
    _, mean_high = paired_interval([ref], [front], statistic="mean")
    assert median_low > 20 and mean_high < 5  # wide: a resample may miss most of the few heavy calls
