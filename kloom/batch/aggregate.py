"""A batch's aggregates over its workloads, the one definition that ``kloom bench report``, the
batch resource's summary (from job rows) and the dashboard's report (from report rows) all use:
correctness, KernelBench's fast_p, the geometric-mean speedup, the median fraction of the
roofline floor, the model cost."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from agents.records import FINISHED_STATES

FAST_P = (1.0, 1.2, 1.5, 2.0)


def fast_p(rows: list[dict], p: float, measurable_only: bool = True) -> float:
    """KernelBench's fast_p: the share of *all* workloads that are correct and faster than p x
    baseline. By default only measurable wins count (the 95% interval of the speedup lies above
    1.0); ``measurable_only=False`` counts every measured speedup above p, as the literature does."""
    if not rows:
        return 0.0

    def counts(r: dict) -> bool:
        speedup = r.get("measured_speedup", r["speedup"]) or 0.0
        # A measurable win: the job's outcome (a kernel other than the reference's own copy, whose
        # interval lies above 1.0). Rows of reports written before outcomes existed count as before.
        if not r["correct"] or speedup <= p or r.get("strategy") == "reference_copy" and p >= 1.0:
            return False  # the reference's own copy measures noise, never a speedup
        return not measurable_only or r.get("outcome", "faster kernel found") == "faster kernel found"

    return sum(1 for r in rows if counts(r)) / len(rows)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


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


def aggregate(rows: list[dict[str, Any]]) -> BatchAggregate:
    """The aggregates of rows, one per workload of the batch: report rows (``report.report_row``)
    or anything with their ``state``, ``correct``, ``speedup``, ``fraction_of_floor`` and ``cost_usd``."""
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
