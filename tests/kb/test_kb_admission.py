"""The knowledge base keeps only what the judge measured: a kernel whose record does not hold
together (forged numbers, another code's evaluation, a failed trial, a flag a person should look
at), or a job whose best step is not a judged win, adds nothing; each kept kernel records the
evaluator version that judged it; ``kloom kb verify`` judges kept kernels again with the real
evaluator and drops those that no longer pass."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from sqlalchemy import select
from tests.kb.kb_trajectories import Tried, Workload, trajectory
from typer.testing import CliRunner

from kb import ingest as kb_ingest
from kb.models import KBKernel
from kb.verify import verify
from kloom.cli import app

WORKLOAD = Workload()


def _kernels(db) -> list[KBKernel]:
    with db.sessions() as s:
        return list(s.scalars(select(KBKernel).order_by(KBKernel.id)))


def _ingest(db, traj) -> kb_ingest.IngestReport:
    with db.sessions() as s:
        return kb_ingest.ingest(s, traj)


def test_an_honest_win_is_kept_with_its_evaluator_version(sqlite_db):
    traj = trajectory("job-honest", WORKLOAD, [Tried("overlap_chunks", speedup=1.8)])
    traj.steps[0].evaluation.evaluator_version = "2"
    assert _ingest(sqlite_db, traj).kernels == 1
    [kernel] = _kernels(sqlite_db)
    assert kernel.evaluator_version == "2" and kernel.verified_at is None
    # A record written before evaluations carried a version was judged by version 1.
    old = trajectory("job-old", WORKLOAD, [Tried("cuda_graph", speedup=1.5)])
    _ingest(sqlite_db, old)
    assert [k.evaluator_version for k in _kernels(sqlite_db)] == ["2", "1"]


def _forge(step, how: str) -> None:
    evaluation = step.evaluation
    if how == "other code":  # a record of another candidate, pasted onto this code
        step.candidate_code += "# something else\n"
    elif how == "speedup":  # numbers that are not the timings' own
        evaluation.timing.speedup = 4.95
    elif how == "infinite":
        evaluation.timing.candidate_ms = 0.0
        evaluation.timing.speedup = float("inf")
    elif how == "failed trial":
        evaluation.trials[2].ranks[1].ok = False
    elif how == "no trials":
        evaluation.trials = []
    elif how == "too fast":
        evaluation.flags = ["suspiciously_fast: 12.0x over the reference"]
    elif how == "other workload":
        evaluation.workload_sha256 = hashlib.sha256(b"another workload").hexdigest()
    elif how == "status":
        evaluation.status = "incorrect"
    elif how == "reference slowed":
        # Beside the candidate the reference took twice as long as alone: alone, no win is left.
        timing = evaluation.timing
        timing.reference_alone = [dataclasses.replace(t, median_ms=t.median_ms / 1.8) for t in timing.reference]
        evaluation.flags = ["reference_timing_drift: 1.1 ms alone before the candidate, 2 ms beside it"]


@pytest.mark.parametrize("how", ["other code", "speedup", "infinite", "failed trial", "no trials", "too fast", "other workload", "status", "reference slowed"])
def test_a_record_that_does_not_hold_together_adds_no_kernel(sqlite_db, how):
    traj = trajectory("job-forged", WORKLOAD, [Tried("overlap_chunks", speedup=1.8)])
    _forge(traj.steps[0], how)
    report = _ingest(sqlite_db, traj)
    assert report.ingested and report.kernels == 0 and _kernels(sqlite_db) == []


def test_a_job_whose_best_step_is_not_a_judged_win_adds_no_kernel(sqlite_db):
    # The best step (2.6x) carries a forged record; the honest 1.4x win of the same job is not
    # kept either: the job's result is in doubt.
    traj = trajectory("job-mixed", WORKLOAD, [Tried("cuda_graph", speedup=1.4), Tried("overlap_chunks", speedup=2.6)])
    traj.steps[1].evaluation.timing.speedup = 2.6
    traj.steps[1].evaluation.timing.reference_ms = 1.0  # 1.0 / (2.0 / 2.6) is not 2.6
    assert _ingest(sqlite_db, traj).kernels == 0
    # A job whose best is within the noise keeps nothing, as before.
    assert _ingest(sqlite_db, trajectory("job-noise", WORKLOAD, [Tried("cuda_graph", speedup=1.01)])).kernels == 0


VERIFY_WORKLOAD = '''
import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]


class Model(nn.Module):
    """A matmul done three times over, and averaged (a kernel does it once)."""

    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5)

    def forward(self, x):
        y = sum(x @ self.weight for _ in range(3)) / 3
        dist.all_reduce(y)
        return y


def get_init_inputs():
    return [384]


def get_inputs():
    return [torch.randn(512, 384)]
'''

GOOD_KERNEL = '''
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5)

    def forward(self, x):
        y = x @ self.weight
        dist.all_reduce(y)
        return y
'''

#: What an in-process forgery left in the knowledge base: wrong results, reported as a win.
WRONG_KERNEL = GOOD_KERNEL.replace("y = x @ self.weight", "y = (x @ self.weight) * 1.05")


def _kept(db, job_id: str, code: str, speedup: float) -> str:
    w = Workload(name="matmul_thrice", family="data_parallel", world_size=2, source=VERIFY_WORKLOAD)
    traj = trajectory(job_id, w, [Tried("collective_substitution", speedup=speedup)], device="cpu", gpu="")
    step = traj.steps[0]
    step.candidate_code = code
    step.candidate_sha256 = step.evaluation.candidate_sha256 = hashlib.sha256(code.encode()).hexdigest()
    with db.sessions() as s:
        kb_ingest.ingest(s, traj, workload_source=VERIFY_WORKLOAD)
        return s.scalars(select(KBKernel).where(KBKernel.job_id == job_id)).one().public_id


@pytest.mark.slow
def test_verify_keeps_what_still_passes_and_drops_the_rest(sqlite_db, monkeypatch):
    from services.worker.evaluator import EvalSettings, Evaluator

    good = _kept(sqlite_db, "job-good", GOOD_KERNEL, 2.5)
    wrong = _kept(sqlite_db, "job-wrong", WRONG_KERNEL, 4.9)
    settings = EvalSettings.for_device("cpu", shapes="ci", trials=2, timing_budget_s=0.3, min_iters=5, call_timeout_s=60.0)
    with Evaluator("cpu", settings) as evaluator:
        dry = verify(sqlite_db.sessions, evaluator, device="cpu", dry_run=True)
        assert {v.kernel_id: v.action for v in dry} == {good: "kept", wrong: "would drop"}
        assert len(_kernels(sqlite_db)) == 2 and all(k.verified_at is None for k in _kernels(sqlite_db))
        verdicts = {v.kernel_id: v for v in verify(sqlite_db.sessions, evaluator, device="cpu", world_size=2)}
    assert verdicts[wrong].action == "dropped" and verdicts[wrong].status == "incorrect", verdicts[wrong]
    assert verdicts[good].action == "kept" and verdicts[good].speedup > 1.02, verdicts[good]
    [kernel] = _kernels(sqlite_db)
    assert kernel.public_id == good and kernel.verified_at is not None
    assert kernel.evaluator_version == str(verdicts[good].reason.rsplit(" ", 1)[-1])
    # The command prints the same; a device with no kernels judges none.
    monkeypatch.setenv("KLOOM_DATABASE_URL", sqlite_db.url)
    out = CliRunner().invoke(app, ["kb", "verify", "--device", "cpu", "-n", "4", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout) == [], out.stdout
