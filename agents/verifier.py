"""The verifier: runs the evaluator (which applies the static checks first) on a candidate, asks
for a profile when the policy says so, and turns both into feedback for the next plan."""

from __future__ import annotations

from typing import Protocol

from kloom.evaluation import EvalResult
from kloom.profile import Profile

from .records import Plan, Step, best_of
from .roles import Evaluator, PlanningContext, Verdict


class Profiler(Protocol):
    """Profiles one candidate (``services.worker.profiler.job_profiler`` makes one for a job)."""

    def __call__(self, workload: str, code: str, *, world_size: int, device: str) -> Profile: ...


class Verifier:
    def __init__(self, evaluator: Evaluator, profiler: Profiler | None = None, policy: str = "new_best"):
        self.evaluator = evaluator
        self.profiler = profiler
        self.policy = policy

    def verify(self, code: str, plan: Plan, ctx: PlanningContext, deadline_s: float | None = None, more_after: int = 0) -> Verdict:
        """Evaluate (within ``deadline_s`` seconds when given; ``more_after``: the steps the job
        may still take after this one), profile as the policy says, and write the feedback."""
        result = self.evaluator.evaluate(ctx.spec.workload, candidate_source=code, world_size=ctx.spec.world_size, deadline_s=deadline_s,
                                         more_after=more_after)
        profile = None
        if result.correct and self._should_profile(result, plan, ctx):
            profile = self.profiler(ctx.spec.workload, code, world_size=ctx.spec.world_size, device=ctx.spec.device)
        return Verdict(status=result.status, evaluation=result, profile=profile, feedback=feedback(result, plan, profile, ctx))

    def _should_profile(self, result: EvalResult, plan: Plan, ctx: PlanningContext) -> bool:
        if self.profiler is None or self.policy == "none":
            return False
        if self.policy == "every_correct":
            return True
        return ctx.best is None or beats_best(result, plan, ctx)


def beats_best(result: EvalResult, plan: Plan, ctx: PlanningContext) -> bool:
    """Whether a correct candidate would become the job's best step (``agents.records.best_of``,
    the rule the job's best is chosen by, over the steps so far and this one)."""
    if not (result.correct and result.timing):
        return False
    probe = Step(index=1 + max((s.index for s in ctx.history), default=-1), plan=plan, status="correct", evaluation=result)
    return best_of([*ctx.history, probe]) is probe


def feedback(result: EvalResult, plan: Plan, profile: Profile | None, ctx: PlanningContext) -> str:
    """A few lines for the planner: what happened, how it compares, what bounds it."""
    lines = [result.summary()]
    best = ctx.best
    if result.correct and result.timing:
        if best is None:
            lines.append("first correct candidate of this job")
        elif beats_best(result, plan, ctx):
            lines.append(f"new best: {result.timing.speedup:.3f}x against step {best.index}'s {best.reported_speedup:.3f}x")
        else:
            lines.append(f"not better than step {best.index} ({best.reported_speedup:.3f}x, {best.candidate_ms:.4g} ms)")
        roof = result.roofline
        if roof:
            lines.append(
                f"roofline: floor {roof.floor_ms:.4g} ms ({roof.dominant}-bound), candidate at "
                f"{100 * (roof.fraction_of_floor or 0):.0f}% of it"
            )
    elif result.error:
        detail = (result.error.traceback or result.error.log_tail or "").strip().splitlines()[-6:]
        if detail:
            lines.append("last lines of the error:\n" + "\n".join(detail))
    if profile is not None and profile.summary:
        lines.append(profile.summary)
    return "\n".join(lines)
