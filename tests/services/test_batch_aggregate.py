"""One batch aggregate for the batch resource's summary (job rows) and the dashboard's report (report rows)."""

from __future__ import annotations

import pytest

from kloom.batch.aggregate import aggregate
from kloom.speedup import FASTER, NO_FASTER
from services.api.routes.batches import job_row, summarize
from services.db.models import Job


def _job(state: str, speedup: float | None, fraction: float | None, cost: float | None, outcome: str = "") -> Job:
    trajectory = None
    if outcome:
        trajectory = {"outcome": outcome, "result_speedup": speedup if outcome == FASTER else 1.0}
    return Job(state=state, best_step_index=None if speedup is None else 0, best_speedup=speedup, best_fraction_of_floor=fraction,
               cost_usd=cost, trajectory=trajectory)


# A measurable win; a kernel measured 1.1x within the noise (the reference stands); a slower one;
# a failed job; a running one.
JOBS = [
    _job("succeeded", 2.0, 0.8, 0.5, FASTER),
    _job("succeeded", 1.1, 0.3, 0.0, NO_FASTER),
    _job("succeeded", 0.5, 0.2, None, NO_FASTER),
    _job("failed", None, None, 0.25),
    _job("running", None, None, 0.0),
]


def test_the_aggregate_of_a_batchs_jobs():
    agg = aggregate([job_row(j) for j in JOBS])
    assert (agg.workloads, agg.finished, agg.correct, agg.correctness_rate) == (5, 4, 3, 0.6)
    assert agg.by_state == {"succeeded": 3, "failed": 1, "running": 1}
    # fast_p counts measurable wins; fast_1 as the literature counts it also takes the 1.1x.
    assert agg.fast_p["1.0"] == pytest.approx(0.2) and agg.fast_1_any == pytest.approx(0.4) and agg.fast_p["2.0"] == 0.0
    assert agg.faster_kernel_found == 1
    # The result speedups: 2.0, and 1.0 twice where the reference stands (not 1.1 and 0.5).
    assert agg.geomean_speedup == pytest.approx(2.0 ** (1 / 3))
    assert agg.median_fraction_of_floor == pytest.approx(0.3)
    assert (agg.known_cost_usd, agg.total_cost_usd) == (0.75, None)


def test_the_batch_summary_counts_as_the_cli_report_does():
    """The batch resource's summary and `kloom bench report` count the same rows the same way."""
    summary = summarize(JOBS)
    assert (summary.total, summary.finished, summary.correct, summary.cost_usd) == (5, 4, 3, 0.75)
    assert summary.fast_1 == pytest.approx(0.2) and summary.fast_1_any == pytest.approx(0.4) and summary.faster_kernel_found == 1
    assert summary.geomean_speedup == pytest.approx(2.0 ** (1 / 3)) and summary.median_fraction_of_floor == pytest.approx(0.3)
    empty = summarize([])
    assert (empty.total, empty.fast_1, empty.fast_1_any, empty.geomean_speedup, empty.median_fraction_of_floor) == (0, None, None, None, None)


def test_a_job_row_from_before_outcomes_were_recorded_is_no_measurable_win():
    row = job_row(_job("succeeded", 1.7, None, 0.0))
    assert row.outcome == "" and row.speedup == 1.7
    assert summarize([_job("succeeded", 1.7, None, 0.0)]).fast_1 == 0.0
