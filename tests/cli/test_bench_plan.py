"""What a CLI batch is (kloom.batch.plan): the workloads it runs, those it leaves out and why, and
the job each becomes."""

from __future__ import annotations

import ast
from pathlib import Path

import kloom.batch.plan as plan
from agents.records import JobSpec, Limits
from kloom.batch.plan import BatchSettings, plan_batch
from kloom.suite import resolve_suite


def test_a_batch_runs_the_named_workloads_and_says_what_it_leaves_out():
    settings = BatchSettings(suite=str(resolve_suite("kloom")), world_size=2, workloads=["all_reduce_small", "no_such_workload"])
    chosen, left_out = plan_batch(settings)
    assert [info.name for info in chosen] == ["all_reduce_small"]
    assert left_out == [("no_such_workload", "no such workload in the suite")]


def test_each_workload_becomes_a_job_of_the_batchs_settings():
    settings = BatchSettings(suite="kloom", world_size=4, device="cuda", strategist="openai/x", max_iters=3, budget_usd=1.5,
                             max_wall_s_per_job=60.0, use_kb=False, profile="none")
    spec = settings.job_spec("/w/a.py", job_id="batch:b:a", shapes="gpu")
    assert spec == JobSpec(workload="/w/a.py", world_size=4, device="cuda", shapes="gpu", strategist="openai/x",
                           limits=Limits(max_iters=3, max_wall_s=60.0, budget_usd=1.5), job_id="batch:b:a", use_kb=False, profile="none")


def test_planning_a_batch_imports_nothing_heavy():
    """``kloom bench run`` plans before it loads the runner (torch, the evaluator, the loop)."""
    imported = {n.module for n in ast.walk(ast.parse(Path(plan.__file__).read_text())) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "dataclasses", "agents.records", "kloom.suite"}
