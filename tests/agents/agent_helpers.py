"""Helpers of the strategist tests (imported by name: conftest.py puts this folder on the path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from agents.analysis import Analysis
from agents.limits import Budget
from agents.strategist.embed import runtime_file
from agents.records import JobSpec, Limits
from agents.roles import PlanningContext


def planning_context(path: Path, analysis: Analysis) -> PlanningContext:
    """A fresh job's context for the workload at ``path`` (world size 2, four candidates)."""
    spec = JobSpec(workload=str(path), world_size=2, limits=Limits(max_iters=4))
    return PlanningContext(
        spec=spec, workload_source=path.read_text(), workload_name="x", analysis=analysis, baseline=None, history=[], budget=Budget(spec.limits)
    )


def fresh_runtime(module: str) -> dict:
    """A new instance of a strategy's runtime module (``agents.strategist.<strategy>.runtime``),
    as a namespace: each test gets its own module state (counters, caches), as each candidate
    does, and may replace the module's globals without touching other tests."""
    spec = importlib.util.spec_from_file_location(f"_fresh_{module.replace('.', '_')}", runtime_file(module))
    instance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(instance)
    return vars(instance)
