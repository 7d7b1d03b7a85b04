"""The offline strategist: a planner and a coder that need no language model.

The planner ranks the options that apply to the workload's traced structure (``catalog.py``),
adjusted by what the knowledge base knows and by what this job has already measured: a strategy
whose kind of wrapper crashed is not tried again, a refinement is tried only after the option it
refines won, and the reference itself is kept as a last resort so that a job always ends with a
correct kernel. The coder writes each option's candidate from the reference's own source.
"""

from __future__ import annotations

from agents.analysis import Analysis
from agents.records import Plan, Usage
from agents.roles import CoderOutput, PlanningContext
from services.worker.evaluator.static_check import check_candidate

from .catalog import Option, options_for, option_key
from .codegen import NotApplicable, render

#: Statuses after which other options with the same wrapper are not worth their evaluation.
_BROKEN = {"runtime_error", "crashed", "timeout", "compile_error"}
#: A knowledge-base kernel this similar is tried before anything else.
KB_REUSE_SIMILARITY = 0.6


def _tried(ctx: PlanningContext) -> set[str]:
    return {option_key(s.plan.strategy, s.plan.params) for s in ctx.history}


def _broken_wrappers(ctx: PlanningContext) -> set[str]:
    return {s.plan.params.get("wrapper") for s in ctx.history if s.status in _BROKEN and s.plan.source == "offline"}


def _won(ctx: PlanningContext, strategy: str) -> bool:
    return any(s.plan.strategy == strategy and (s.speedup or 0) > 1.0 for s in ctx.history)


class OfflinePlanner:
    def plan(self, ctx: PlanningContext) -> tuple[Plan | None, Usage]:
        if ctx.analysis is None:
            return None, Usage()
        analysis = Analysis.from_dict(ctx.analysis)
        tried = _tried(ctx)
        reuse = self._kb_reuse(ctx, tried)
        if reuse is not None:
            return reuse, Usage()
        remaining = ctx.budget.limits.max_iters - ctx.budget.steps_done
        # A best slower than the reference is no better than the reference itself.
        has_correct = ctx.best is not None and (ctx.best.speedup or 0.0) >= 1.0
        options = self._ranked(ctx, analysis, tried)
        anchor = next((o for o in options if o.strategy == "reference_copy"), None)
        if anchor and not has_correct and (remaining <= 1 or len(options) == 1):
            return self._plan(anchor, analysis, "no candidate is correct yet and this is the last step: "), Usage()
        for option in options:
            if option.strategy != "reference_copy":
                return self._plan(option, analysis), Usage()
        if anchor and not has_correct:
            return self._plan(anchor, analysis), Usage()
        return None, Usage()

    def fallback(self, ctx: PlanningContext) -> Plan | None:
        """The reference itself, run as a candidate: the job's last resort for a correct kernel
        when its limits stop the search before anything else was correct."""
        if ctx.analysis is None:
            return None
        anchor = next((o for o in options_for(Analysis.from_dict(ctx.analysis)) if o.strategy == "reference_copy"), None)
        if anchor is None:
            return None
        return self._plan(anchor, Analysis.from_dict(ctx.analysis), "a limit stopped the search with no correct candidate: ")

    def _kb_reuse(self, ctx: PlanningContext, tried: set[str]) -> Plan | None:
        for hint in sorted(ctx.kb.kernels, key=lambda h: -h.similarity):
            if hint.similarity < KB_REUSE_SIMILARITY:
                break
            params = {"kernel_id": hint.kernel_id}
            if option_key("kb_reuse", params) in tried:
                continue
            where = "this workload" if hint.same_workload else f"{hint.workload_name} (similarity {hint.similarity:.2f})"
            return Plan(
                strategy="kb_reuse",
                params=params,
                rationale=(
                    f"the knowledge base kept a {hint.speedup:.2f}x kernel ({hint.strategy}) from {where}; it goes "
                    "through the evaluator like any candidate"
                ),
                source="kb",
            )
        return None

    def _ranked(self, ctx: PlanningContext, analysis: Analysis, tried: set[str]) -> list[Option]:
        broken = _broken_wrappers(ctx)
        confidence = {h.strategy: h.confidence for h in ctx.kb.strategies}
        failed = {option_key(f.strategy, f.params) for f in ctx.kb.failures}
        ranked = []
        for option in options_for(analysis):
            if option.key in tried or option.key in failed:
                continue
            if option.params.get("wrapper") in broken and option.strategy != "reference_copy":
                continue
            if option.base and not _won(ctx, option.base):
                continue
            option.score += 0.5 * confidence.get(option.strategy, 0.0)
            ranked.append(option)
        return sorted(ranked, key=lambda o: -o.score)

    @staticmethod
    def _plan(option: Option, analysis: Analysis, prefix: str = "") -> Plan:
        bound = f"; the roofline says the step is {analysis.dominant}-bound" if analysis.dominant else ""
        return Plan(strategy=option.strategy, params=option.params, rationale=prefix + option.rationale + bound, source="offline")


class OfflineCoder:
    def write(self, plan: Plan, ctx: PlanningContext) -> CoderOutput:
        if plan.strategy == "kb_reuse":
            hint = next((h for h in ctx.kb.kernels if h.kernel_id == plan.params.get("kernel_id")), None)
            if hint is None:
                return CoderOutput(None, error=f"knowledge-base kernel {plan.params.get('kernel_id')} is no longer offered")
            return CoderOutput(hint.code)
        mutated = (ctx.analysis or {}).get("mutated_inputs", [])
        try:
            code = render(
                ctx.workload_source,
                plan.params,
                mutated_inputs=mutated,
                label=plan.strategy,
                row_split=(ctx.analysis or {}).get("row_split"),
            )
        except NotApplicable as exc:
            return CoderOutput(None, error=f"{plan.strategy} does not apply: {exc}")
        violations = check_candidate(code, "<offline candidate>")
        if violations:
            listed = "; ".join(str(v) for v in violations[:3])
            return CoderOutput(None, error=f"the reference's source breaks the candidate rules, so it cannot be reused: {listed}")
        return CoderOutput(code)
