"""A batch's aggregates over its workloads, the one definition that ``kloom bench report``, the
batch resource's summary (from job rows) and the dashboard's report (from report rows) all use:
correctness, KernelBench's fast_p, the geometric-mean speedup, the median fraction of the
roofline floor, the model cost, the GPU time and the tokens."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from agents.records import FINISHED_STATES
from kloom.speedup import FASTER, NO_CHANGE, reported_speedup

from .rows import ReportRow

FAST_P = (1.0, 1.2, 1.5, 2.0)


def fast_p(rows: list[ReportRow], p: float, measurable_only: bool = True) -> float:
    """KernelBench's fast_p: the share of *all* workloads that are correct and faster than p x
    baseline. By default only measurable wins count (the job's outcome: a kernel other than the
    reference's own copy, whose interval lies above 1.0); ``measurable_only=False`` counts every
    measured speedup above p, as the literature does. The reference's own copy measures noise,
    never a speedup above 1.0 (``reported_speedup``)."""
    if not rows:
        return 0.0

    def counts(r: ReportRow) -> bool:
        speedup = reported_speedup(r.measured_speedup, r.strategy) or 0.0
        if not r.correct or speedup <= p:
            return False
        return not measurable_only or r.outcome == FASTER

    return sum(1 for r in rows if counts(r)) / len(rows)


def geomean(values: list[float | None]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


@dataclass
class BatchAggregate:
    workloads: int
    finished: int
    correct: int
    #: KernelBench's fast_p over all workloads, by threshold (``"1.0"``, ``"1.2"``, ...).
    fast_p: dict[str, float]
    geomean_speedup: float | None
    median_fraction_of_floor: float | None
    #: The model cost of the jobs whose cost is known, and the total (None once any is unknown).
    known_cost_usd: float = 0.0
    total_cost_usd: float | None = None
    by_state: dict[str, int] = field(default_factory=dict)
    #: fast_1 as the literature counts it (any measured speedup above 1.0, noise included);
    #: None in reports written before it was counted.
    fast_1_any: float | None = None
    faster_kernel_found: int | None = None
    no_measurable_change: int | None = None
    total_gpu_hours: float = 0.0
    total_tokens: int = 0

    @property
    def correctness_rate(self) -> float:
        return self.correct / self.workloads if self.workloads else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``aggregate`` of ``report.json``, key for key (a report written before a count
        existed keeps it out)."""
        data = {
            "workloads": self.workloads,
            "finished": self.finished,
            "correct": self.correct,
            "correctness_rate": self.correctness_rate,
            "fast_p": self.fast_p,
            "fast_1_any": self.fast_1_any,
            "faster_kernel_found": self.faster_kernel_found,
            "no_measurable_change": self.no_measurable_change,
            "geomean_speedup": self.geomean_speedup,
            "median_fraction_of_floor": self.median_fraction_of_floor,
            "total_gpu_hours": self.total_gpu_hours,
            "total_llm_cost_usd": self.total_cost_usd,
            "total_tokens": self.total_tokens,
        }
        later = ("fast_1_any", "faster_kernel_found", "no_measurable_change")
        return {k: v for k, v in data.items() if k not in later or v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BatchAggregate":
        """A stored report's aggregate (which holds neither the states nor the known cost)."""
        return cls(
            workloads=data["workloads"],
            finished=data["finished"],
            correct=data["correct"],
            fast_p=dict(data["fast_p"]),
            geomean_speedup=data["geomean_speedup"],
            median_fraction_of_floor=data["median_fraction_of_floor"],
            total_cost_usd=data.get("total_llm_cost_usd"),
            known_cost_usd=data.get("total_llm_cost_usd") or 0.0,
            fast_1_any=data.get("fast_1_any"),
            faster_kernel_found=data.get("faster_kernel_found"),
            no_measurable_change=data.get("no_measurable_change"),
            total_gpu_hours=data.get("total_gpu_hours", 0.0),
            total_tokens=data.get("total_tokens", 0),
        )


def aggregate(rows: list[ReportRow], *, measurable_only: bool = True) -> BatchAggregate:
    """The aggregates of rows, one per workload of the batch. ``measurable_only``: fast_p counts
    measurable wins only (rows that know their job's outcome: ``fast_p``)."""
    by_state: dict[str, int] = {}
    for row in rows:
        by_state[row.state] = by_state.get(row.state, 0) + 1
    correct = [r for r in rows if r.correct]
    fractions = [r.fraction_of_floor for r in correct if r.fraction_of_floor]
    costs = [r.cost_usd for r in rows]
    return BatchAggregate(
        workloads=len(rows),
        finished=sum(1 for r in rows if r.state in FINISHED_STATES),
        by_state=by_state,
        correct=len(correct),
        fast_p={str(p): fast_p(rows, p, measurable_only) for p in FAST_P},
        fast_1_any=fast_p(rows, 1.0, measurable_only=False),
        faster_kernel_found=sum(1 for r in rows if r.outcome == FASTER),
        no_measurable_change=sum(1 for r in rows if r.verdict == NO_CHANGE),
        geomean_speedup=geomean([r.speedup for r in correct]),
        median_fraction_of_floor=statistics.median(fractions) if fractions else None,
        known_cost_usd=sum(c for c in costs if c is not None),
        total_cost_usd=None if any(c is None for c in costs) else sum(costs),
        total_gpu_hours=sum(r.gpu_seconds for r in rows) / 3600,
        total_tokens=sum(r.tokens for r in rows),
    )
