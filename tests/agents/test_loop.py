"""The optimization loop with the offline strategist, end to end on CPU (gloo)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.analysis import Analysis, build_analysis
from agents.limits import Budget
from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits, Trajectory
from agents.roles import PlanningContext
from agents.strategist import OfflineCoder, OfflinePlanner
from agents.strategist.codegen import source_rewrites
from kloom.cli import app
from kloom.evaluation import BaselineResult, EvalResult
from kloom.static_check import check_candidate
from kloom.suite import find
from tests import sweeps

SUITE_WORKLOADS = ["tp_allreduce_residual_rmsnorm", "vocab_parallel_cross_entropy", "all_reduce_small"]


@pytest.mark.slow
def test_optimize_three_suite_workloads_offline(tmp_path):
    """`kloom optimize` finishes with a correct best kernel and a saved trajectory, offline."""
    runner = CliRunner()
    for name in sweeps.subset(SUITE_WORKLOADS, every=3):  # CI: the first (tests/sweeps.py)
        out = tmp_path / name
        result = runner.invoke(app, ["optimize", name, "-n", "2", "--max-iters", "2", "--out", str(out), "--no-kb", "--profile", "none"])
        assert result.exit_code == 0, result.output
        traj = Trajectory.from_dict(json.loads((out / "trajectory.json").read_text()))
        assert traj.state == "succeeded" and traj.best_step is not None
        assert traj.best_step.evaluation.correct
        assert (out / "best_kernel.py").read_text() == traj.best_step.candidate_code
        assert traj.analysis.collectives, "the trace found the reference's collectives"


def _context(spec: JobSpec, source: str, analysis: Analysis, history=()) -> PlanningContext:
    return PlanningContext(
        spec=spec,
        workload_source=source,
        workload_name="x",
        analysis=analysis,
        baseline=None,
        history=list(history),
        budget=Budget(spec.limits),
    )


def test_plans_come_from_structure_not_name(evaluator, tmp_path):
    """A renamed copy of a workload gets exactly the same plans."""
    original = Path(find("tp_allreduce_residual_rmsnorm").path)
    renamed = tmp_path / "something_else_entirely.py"
    shutil.copy(original, renamed)
    plans = []
    for path in (original, renamed):
        traces = evaluator.analyze(path, world_size=2)
        analysis = build_analysis(traces, family="x", world_size=2, device="cpu", baseline=None)
        spec = JobSpec(workload=str(path), world_size=2, limits=Limits(max_iters=4))
        plan, _ = OfflinePlanner().plan(_context(spec, path.read_text(), analysis))
        plans.append((plan.strategy, plan.params))
    assert plans[0] == plans[1]


def test_every_offline_candidate_passes_the_static_checker(evaluator):
    """The coder writes candidates the evaluator accepts for every wrapper it knows."""
    path = Path(find("tp_allreduce_residual_rmsnorm").path)
    traces = evaluator.analyze(path, world_size=2)
    analysis = build_analysis(traces, family="x", world_size=2, device="cuda", baseline=None)
    spec = JobSpec(workload=str(path), world_size=2, device="cuda", limits=Limits(max_iters=20))
    ctx = _context(spec, path.read_text(), analysis)
    from agents.strategist.catalog import options_for

    options = options_for(analysis)
    assert {o.strategy for o in options} >= {"cuda_graph", "torch_compile", "compile_cuda_graph", "symm_mem_allreduce", "row_chunk_overlap"}
    for option in options:
        from agents.records import Plan

        written = OfflineCoder().write(Plan(strategy=option.strategy, params=option.params), ctx)
        assert written.code is not None, (option.strategy, written.error)
        assert check_candidate(written.code) == [], option.strategy
        compile(written.code, option.strategy, "exec")


def test_job_resumes_without_redoing_steps(evaluator, tmp_path):
    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=1), profile="none", use_kb=False)
    sink = FileSink(tmp_path)
    first = run_job(spec, sink, evaluator=evaluator)
    assert len(first.steps) == 1
    # The loop keeps the evaluator's records as they came; the saved trajectory reads them back the same.
    assert isinstance(first.baseline, BaselineResult) and isinstance(first.steps[0].evaluation, EvalResult)
    saved = sink.load()
    assert saved.baseline == first.baseline and saved.steps[0].evaluation == first.steps[0].evaluation
    # The offline planner notes the source rewrites that apply in the job's analysis (OfflinePlanner.annotate).
    assert saved.analysis.source_rewrites == source_rewrites(workload.read_text()) == {"overlap": 1}
    spec.limits.max_iters = 2
    resumed = run_job(spec, sink, evaluator=evaluator, resume=saved)
    assert [s.index for s in resumed.steps][:1] == [0]
    assert resumed.steps[0].candidate_sha256 == first.steps[0].candidate_sha256
    assert len({(s.plan.strategy, json.dumps(s.plan.params, sort_keys=True)) for s in resumed.steps}) == len(resumed.steps)


class DeadlinesSeen:
    """The evaluator, with a note of the deadline each baseline and evaluation was given."""

    def __init__(self, inner):
        self.inner, self.baselines, self.evaluations = inner, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def baseline(self, *args, **kwargs):
        self.baselines.append(kwargs.get("deadline_s"))
        return self.inner.baseline(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self.evaluations.append(kwargs.get("deadline_s"))
        return self.inner.evaluate(*args, **kwargs)


def test_a_job_whose_clock_ran_out_before_it_began_stops_at_once(evaluator, tmp_path):
    """No evaluation outlasts the job's wall-time limit, not even the reference's baseline or the
    fallback step: a job with no time left stops at once, saying so."""
    import time

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=5, max_wall_s=0.0), profile="none", use_kb=False)
    seen = DeadlinesSeen(evaluator)
    started = time.monotonic()
    traj = run_job(spec, FileSink(tmp_path), evaluator=seen)
    assert traj.state == "stopped" and "wall-time limit reached (0 s) before the reference was timed" in traj.stop_reason, traj.stop_reason
    assert traj.steps == [] and seen.baselines == [0.0] and seen.evaluations == []
    assert time.monotonic() - started < 10.0


class ScriptedClockEvaluator:
    """An evaluator whose baseline took ``baseline_s`` (as its record says) and whose every
    evaluation runs out its deadline: what the loop gives each call, and when, is all there is."""

    def __init__(self, baseline_s: float):
        self.baseline_s, self.evaluations = baseline_s, []

    def baseline(self, workload, *, world_size, deadline_s=None, more_after=0):
        return BaselineResult(status="correct", workload=workload, world_size=world_size, device="cpu", reference_ms=1.0,
                              phase_seconds={"total": self.baseline_s})

    def analyze(self, workload, *, world_size, seed=0):
        raise RuntimeError("no trace in this test")

    def evaluate(self, workload, *, candidate_source, world_size, deadline_s=None, more_after=0):
        import time

        self.evaluations.append((deadline_s, candidate_source))
        time.sleep(deadline_s)
        return EvalResult(status="timeout", workload=workload, world_size=world_size, device="cpu")


def test_a_job_without_a_correct_kernel_keeps_time_for_its_fallback_within_its_limit(tmp_path):
    """While nothing is correct, a job keeps back (``Budget.reserve_s``, from what its baseline
    took) the time of its one fallback step, the reference's copy: the steps before it end that
    much before the limit, and the fallback spends the rest, so the job ends by its limit
    whatever its candidates do (the fallback ran 200 s past a 400 s limit before)."""
    import time

    from agents.limits import fallback_reserve_s

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    limit, reserve = 3.0, fallback_reserve_s(0.4)
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=20, max_wall_s=limit), profile="none", use_kb=False)
    scripted = ScriptedClockEvaluator(baseline_s=0.4)
    started = time.monotonic()
    traj = run_job(spec, FileSink(tmp_path), evaluator=scripted)
    took = time.monotonic() - started
    assert took < limit + 0.5, f"the job took {took:.1f} s against a {limit:.0f} s limit"
    assert traj.state == "stopped" and f"less {reserve:.0f} s kept for the fallback step" in traj.stop_reason, traj.stop_reason
    strategies = [s.plan.strategy for s in traj.steps]
    assert strategies[-1] == "reference_copy" and "reference_copy" not in strategies[:-1]
    assert len(traj.steps) >= 2 and all(s.status == "timeout" for s in traj.steps)
    deadlines = [d for d, _ in scripted.evaluations]
    # The steps before the fallback together had the limit less the reserve; the fallback had the reserve.
    assert sum(deadlines[:-1]) <= limit - reserve + 0.05
    assert reserve - 0.3 <= deadlines[-1] <= reserve + 0.05


def test_a_job_whose_reference_outlasts_its_time_stops_with_the_reason(evaluator, tmp_path):
    """The baseline of a reference too slow for the job's time ends by the job's deadline, and the
    job stops saying so (it is the limit, not the reference, that failed)."""
    import time

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "slow_reference.py"
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=5, max_wall_s=1.0), profile="none", use_kb=False)
    started = time.monotonic()
    traj = run_job(spec, FileSink(tmp_path), evaluator=evaluator)
    took = time.monotonic() - started
    assert traj.state == "stopped", traj.stop_reason
    assert "wall-time limit reached (1 s) before the reference was timed" in traj.stop_reason
    assert took < 1.0 + 10.0, f"the job took {took:.0f} s against a 1 s limit"


def test_a_broken_workload_fails_the_job_with_its_reason(evaluator, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def get_inputs():\n    return []\n")
    spec = JobSpec(workload=str(bad), world_size=1, profile="none", use_kb=False)
    traj = run_job(spec, FileSink(tmp_path / "out"), evaluator=evaluator)
    assert traj.state == "failed" and "no class Model" in traj.stop_reason


def test_the_wall_time_limit_bounds_a_running_evaluation(evaluator, tmp_path, monkeypatch):
    """A candidate that hangs in its first call would hold the job for the evaluator's load limit
    (a minute on CPU, ten on CUDA); the job's wall-time limit cuts its evaluation short instead,
    and the job still ends by its limit with a correct kernel (the reference, as the fallback
    step, in the time kept for it)."""
    import time

    import agents.loop

    from agents.records import Plan
    from agents.roles import CoderOutput
    from agents.strategist import OfflinePlanner

    spinning = (Path(__file__).parents[1] / "evaluator" / "adversarial" / "spins_forever.py").read_text()

    class SpinningPlanner(OfflinePlanner):
        def plan(self, ctx):
            from agents.records import Usage

            return Plan(strategy="spin", rationale="a candidate that never returns"), Usage()

    class Coder(OfflineCoder):
        def write(self, plan, ctx):
            return CoderOutput(code=spinning) if plan.strategy == "spin" else super().write(plan, ctx)

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    # The limit leaves room for the preparation (timing the reference and tracing it: about 8 s on
    # CI's two cores, 20 s on a busy machine), the hanging candidate, and the fallback: the copy
    # needs fresh candidate ranks, so this test keeps 20 s for it whatever the baseline took (a
    # slow baseline, scaled, left no time for the hanging candidate).
    monkeypatch.setattr(agents.loop, "fallback_reserve_s", lambda baseline_seconds: 20.0)
    limit = 50.0
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=5, max_wall_s=limit), profile="none", use_kb=False)
    started = time.monotonic()
    traj = run_job(spec, FileSink(tmp_path), evaluator=evaluator, planner=SpinningPlanner(), coder=Coder())
    took = time.monotonic() - started
    assert traj.steps[0].status == "timeout" and "deadline" in traj.steps[0].error
    assert traj.steps[-1].plan.strategy == "reference_copy" and traj.best_step is not None
    assert traj.state == "stopped" and "wall-time" in traj.stop_reason
    assert took < limit + 3.0, f"the job took {took:.0f} s against a {limit:.0f} s limit"


def test_a_candidate_identical_to_an_evaluated_one_is_not_evaluated_again(evaluator, tmp_path):
    """Two plans that come out as the same code (a model repeating itself, a kept kernel that is
    what an option writes): the second is recorded as skipped, and the evaluator runs once."""
    from agents.records import Plan, Usage
    from agents.roles import CoderOutput, Planner

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    same = workload.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"

    class TwoNames(Planner):
        def plan(self, ctx):
            return (Plan(strategy=f"idea_{len(ctx.history)}", rationale="x") if len(ctx.history) < 2 else None), Usage()

    class SameCode:
        def write(self, plan, ctx):
            return CoderOutput(code=same)

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls, self.more_after = inner, 0, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def evaluate(self, *args, **kwargs):
            self.calls += 1
            self.more_after.append(kwargs.get("more_after"))
            return self.inner.evaluate(*args, **kwargs)

    counting = Counting(evaluator)
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=4), profile="none", use_kb=False)
    traj = run_job(spec, FileSink(tmp_path), evaluator=counting, planner=TwoNames(), coder=SameCode())
    assert [s.status for s in traj.steps] == ["correct", "skipped"]
    assert "identical to step 0" in traj.steps[1].feedback and traj.steps[1].evaluation is None
    assert counting.calls == 1
    assert counting.more_after == [3]  # the steps the limit leaves after the first: ranks begun ahead
    # The offline strategist's notes are its own: a planner that reads no source adds none.
    assert traj.analysis.source_rewrites == {}


def test_role_errors_end_the_job_by_their_type(evaluator, tmp_path):
    """A role's error that no step can fix fails the job (a refused key); a provider that stayed
    down stops it; any other error fails only its step."""
    from agents.llm import LLMAuthError, LLMUnavailable
    from agents.roles import Planner

    class Raising(Planner):
        def __init__(self, error):
            self.error = error

        def plan(self, ctx):
            raise self.error

    workload = Path(__file__).parents[1] / "evaluator" / "workloads" / "linear_allreduce.py"
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=3), profile="none", use_kb=False)
    failed = run_job(spec, FileSink(tmp_path / "a"), evaluator=evaluator, planner=Raising(LLMAuthError("bad key")), coder=OfflineCoder())
    assert (failed.state, failed.stop_reason, failed.steps) == ("failed", "LLMAuthError: bad key", [])
    stopped = run_job(spec, FileSink(tmp_path / "b"), evaluator=evaluator, planner=Raising(LLMUnavailable("503")), coder=OfflineCoder())
    assert stopped.state == "stopped" and stopped.stop_reason.endswith("every retry: 503")
    broken = run_job(spec, FileSink(tmp_path / "c"), evaluator=evaluator, planner=Raising(ValueError("no")), coder=OfflineCoder())
    assert [s.error for s in broken.steps] == ["ValueError: no"] * 3 and broken.state == "failed"
