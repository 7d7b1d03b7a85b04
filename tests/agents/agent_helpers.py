"""Helpers of the strategist tests (imported by name: conftest.py puts this folder on the path)."""

from __future__ import annotations

from pathlib import Path

from agents.limits import Budget
from agents.records import JobSpec, Limits
from agents.roles import PlanningContext


def planning_context(path: Path, analysis: dict) -> PlanningContext:
    """A fresh job's context for the workload at ``path`` (world size 2, four candidates)."""
    spec = JobSpec(workload=str(path), world_size=2, limits=Limits(max_iters=4))
    return PlanningContext(
        spec=spec, workload_source=path.read_text(), workload_name="x", analysis=analysis, baseline=None, history=[], budget=Budget(spec.limits)
    )
