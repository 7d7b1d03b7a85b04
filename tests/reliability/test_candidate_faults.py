"""Candidates that misbehave, driven through the real optimization loop (``agents.loop.run_job``)
with a scripted planner and coder: each is stopped within its time limit, recorded with the right
status, and the next candidate of the same job runs normally on a rebuilt pool."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits
from reliability_helpers import ADVERSARIAL, CORRECT, EVAL_WORKLOADS, ScriptedCoder, ScriptedPlanner, leftover_pool_cgroups
from services.worker.evaluator import EvalSettings, Evaluator

WORKLOAD = EVAL_WORKLOADS / "linear_allreduce.py"
#: The time limit of one call into the ranks (the first trial gets the load limit, set equal).
CALL_LIMIT_S = 8.0
#: What a fault may add on top of its limit: killing the pool and noticing it.
OVERHEAD_S = 12.0
MEMORY_LIMIT = 1536 << 20

EXHAUSTS_MEMORY = '''
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        hoard = [torch.ones(1 << 28, dtype=torch.uint8) for _ in range(64)]  # 16 GiB
        y = torch.mm(x, self.weight) + hoard[-1][0]
        dist.all_reduce(y)
        return y
'''

#: Forks a process that leaves the rank's process group and outlives the call. The static checker
#: rejects it (``torch.os``); were it to run, the rank's child-process check rejects it and the
#: pool's cgroup kills the child (test_sandbox shows that with a forking workload).
FORKS = '''
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        if torch.os.fork() == 0:
            torch.os.setsid()
            torch.os.execv("/bin/sleep", ["sleep", "%d"])
            torch.os._exit(0)
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
'''
#: The sleeping children are found by this argument.
MARKER_SECONDS = 617

#: name -> (source, statuses that are right for it)
FAULTS = {
    "deadlocks_in_a_collective": ((ADVERSARIAL / "deadlock.py").read_text(), {"timeout"}),
    "spins_forever": ((ADVERSARIAL / "spins_forever.py").read_text(), {"timeout"}),
    "segfaults": ((ADVERSARIAL / "segfaults.py").read_text(), {"crashed", "runtime_error"}),
    "exhausts_memory": (EXHAUSTS_MEMORY, {"runtime_error", "crashed"}),
    "forks_processes": (FORKS % MARKER_SECONDS, {"rejected"}),
}


def _sleepers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == f"sleep\0{MARKER_SECONDS}\0".encode():
                found.append(int(entry))
    return found


@pytest.mark.slow
def test_misbehaving_candidates_are_stopped_and_the_next_one_runs(tmp_path, record_property):
    names, sources = [], {"correct": CORRECT.read_text()}
    for fault, (source, _) in FAULTS.items():
        sources[fault] = source
        names += [fault, "correct"]
    settings = EvalSettings.for_device(
        "cpu", shapes="ci", call_timeout_s=CALL_LIMIT_S, load_timeout_s=CALL_LIMIT_S, timing_budget_s=0.1,
        min_iters=3, max_iters=20, warmup_iters=1, trials=2, rank_memory_bytes=MEMORY_LIMIT,
    )
    spec = JobSpec(workload=str(WORKLOAD), world_size=2, limits=Limits(max_iters=len(names)), use_kb=False)
    sink = FileSink(tmp_path / "job")
    cgroups_before = set(leftover_pool_cgroups())  # other tests' pools in this process are not ours
    with Evaluator("cpu", settings) as evaluator:
        trajectory = run_job(spec, sink, evaluator=evaluator, planner=ScriptedPlanner(names), coder=ScriptedCoder(sources))
        starts = evaluator.pools[2].reference.starts

    saved = json.loads(sink.trajectory_path.read_text())
    assert [s["plan"]["strategy"] for s in saved["steps"]] == names, "every candidate was recorded once, in order"
    for step in trajectory.steps:
        name = step.plan.strategy
        if name == "correct":
            assert step.status == "correct", f"step {step.index} after a fault: {step.error}"
            continue
        expected = FAULTS[name][1]
        record_property(name, f"{step.status} in {step.seconds['verify']:.1f} s: {step.error[:120]}")
        assert step.status in expected, f"{name}: {step.status} ({step.error})"
        assert step.error, f"{name} is recorded without its reason"
        assert step.seconds["verify"] < CALL_LIMIT_S + OVERHEAD_S, f"{name} took {step.seconds['verify']:.1f} s"
    assert trajectory.state == "succeeded" and trajectory.best_step.plan.strategy == "correct"
    # Every candidate gets fresh ranks; the reference's pool outlives the candidates' faults.
    assert starts == 1, starts
    assert not _sleepers(), "the forking candidate's children outlived its pool"
    assert not set(leftover_pool_cgroups()) - cgroups_before
