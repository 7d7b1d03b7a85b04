"""The development split of both third-party suites, vendored under fixtures/ (regenerate with
fixtures/regenerate_dev_split.py), through kloom's importers and its optimize loop.

Every ParallelKernelBench development problem imports, and its job (the in-process `kloom
optimize`: the offline strategist and the real evaluator, world size 2, CPU shapes) ends with a
correct best kernel, or its reference cannot run on the CPU for a reason the test states: the
importer noted it runs on CUDA only, or gloo (the CPU backend) refuses a collective NCCL accepts.
No job may fail because the reference's source breaks the candidate rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits
from kloom.importers import import_kernelbench, import_pkb
from kloom.static_check import check_candidate
from kloom.workload import inspect_workload
from kloom.workload_parts import candidate_base
from tests import sweeps

FIXTURES = Path(__file__).parent / "fixtures"
PKB = FIXTURES / "pkb_dev"
PROBLEMS = sorted(p.stem for p in (PKB / "reference").glob("*.py"))
#: Why a reference may not run on the CPU: the importer's note, or the gloo backend's refusal.
CPU_REASONS = ("runs on CUDA only", "ProcessGroupGloo")


@pytest.fixture(scope="module")
def pkb_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("pkb_dev_suite")
    # The importer's own CPU shapes (PKB's builder scales most problems from the base shape).
    return import_pkb(PKB, out_dir=out, world_sizes=(1, 2))


@pytest.fixture(scope="module")
def fast_evaluator():
    from services.worker.evaluator import EvalSettings, Evaluator

    settings = EvalSettings.for_device("cpu", trials=2, timing_budget_s=0.02, min_iters=2, max_iters=5, warmup_iters=1, recheck_reference=False)
    with Evaluator("cpu", settings) as ev:
        yield ev


def test_every_development_problem_imports(pkb_suite):
    assert pkb_suite.rejected == []
    assert sorted(Path(w.origin).stem for w in pkb_suite.imported) == PROBLEMS
    grad = [w for w in pkb_suite.imported if inspect_workload(w.path).needs_grad]
    assert grad and all("with _kloom_torch.enable_grad():" in Path(w.path).read_text() for w in grad)
    assert all(any("NEEDS_GRAD" in n for n in w.notes) == (w in grad) for w in pkb_suite.imported)
    for w in pkb_suite.imported:
        # The reference copy every strategy starts from: the problem's code, none of the glue.
        base = candidate_base(Path(w.path).read_text())
        assert check_candidate(base) == [], w.name
        assert "kloom.importers" not in base and "get_inputs" not in base


#: Problems whose input builder fixes sizes the base shape does not scale, too large to run in CI
#: on a CPU; they run where KLOOM_SLOW_TESTS=1 (on a GPU runner, say).
TOO_SLOW_FOR_CPU_CI = {
    "77_magi1_cso_async_attention": "its builder fixes 24,300 tokens x 24 heads of attention whatever the base shape (minutes per call on 2 cores)",
}


#: CI runs every third problem's job (``tests/sweeps.py``): each costs 5-25 s on two cores.
EVERY = 3


def _marks(index: int, problem: str):
    if problem in TOO_SLOW_FOR_CPU_CI:
        return [pytest.mark.slow, pytest.mark.skipif(not sweeps.FULL, reason=TOO_SLOW_FOR_CPU_CI[problem])]
    return sweeps.marks(index, EVERY)


@pytest.mark.parametrize("problem", [pytest.param(p, marks=_marks(i, p)) for i, p in enumerate(PROBLEMS)])
def test_every_development_problem_optimizes_at_world_size_2(problem, pkb_suite, fast_evaluator, tmp_path):
    imported = next(w for w in pkb_suite.imported if Path(w.origin).stem == problem)
    spec = JobSpec(workload=imported.path, world_size=2, device="cpu", shapes="ci", strategist="offline",
                   limits=Limits(max_iters=1), use_kb=False, profile="none")
    traj = run_job(spec, FileSink(tmp_path / "job"), evaluator=fast_evaluator)
    assert not any("candidate rules" in (s.error or "") for s in traj.steps), [s.error for s in traj.steps]
    if traj.best_step is not None:
        assert traj.state == "succeeded" and traj.best_step.correct
        assert traj.outcome in ("faster kernel found", "no faster kernel found")
        return
    stated = [reason for reason in CPU_REASONS if reason in traj.stop_reason or any(reason in n for n in imported.notes)]
    assert traj.stop_reason.startswith("the reference itself failed") and stated, traj.stop_reason


def test_kernelbench_development_problems_import_as_candidates_accept_them(tmp_path):
    report = import_kernelbench(FIXTURES / "kernelbench_dev", out_dir=tmp_path / "kb")
    assert report.rejected == [] and len(report.imported) == 5
    for w in report.imported:
        assert Path(w.path).is_symlink()  # the checkout's file, unchanged
        assert check_candidate(candidate_base(Path(w.path).read_text())) == [], w.name


def test_kloom_optimize_on_an_imported_problem_says_what_it_found(pkb_suite, tmp_path):
    """The command a user types, on an imported problem: the table shows each step's two times and
    interval, and the last lines say whether a faster kernel was found."""
    import re

    from typer.testing import CliRunner

    from kloom.cli import app

    workload = next(w for w in pkb_suite.imported if Path(w.origin).stem == "1_allreduce")
    result = CliRunner().invoke(app, ["optimize", workload.path, "-n", "2", "--max-iters", "1", "--out", str(tmp_path / "o"), "--no-kb", "--profile", "none", "--shapes", "ci"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^(faster kernel found: step 0|no faster kernel found: the reference stands at 1\.00x)", result.output, re.M), result.output
    assert re.search(r"\d\.\d{2}x \([\d.]+ / [\d.]+ ms, 95% CI", result.output), result.output
