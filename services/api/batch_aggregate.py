"""A batch's aggregates over its jobs, one definition for the batch resource (``routes/batches.py``:
its summary, from the job rows) and the dashboard's report (``routes/dashboard_data.py``: from the
report rows), with ``kloom.batch.report``'s fast_p and geometric mean so that both agree with
``kloom bench``."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from agents.records import FINISHED_STATES
from kloom.batch.report import FAST_P, fast_p, geomean
from services.db.models import Job


@dataclass
class BatchAggregate:
    workloads: int
    finished: int
    by_state: dict[str, int]
    correct: int
    #: KernelBench's fast_p over all workloads, by threshold (``"1.0"``, ``"1.2"``, ...).
    fast_p: dict[str, float]
    geomean_speedup: float | None
    median_fraction_of_floor: float | None
    #: The model cost of the jobs whose cost is known, and the total (None once any is unknown).
    known_cost_usd: float
    total_cost_usd: float | None

    @property
    def correctness_rate(self) -> float:
        return self.correct / self.workloads if self.workloads else 0.0


def job_row(job: Job) -> dict[str, Any]:
    """The fields of a report row (``kloom.batch.report.report_row``) that a job row holds."""
    return {
        "state": job.state,
        "correct": job.best_step_index is not None,
        "speedup": job.best_speedup,
        "fraction_of_floor": job.best_fraction_of_floor,
        "cost_usd": job.cost_usd,
    }


def aggregate(rows: list[dict[str, Any]]) -> BatchAggregate:
    """The aggregates of report rows (or ``job_row``s): one per workload of the batch."""
    by_state: dict[str, int] = {}
    for row in rows:
        by_state[row["state"]] = by_state.get(row["state"], 0) + 1
    correct = [r for r in rows if r["correct"]]
    fractions = [r["fraction_of_floor"] for r in correct if r["fraction_of_floor"]]
    costs = [r["cost_usd"] for r in rows]
    return BatchAggregate(
        workloads=len(rows),
        finished=sum(1 for r in rows if r["state"] in FINISHED_STATES),
        by_state=by_state,
        correct=len(correct),
        fast_p={str(p): fast_p(rows, p) for p in FAST_P},
        geomean_speedup=geomean([r["speedup"] for r in correct]),
        median_fraction_of_floor=statistics.median(fractions) if fractions else None,
        known_cost_usd=sum(c for c in costs if c is not None),
        total_cost_usd=None if any(c is None for c in costs) else sum(costs),
    )
