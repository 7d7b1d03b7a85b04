"""One batch aggregate for the batch resource's summary (job rows) and the dashboard's report (report rows)."""

from __future__ import annotations

import pytest

from kloom.batch.aggregate import aggregate
from services.api.routes.batches import job_row, summarize
from services.db.models import Job


def _job(state: str, speedup: float | None, fraction: float | None, cost: float | None) -> Job:
    return Job(state=state, best_step_index=None if speedup is None else 0, best_speedup=speedup, best_fraction_of_floor=fraction, cost_usd=cost)


JOBS = [_job("succeeded", 2.0, 0.8, 0.5), _job("succeeded", 0.5, 0.2, None), _job("failed", None, None, 0.25), _job("running", None, None, 0.0)]


def test_the_aggregate_of_a_batchs_jobs():
    # Job rows hold no interval: their fast_p counts every correct kernel faster than p, as the summary does.
    agg = aggregate([job_row(j) for j in JOBS], measurable_only=False)
    assert (agg.workloads, agg.finished, agg.correct, agg.correctness_rate) == (4, 3, 2, 0.5)
    assert agg.by_state == {"succeeded": 2, "failed": 1, "running": 1}
    assert agg.fast_p["1.0"] == 0.25 and agg.fast_p["2.0"] == 0.0
    assert agg.geomean_speedup == pytest.approx(1.0)
    assert agg.median_fraction_of_floor == pytest.approx(0.5)
    assert (agg.known_cost_usd, agg.total_cost_usd) == (0.75, None)


def test_the_batch_summary_is_the_aggregate():
    summary = summarize(JOBS)
    assert (summary.total, summary.finished, summary.correct, summary.fast_1, summary.cost_usd) == (4, 3, 2, 0.25, 0.75)
    assert summary.geomean_speedup == pytest.approx(1.0) and summary.median_fraction_of_floor == pytest.approx(0.5)
    empty = summarize([])
    assert (empty.total, empty.fast_1, empty.geomean_speedup, empty.median_fraction_of_floor) == (0, None, None, None)
