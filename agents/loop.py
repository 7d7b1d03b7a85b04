"""The optimization loop: plan -> code -> verify, one step at a time, saved after every step.

Limits are checked before every step and every model call; the best correct candidate is derived
from the recorded steps at any time, so a job stopped anywhere returns it. A job resumed from a
saved trajectory continues at its next step and redoes nothing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Protocol

from kloom.workload import WorkloadError, inspect_workload, read_source

from .analysis import build_analysis, untraced_analysis
from .limits import Budget, LimitReached
from .records import NOT_EVALUATED, JobSpec, Plan, Step, Trajectory, Usage, utcnow
from .roles import Coder, KBAdvice, Planner, PlanningContext
from .strategist.codegen import source_rewrites
from .verifier import Verifier

log = logging.getLogger(__name__)


class TrajectorySink(Protocol):
    def save(self, trajectory: Trajectory, step: Step | None) -> None:
        """Persist the trajectory after a step (``step``) or a change of state (``None``)."""

    def cancel_requested(self) -> bool:
        """Polled before every step."""


class KnowledgeBase(Protocol):
    def advice(self, trajectory: Trajectory) -> KBAdvice: ...

    def ingest(self, trajectory: Trajectory) -> None: ...


def make_roles(spec: JobSpec) -> tuple[Planner, Coder]:
    """The offline strategist by default; the LLM roles when a model is named."""
    if spec.strategist in ("", "offline"):
        from .strategist import OfflineCoder, OfflinePlanner

        return OfflinePlanner(), OfflineCoder()
    from .llm import LLMClient, LLMCoder, LLMPlanner, LLMSettings

    client = LLMClient(LLMSettings.from_env(model=spec.strategist, **spec.options.get("llm", {})))
    return LLMPlanner(client), LLMCoder(client)


def make_profiler(spec: JobSpec, devices: list[int] | None = None):
    """A profiler for the verifier under the job's policy (None when the policy is ``none``).

    Profiles run in fresh processes launched for the purpose (Nsight Compute has to start the
    process it measures), never in the evaluator's warm pool."""
    if spec.profile == "none":
        return None
    from services.worker.profiler import ProfileSettings, profile

    settings = ProfileSettings.from_env(spec.device)
    settings.candidates = "every_correct" if spec.profile == "every_correct" else "new_best"
    settings.shapes = spec.shapes or ("gpu" if spec.device == "cuda" else "ci")
    settings.devices = devices

    def run(workload: str, code: str, *, world_size: int, device: str) -> dict:
        return profile(workload, code, world_size=world_size, device=device, settings=settings).to_dict()

    return run


def run_job(
    spec: JobSpec,
    sink: TrajectorySink,
    *,
    evaluator,
    resume: Trajectory | None = None,
    kb: KnowledgeBase | None = None,
    planner: Planner | None = None,
    coder: Coder | None = None,
    profiler=None,
    progress=None,
) -> Trajectory:
    """Run (or resume) one optimization job and return its trajectory.

    ``progress``, if given, is called with the trajectory after every step (for a display).
    """
    traj = resume or Trajectory(job=spec)
    traj.job = spec
    started = time.monotonic()
    try:
        source = _prepare(traj, spec, evaluator, sink)
    except _JobFailed as failed:
        return _finish(traj, sink, "failed", str(failed), kb)
    if planner is None or coder is None:
        try:
            default_planner, default_coder = make_roles(spec)
        except Exception as exc:  # noqa: BLE001 - a bad model setting fails the job with its reason
            return _finish(traj, sink, "failed", f"cannot set up the strategist {spec.strategist!r}: {exc}", kb)
        planner, coder = planner or default_planner, coder or default_coder
    if profiler is None:
        profiler = make_profiler(spec, getattr(evaluator, "devices", None))
    verifier = Verifier(evaluator, profiler=profiler, policy=spec.profile)
    budget = Budget(spec.limits, spent=traj.usage, steps_done=len(traj.steps), started=started)
    advice = _advice(kb, traj) if spec.use_kb else KBAdvice()

    state, reason = "succeeded", "the strategist has nothing left to try"
    while True:
        if sink.cancel_requested():
            state, reason = "cancelled", "cancelled by the user"
            break
        ctx = PlanningContext(
            spec=spec,
            workload_source=source,
            workload_name=traj.workload_name,
            analysis=traj.analysis,
            baseline=traj.baseline,
            history=list(traj.steps),
            budget=budget,
            kb=advice,
        )
        fallback = None
        try:
            budget.check(before_step=True)
        except LimitReached as exc:
            state = "succeeded" if exc.kind == "iterations" else "stopped"
            reason = str(exc)
            # A job stopped by its clock (not by its step count, which the planner plans within)
            # must not end without a correct kernel while a safe one is on offer: the planner's
            # fallback (the reference itself, for the offline strategist) gets one step.
            fallback = None if exc.kind == "iterations" else _fallback_plan(planner, ctx, traj)
            if fallback is None:
                break
        try:
            step = _step(len(traj.steps), ctx, planner, coder, verifier, plan_override=fallback)
        except LimitReached as exc:
            state, reason = "stopped", str(exc)
            break
        except _Fatal as exc:
            state, reason = "failed", str(exc)
            break
        except _Stop as exc:
            traj.overhead_usage = traj.overhead_usage.add(exc.usage)
            state, reason = ("succeeded" if exc.finished else "stopped"), str(exc)
            break
        if step is None:
            reason = getattr(planner, "done_reason", "") or reason
            break
        traj.steps.append(step)
        budget.steps_done = len(traj.steps)
        traj.updated_at = utcnow()
        sink.save(traj, step)
        if progress:
            progress(traj)
        if fallback is not None:
            break
    if state == "succeeded" and traj.best_step is None:
        state, reason = "failed", f"no correct candidate after {len(traj.steps)} step(s) ({reason})"
    return _finish(traj, sink, state, reason, kb)


class _JobFailed(Exception):
    pass


class _Fatal(Exception):
    """An error that no further step can fix (bad credentials, for instance)."""


class _Stop(Exception):
    """The job ends here without failing (the model provider stayed down, the planner is done)."""

    def __init__(self, reason: str, usage: Usage | None = None, finished: bool = False):
        super().__init__(reason)
        self.usage = usage or Usage()
        self.finished = finished  # the strategist is done (a success), not cut short


def _prepare(traj: Trajectory, spec: JobSpec, evaluator, sink: TrajectorySink) -> str:
    """Inspect the workload, time the baseline and trace the reference (once per job)."""
    try:
        info = inspect_workload(spec.workload)
        info.check_world_size(spec.world_size)
        source = read_source(spec.workload)
    except WorkloadError as exc:
        raise _JobFailed(str(exc)) from None
    if traj.workload_sha256 and traj.workload_sha256 != info.sha256:
        raise _JobFailed(f"{spec.workload} changed since this job started; start a new job instead of resuming")
    traj.workload_name, traj.workload_sha256, traj.workload_family = info.name, info.sha256, info.family
    traj.state = "running"
    sink.save(traj, None)
    if traj.baseline is None:
        baseline = evaluator.baseline(spec.workload, world_size=spec.world_size)
        if baseline.status != "correct":
            message = baseline.error.message if baseline.error else baseline.status
            raise _JobFailed(f"the reference itself failed ({baseline.status}): {message}")
        traj.baseline = baseline.to_dict()
        sink.save(traj, None)
    if traj.analysis is None:
        try:
            traces = evaluator.analyze(spec.workload, world_size=spec.world_size)
            analysis = build_analysis(traces, family=info.family, world_size=spec.world_size, device=spec.device, baseline=traj.baseline)
        except RuntimeError as exc:
            # Some references cannot run under the tracer (what its recorder cannot follow); the job
            # goes on with what is known without it, and the strategies that need no trace.
            log.warning("job %s plans without a trace of the reference, which the tracer could not follow: %s", spec.job_id, exc)
            analysis = untraced_analysis(str(exc), family=info.family, world_size=spec.world_size, device=spec.device, baseline=traj.baseline)
        analysis.source_rewrites = source_rewrites(source)
        traj.analysis = analysis.to_dict()
        sink.save(traj, None)
    return source


def _advice(kb: KnowledgeBase | None, traj: Trajectory) -> KBAdvice:
    if kb is None:
        return KBAdvice()
    try:
        return kb.advice(traj)
    except Exception as exc:  # noqa: BLE001 - a KB that cannot answer must not stop the job
        log.warning("job %s plans without the knowledge base, which could not answer: %s", traj.job.job_id, exc)
        return KBAdvice()


def _fallback_plan(planner: Planner, ctx: PlanningContext, traj: Trajectory) -> Plan | None:
    if traj.best_step is not None or not hasattr(planner, "fallback"):
        return None
    if any(s.plan.strategy == "reference_copy" for s in traj.steps):
        return None
    return planner.fallback(ctx)


def _step(index: int, ctx: PlanningContext, planner: Planner, coder: Coder, verifier: Verifier, plan_override: Plan | None = None) -> Step | None:
    started_at = utcnow()
    seconds: dict[str, float] = {}
    usage = Usage()
    t0 = time.monotonic()
    try:
        if plan_override is not None:
            plan, plan_usage = plan_override, Usage()
        else:
            ctx.budget.check()
            plan, plan_usage = planner.plan(ctx)
    except LimitReached:
        raise
    except Exception as exc:  # noqa: BLE001 - classified below
        return _failed_or_fatal(index, exc, started_at, seconds, usage, Plan(strategy="plan", rationale="the planner failed"))
    # LLM clients charge the budget per call themselves; the step only records the usage.
    usage = usage.add(plan_usage)
    seconds["plan"] = time.monotonic() - t0
    if plan is None:
        if plan_usage.calls:
            raise _Stop("the planner has nothing left worth trying", plan_usage, finished=True)
        return None
    t0 = time.monotonic()
    try:
        if plan_override is None:
            ctx.budget.check()
        written = coder.write(plan, ctx)
    except LimitReached:
        raise
    except Exception as exc:  # noqa: BLE001
        return _failed_or_fatal(index, exc, started_at, seconds, usage, plan)
    seconds["code"] = time.monotonic() - t0
    usage = usage.add(written.usage)
    step = Step(index=index, plan=plan, status="coder_failed", usage=usage, seconds=seconds, started_at=started_at)
    if written.code is None:
        step.error = written.error or "the coder produced no code"
        step.feedback = f"no candidate was written: {step.error}"
    else:
        import hashlib

        step.candidate_code = written.code
        # A model's answer may hold a lone surrogate: hashed as it is; the evaluator refuses it.
        step.candidate_sha256 = hashlib.sha256(written.code.encode("utf-8", "surrogatepass")).hexdigest()
        same = next((s for s in ctx.history if s.candidate_sha256 == step.candidate_sha256 and s.status not in NOT_EVALUATED), None)
        if same is not None:
            # The same code measures the same: an evaluation would only spend the job's time.
            step.status = "skipped"
            step.feedback = f"this candidate is identical to step {same.index}'s ({same.status}); not evaluated again"
            step.finished_at = utcnow()
            return step
        t0 = time.monotonic()
        # The job's clock bounds the evaluation too; the fallback step (run after the clock ran
        # out, so that the job ends with a correct kernel) is bounded only by the evaluator.
        deadline = None if plan_override is not None else ctx.budget.remaining_s()
        verdict = verifier.verify(written.code, plan, ctx, deadline_s=deadline)
        seconds["verify"] = time.monotonic() - t0
        step.status = verdict.status
        step.evaluation = verdict.evaluation
        step.profile = verdict.profile
        step.feedback = verdict.feedback
        if verdict.evaluation and verdict.evaluation.get("error"):
            step.error = verdict.evaluation["error"]["message"]
    step.finished_at = utcnow()
    return step


def _failed_or_fatal(index, exc, started_at, seconds, usage, plan) -> Step:
    """A model answer that could not be used is a failed step; bad credentials end the job."""
    if type(exc).__name__ in ("LLMAuthError", "LLMConfigError"):
        raise _Fatal(f"{type(exc).__name__}: {exc}") from exc
    if type(exc).__name__ == "LLMUnavailable":
        raise _Stop(f"the model provider stayed unavailable through every retry: {exc}", usage) from exc
    extra = getattr(exc, "usage", None)
    if isinstance(extra, Usage):
        usage = usage.add(extra)
    return Step(
        index=index,
        plan=plan,
        status="coder_failed",
        error=f"{type(exc).__name__}: {exc}",
        feedback=f"the step failed before any candidate ran: {type(exc).__name__}: {exc}",
        usage=usage,
        seconds=seconds,
        started_at=started_at,
        finished_at=utcnow(),
    )


def _finish(traj: Trajectory, sink: TrajectorySink, state: str, reason: str, kb: KnowledgeBase | None) -> Trajectory:
    traj.state = state
    traj.stop_reason = reason
    traj.updated_at = utcnow()
    sink.save(traj, None)
    if kb is not None and traj.steps:
        try:
            kb.ingest(traj)
        except Exception as exc:  # noqa: BLE001 - the job's result stands without the KB
            log.warning("could not record job %s in the knowledge base: %s", traj.job.job_id, exc)
    return traj


class FileSink:
    """Saves ``trajectory.json`` (atomically) and ``best_kernel.py`` in a directory after every step."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cancel_file = self.directory / "CANCEL"

    @property
    def trajectory_path(self) -> Path:
        return self.directory / "trajectory.json"

    def load(self) -> Trajectory | None:
        import json

        if not self.trajectory_path.is_file():
            return None
        return Trajectory.from_dict(json.loads(self.trajectory_path.read_text()))

    def save(self, trajectory: Trajectory, step: Step | None) -> None:
        import json
        import os

        tmp = self.trajectory_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(trajectory.to_dict(), indent=1))
        os.replace(tmp, self.trajectory_path)
        best = trajectory.best_step
        if best is not None and best.candidate_code:
            path = self.directory / "best_kernel.py"
            if not path.is_file() or path.read_text() != best.candidate_code:
                path.write_text(best.candidate_code)

    def cancel_requested(self) -> bool:
        return self.cancel_file.exists()

