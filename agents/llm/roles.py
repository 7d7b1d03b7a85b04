"""The planner and the coder, backed by a model through ``LLMClient``.

They implement ``agents.roles.Planner`` and ``agents.roles.Coder``. What the model wrote never
raises out of them, except the planner's ``ModelOutputError`` (an unusable plan), which the loop
records as a failed step; failures to reach the model raise the client's typed ``LLMError``s.
"""

from __future__ import annotations

from agents.prompts import render
from agents.records import Plan, Usage
from agents.roles import CoderOutput, Planner, PlanningContext
from agents.strategist.triton_kernels.emit import tuned_block

from . import views
from .client import LLMClient
from .errors import ModelOutputError
from .library import LibraryTemplate, applicable_templates, complete_candidate
from .parse import ParseFailure, read_code, read_plan


class LLMPlanner(Planner):
    """Asks the model for the next strategy as a small JSON object."""

    def __init__(self, client: LLMClient):
        self.client = client

    def messages(self, ctx: PlanningContext) -> list[dict[str, str]]:
        """The system and user messages for this context."""
        view = views.planner_view(ctx)
        return [
            {"role": "system", "content": render("planner_system.j2", **view)},
            {"role": "user", "content": render("planner_user.j2", **view)},
        ]

    def plan(self, ctx: PlanningContext) -> tuple[Plan | None, Usage]:
        """The next plan (None: the model sees nothing left worth trying) and the call's usage."""
        completion = self.client.complete(self.messages(ctx), budget=ctx.budget)
        answer = read_plan(completion.text)
        if isinstance(answer, ParseFailure):
            reason = answer.reason
            if completion.truncated:
                reason += " (the answer was cut off at the output-token limit)"
            raise ModelOutputError(f"planner answer unusable: {reason}", completion.usage, completion.text)
        if answer.stops:
            return None, completion.usage
        known = {s.index for s in ctx.history if s.candidate_code}
        base_step = answer.base_step if answer.base_step in known else (ctx.best.index if ctx.best else None)
        plan = Plan(
            strategy=answer.strategy,
            params=answer.params,
            rationale=answer.rationale,
            source="llm",
            base_step=base_step,
        )
        return plan, completion.usage


class LLMCoder:
    """Asks the model for the candidate file and takes its ```python block. The prompt carries
    kloom's kernel library where it applies (``library.py``); a candidate that calls a library
    function gets the function's module embedded."""

    def __init__(self, client: LLMClient):
        self.client = client

    @staticmethod
    def offered(ctx: PlanningContext) -> list[LibraryTemplate]:
        """The library's templates that match the traced workload."""
        return applicable_templates(ctx.analysis.op_graph if ctx.analysis else None)

    def messages(self, plan: Plan, ctx: PlanningContext, offered: list[LibraryTemplate] | None = None) -> list[dict[str, str]]:
        """The system and user messages for this plan and context."""
        offered = self.offered(ctx) if offered is None else offered
        view = {**views.coder_view(plan, ctx, offered), "rules": views.candidate_rules()}
        return [
            {"role": "system", "content": render("coder_system.j2", **view)},
            {"role": "user", "content": render("coder_user.j2", **view)},
        ]

    def write(self, plan: Plan, ctx: PlanningContext) -> CoderOutput:
        """The candidate source, or ``code=None`` with the reason the answer had none usable."""
        offered = self.offered(ctx)
        completion = self.client.complete(self.messages(plan, ctx, offered), budget=ctx.budget)
        code = read_code(completion.text, truncated=completion.truncated)
        if isinstance(code, ParseFailure):
            return CoderOutput(code=None, usage=completion.usage, error=f"coder answer unusable: {code.reason}")
        code = complete_candidate(code, offered)
        # The library's kernels it calls start from the autotuning choices kept on this hardware.
        return CoderOutput(code=code + tuned_block(code, ctx.kb.tuned), usage=completion.usage)
