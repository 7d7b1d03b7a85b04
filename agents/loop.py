"""The optimization loop: plan -> write -> verify, one step at a time, saved after every step.

``JobLoop.run`` prepares the job (workload, baseline, analysis) and repeats ``step`` until an exit
(``agents.exits``) carries the job's final state. Limits are checked before every step and every
model call; the best correct candidate is derived from the recorded steps at any time, so a job
stopped anywhere returns it. A job resumed from a saved trajectory continues at its next step and
redoes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Callable, Protocol

from kloom.clock import timestamp
from kloom.workload import WorkloadError, inspect_workload, read_source

from .analysis import build_analysis, untraced_analysis
from .exits import FatalRoleError, JobCancelled, JobExit, JobFailed, JobStopped, JobSucceeded, RoleUnavailable
from .limits import Budget, LimitReached, fallback_reserve_s
from .llm import LLMClient, LLMCoder, LLMPlanner, LLMSettings
from .records import NOT_EVALUATED, JobSpec, Plan, Step, Trajectory, Usage
from .roles import Coder, Evaluator, KBAdvice, Planner, PlanningContext
from .sinks import TrajectorySink
from .strategist import OfflineCoder, OfflinePlanner
from .verifier import Profiler, Verifier

__all__ = ["JobLoop", "KnowledgeBase", "TrajectorySink", "make_roles", "run_job"]

log = logging.getLogger(__name__)


class KnowledgeBase(Protocol):
    def advice(self, trajectory: Trajectory) -> KBAdvice: ...

    def ingest(self, trajectory: Trajectory) -> None: ...


def make_roles(spec: JobSpec) -> tuple[Planner, Coder]:
    """The offline strategist by default; the LLM roles when a model is named."""
    if spec.strategist in ("", "offline"):
        return OfflinePlanner(), OfflineCoder()
    client = LLMClient(LLMSettings.from_env(model=spec.strategist, **spec.options.get("llm", {})))
    return LLMPlanner(client), LLMCoder(client)


def run_job(
    spec: JobSpec,
    sink: TrajectorySink,
    *,
    evaluator: Evaluator,
    resume: Trajectory | None = None,
    kb: KnowledgeBase | None = None,
    planner: Planner | None = None,
    coder: Coder | None = None,
    profiler: Profiler | None = None,
    progress: Callable[[Trajectory], None] | None = None,
) -> Trajectory:
    """Run (or resume) one optimization job and return its trajectory.

    ``profiler``: profiles correct candidates under ``spec.profile`` (None: none are profiled).
    ``progress``, if given, is called with the trajectory after every step (for a display).
    """
    loop = JobLoop(spec, sink, evaluator, resume=resume, kb=kb, profiler=profiler, progress=progress)
    return loop.run(planner, coder)


class JobLoop:
    """One job's run: ``run`` prepares it and repeats ``step`` until an exit ends it."""

    def __init__(
        self,
        spec: JobSpec,
        sink: TrajectorySink,
        evaluator: Evaluator,
        *,
        resume: Trajectory | None,
        kb: KnowledgeBase | None,
        profiler: Profiler | None,
        progress: Callable[[Trajectory], None] | None,
    ):
        self.traj = resume or Trajectory(job=spec)
        self.traj.job = spec
        self.spec, self.sink, self.evaluator, self.kb, self.progress = spec, sink, evaluator, kb, progress
        self.verifier = Verifier(evaluator, profiler=profiler, policy=spec.profile)
        self.budget = Budget(spec.limits, spent=self.traj.usage, steps_done=len(self.traj.steps))

    def run(self, planner: Planner | None = None, coder: Coder | None = None) -> Trajectory:
        try:
            self.source = self.prepare()
            self.planner, self.coder = self.roles(planner, coder)
            self.planner.annotate(self.traj.analysis, self.source)
            self.advice = self.advise() if self.spec.use_kb else KBAdvice()
            while True:
                self.step()
        except JobExit as exit:
            return self.finish(exit)

    def step(self) -> None:
        """One step: plan, write, verify, record. A limit reached before it ends the job, but
        for one last fallback step when nothing is correct yet."""
        if self.sink.cancel_requested():
            raise JobCancelled("cancelled by the user")
        ctx = self.context()
        self.budget.holding_s = self.held_s(ctx)
        fallback, limit = self.limit_or_fallback(ctx)
        step = Step(index=len(self.traj.steps), plan=Plan(strategy="plan", rationale="the planner failed"), status="coder_failed")
        step.started_at = timestamp()
        code = self.draft(step, ctx, fallback)
        if code is not None:
            # A step before the fallback leaves what is kept for it untouched; the fallback spends it.
            self.verify(step, code, ctx, deadline=self.budget.remaining_s(self.budget.holding_s))
        step.finished_at = timestamp()
        self.record(step)
        if fallback is not None:
            raise JobStopped(limit)

    def draft(self, step: Step, ctx: PlanningContext, fallback: Plan | None) -> str | None:
        """Plan and write; the code to verify, or None. A model answer that could not be used
        fails the step; errors no step can fix, and limits, end the job."""
        try:
            self.plan(step, ctx, fallback)
            return self.write(step, ctx, checked=fallback is None)
        except JobExit:
            raise
        except LimitReached as exc:
            raise JobStopped(str(exc)) from exc
        except FatalRoleError as exc:
            raise JobFailed(f"{type(exc).__name__}: {exc}") from exc
        except RoleUnavailable as exc:
            raise JobStopped(f"the model provider stayed unavailable through every retry: {exc}", step.usage) from exc
        except Exception as exc:  # noqa: BLE001 - recorded as the step's failure
            extra = getattr(exc, "usage", None)
            if isinstance(extra, Usage):
                step.usage = step.usage.add(extra)
            step.error = f"{type(exc).__name__}: {exc}"
            step.feedback = f"the step failed before any candidate ran: {step.error}"
            return None

    def plan(self, step: Step, ctx: PlanningContext, fallback: Plan | None) -> None:
        t0 = time.monotonic()
        if fallback is not None:
            plan, usage = fallback, Usage()
        else:
            self.budget.check()
            plan, usage = self.planner.plan(ctx)
        # LLM clients charge the budget per call themselves; the step only records the usage.
        step.usage = step.usage.add(usage)
        step.seconds["plan"] = time.monotonic() - t0
        if plan is None:
            if usage.calls:
                raise JobSucceeded("the planner has nothing left worth trying", usage)
            raise JobSucceeded(self.planner.done_reason or "the strategist has nothing left to try")
        step.plan = plan

    def write(self, step: Step, ctx: PlanningContext, *, checked: bool) -> str | None:
        """The candidate's code; None (with the step's error) when none was written or it was
        already evaluated."""
        t0 = time.monotonic()
        if checked:
            self.budget.check()
        written = self.coder.write(step.plan, ctx)
        step.seconds["code"] = time.monotonic() - t0
        step.usage = step.usage.add(written.usage)
        if written.code is None:
            step.error = written.error or "the coder produced no code"
            step.feedback = f"no candidate was written: {step.error}"
            return None
        step.candidate_code = written.code
        # A model's answer may hold a lone surrogate: hashed as it is; the evaluator refuses it.
        step.candidate_sha256 = hashlib.sha256(written.code.encode("utf-8", "surrogatepass")).hexdigest()
        same = next((s for s in ctx.history if s.candidate_sha256 == step.candidate_sha256 and s.status not in NOT_EVALUATED), None)
        if same is not None:
            # The same code measures the same: an evaluation would only spend the job's time.
            step.status = "skipped"
            step.feedback = f"this candidate is identical to step {same.index}'s ({same.status}); not evaluated again"
            return None
        return written.code

    def verify(self, step: Step, code: str, ctx: PlanningContext, deadline: float | None) -> None:
        """Evaluate within ``deadline`` seconds (None: the evaluator's own limits only)."""
        t0 = time.monotonic()
        verdict = self.verifier.verify(code, step.plan, ctx, deadline_s=deadline, more_after=self.budget.steps_after_this())
        step.seconds["verify"] = time.monotonic() - t0
        step.status, step.evaluation, step.profile, step.feedback = verdict.status, verdict.evaluation, verdict.profile, verdict.feedback
        if verdict.evaluation and verdict.evaluation.error:
            step.error = verdict.evaluation.error.message

    def record(self, step: Step) -> None:
        self.traj.steps.append(step)
        self.budget.steps_done = len(self.traj.steps)
        self.traj.updated_at = timestamp()
        self.sink.save(self.traj, step)
        if self.progress:
            self.progress(self.traj)

    # Around the steps -------------------------------------------------------------------------
    def prepare(self) -> str:
        """Inspect the workload, time the baseline and trace the reference (once per job)."""
        spec, traj = self.spec, self.traj
        try:
            info = inspect_workload(spec.workload)
            info.check_world_size(spec.world_size)
            source = read_source(spec.workload)
        except WorkloadError as exc:
            raise JobFailed(str(exc)) from None
        if traj.workload_sha256 and traj.workload_sha256 != info.sha256:
            raise JobFailed(f"{spec.workload} changed since this job started; start a new job instead of resuming")
        traj.workload_name, traj.workload_sha256, traj.workload_family = info.name, info.sha256, info.family
        traj.state = "running"
        self.sink.save(traj, None)
        if traj.baseline is None:
            deadline, t0 = self.budget.remaining_s(), time.monotonic()
            baseline = self.evaluator.baseline(spec.workload, world_size=spec.world_size, deadline_s=deadline,
                                               more_after=self.budget.steps_left())
            if baseline.status != "correct":
                message = baseline.error.message if baseline.error else baseline.status
                if baseline.status == "timeout" and deadline is not None and time.monotonic() - t0 >= deadline - 0.5:
                    raise JobStopped(f"wall-time limit reached ({spec.limits.max_wall_s:.0f} s) before the reference was timed: {message}")
                raise JobFailed(f"the reference itself failed ({baseline.status}): {message}")
            traj.baseline = baseline
            self.sink.save(traj, None)
        self.budget.reserve_s = fallback_reserve_s(traj.baseline.phase_seconds.get("total"))
        if traj.analysis is None:
            known = dict(family=info.family, world_size=spec.world_size, device=spec.device, baseline=traj.baseline)
            try:
                analysis = build_analysis(self.evaluator.analyze(spec.workload, world_size=spec.world_size), **known)
            except RuntimeError as exc:
                # Some references cannot run under the tracer (what its recorder cannot follow); the job
                # goes on with what is known without it, and the strategies that need no trace.
                log.warning("job %s plans without a trace of the reference, which the tracer could not follow: %s", spec.job_id, exc)
                analysis = untraced_analysis(str(exc), **known)
            traj.analysis = analysis
            self.sink.save(traj, None)
        return source

    def roles(self, planner: Planner | None, coder: Coder | None) -> tuple[Planner, Coder]:
        if planner is not None and coder is not None:
            return planner, coder
        try:
            default_planner, default_coder = make_roles(self.spec)
        except Exception as exc:  # noqa: BLE001 - a bad model setting fails the job with its reason
            raise JobFailed(f"cannot set up the strategist {self.spec.strategist!r}: {exc}") from exc
        return planner or default_planner, coder or default_coder

    def advise(self) -> KBAdvice:
        if self.kb is None:
            return KBAdvice()
        try:
            return self.kb.advice(self.traj)
        except Exception as exc:  # noqa: BLE001 - a KB that cannot answer must not stop the job
            log.warning("job %s plans without the knowledge base, which could not answer: %s", self.spec.job_id, exc)
            return KBAdvice()

    def context(self) -> PlanningContext:
        traj = self.traj
        return PlanningContext(
            spec=self.spec,
            workload_source=self.source,
            workload_name=traj.workload_name,
            analysis=traj.analysis,
            baseline=traj.baseline,
            history=list(traj.steps),
            budget=self.budget,
            kb=self.advice,
        )

    def held_s(self, ctx: PlanningContext) -> float:
        """The wall time kept back for the fallback step (``Budget.reserve_s``) while the job has no
        correct kernel and its planner's fallback is still on offer; otherwise none."""
        if self.traj.best_step is not None:
            return 0.0
        fallback = self.planner.fallback(ctx)
        if fallback is None or self._tried(fallback):
            return 0.0
        return self.budget.reserve_s

    def _tried(self, plan: Plan) -> bool:
        return any((s.plan.strategy, s.plan.params) == (plan.strategy, plan.params) for s in self.traj.steps)

    def limit_or_fallback(self, ctx: PlanningContext) -> tuple[Plan | None, str]:
        """Nothing while no limit is reached. A job stopped by its clock (not by its step count,
        which the planner plans within) must not end without a correct kernel while a safe one is
        on offer: the time held back for it (``Budget.holding_s``) comes due before the limit
        itself, and the planner's fallback gets one step with what is left, returned with the
        limit's words. No step begins once the limit itself is reached."""
        try:
            self.budget.check(before_step=True)
        except LimitReached as limit:
            if limit.kind == "iterations":
                raise JobSucceeded(str(limit)) from None
            fallback = None if self.traj.best_step is not None else self.planner.fallback(ctx)
            if fallback is None or self._tried(fallback) or self.budget.remaining_s() == 0.0:
                raise JobStopped(str(limit)) from None
            self.budget.holding_s = 0.0
            return fallback, str(limit)
        return None, ""

    def finish(self, exit: JobExit) -> Trajectory:
        traj = self.traj
        traj.overhead_usage = traj.overhead_usage.add(exit.usage)
        traj.state, traj.stop_reason = exit.state, exit.reason
        if exit.state == "succeeded" and traj.best_step is None:
            traj.state, traj.stop_reason = "failed", f"no correct candidate after {len(traj.steps)} step(s) ({exit.reason})"
        traj.updated_at = timestamp()
        self.sink.save(traj, None)
        if self.kb is not None and traj.steps:
            try:
                self.kb.ingest(traj)
            except Exception as exc:  # noqa: BLE001 - the job's result stands without the KB
                log.warning("could not record job %s in the knowledge base: %s", traj.job.job_id, exc)
        return traj
