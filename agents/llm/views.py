"""What the prompt templates read: a ``PlanningContext`` turned into plain, clipped values.

Templates stay free of logic; everything that decides what a model sees (which steps, how much
of a profile, how long an error may be) is here, in one place, and tested.
"""

from __future__ import annotations

import json
from typing import Any

from agents.analysis import Analysis
from agents.records import Plan, Step
from agents.roles import PlanningContext
from kloom.evaluation import BaselineResult, ErrorInfo
from kloom import static_check as sc
from kloom.profile import Profile

from .library import LibraryTemplate

#: Characters kept of each free-text field, so that a long history still fits a context window.
CLIP = {"feedback": 600, "error": 1500, "profile": 1500, "analysis": 4000, "evidence": 400, "traceback": 1500, "kb_code": 12000}
#: Kept kernels shown to the coder as worked examples.
KB_EXAMPLES = 2


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def compact(value: Any) -> str:
    """Short, stable JSON for params and small dicts."""
    return json.dumps(value, sort_keys=True, default=str)


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:.4g} ms"


def workload_view(ctx: PlanningContext) -> dict[str, Any]:
    spec = ctx.spec
    return {
        "name": ctx.workload_name,
        "source": ctx.workload_source.strip(),
        "world_size": spec.world_size,
        "device": spec.device,
        "backend": "NCCL" if spec.device == "cuda" else "gloo",
        "shapes": spec.shapes or ("gpu" if spec.device == "cuda" else "ci"),
    }


def analysis_view(analysis: Analysis | None) -> dict[str, Any] | None:
    """The traced structure as ``key: value`` lines, its fields as stored (empty ones left out)."""
    if analysis is None:
        return None
    lines = [
        f"- {key}: {value if isinstance(value, str) else compact(value)}"
        for key, value in sorted(analysis.to_dict().items())
        if value not in (None, "", [], {})
    ]
    return {"details": clip("\n".join(lines), CLIP["analysis"])}


def roofline_view(baseline: BaselineResult | None) -> dict[str, Any] | None:
    """The reference time and the floor: which term (compute, HBM, link) bounds the workload."""
    if baseline is None:
        return None
    roofline = baseline.roofline
    view = {
        "reference_ms": _ms(baseline.reference_ms),
        "status": baseline.status,
        "dominant": roofline.dominant if roofline else None,
        "floor_ms": _ms(roofline.floor_ms if roofline else None),
        "compute_ms": _ms(roofline.compute_ms if roofline else None),
        "hbm_ms": _ms(roofline.hbm_ms if roofline else None),
        "link_ms": _ms(roofline.link_ms if roofline else None),
        "profile": roofline.profile if roofline else None,
        "reference_fraction": roofline.reference_fraction if roofline else None,
    }
    if view["reference_fraction"] is not None:
        view["reference_fraction"] = f"{100 * view['reference_fraction']:.1f}%"
    return view


def profile_summary(profile: Profile | None) -> str:
    """The profiler's summary for agents when it has one, else the record itself, clipped."""
    if profile is None:
        return ""
    if profile.summary.strip():
        return clip(profile.summary, CLIP["profile"])
    return clip(json.dumps(profile.to_dict(), sort_keys=True, default=str), CLIP["profile"])


def _evaluator_error(step: Step) -> ErrorInfo | None:
    return step.evaluation.error if step.evaluation else None


def error_line(step: Step) -> str:
    """The step's own error, else the evaluator's error message."""
    error = _evaluator_error(step)
    return step.error or (error.message if error else "") or ""


def failure_text(step: Step) -> str:
    """Why a step failed, as the coder needs it for a repair: error, evaluator error, feedback."""
    parts = []
    if step.error:
        parts.append(clip(step.error, CLIP["error"]))
    error = _evaluator_error(step)
    if error and error.message and error.message not in step.error:
        where = f" on rank {error.rank}" if error.rank is not None else ""
        phase = f" during {error.phase}" if error.phase else ""
        parts.append(f"{error.kind or step.status}{where}{phase}: {clip(error.message, CLIP['error'])}")
    if error and error.traceback:
        tail = error.traceback.strip()[-CLIP["traceback"] :]
        parts.append(f"traceback (end):\n{tail}")
    if step.feedback:
        parts.append(clip(step.feedback, CLIP["feedback"]))
    return "\n".join(parts) or step.status


def step_view(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "strategy": step.plan.strategy,
        "params": compact(step.plan.params),
        "source": step.plan.source,
        "base_step": step.plan.base_step,
        "status": step.status,
        "correct": step.correct,
        "speedup": None if step.speedup is None else f"{step.speedup:.3g}x",
        "candidate_ms": _ms(step.candidate_ms),
        "fraction_of_floor": None if step.fraction_of_floor is None else f"{100 * step.fraction_of_floor:.1f}%",
        "feedback": clip(step.feedback, CLIP["feedback"]),
        "error": "" if step.correct else clip(error_line(step), CLIP["feedback"]),
        "profile": profile_summary(step.profile),
    }


def kb_view(ctx: PlanningContext) -> dict[str, Any]:
    kb = ctx.kb
    return {
        "kernels": [
            {
                "workload": k.workload_name,
                "strategy": k.strategy,
                "params": compact(k.params),
                "speedup": f"{k.speedup:.3g}x",
                "similarity": f"{k.similarity:.2f}",
                "same_workload": k.same_workload,
            }
            for k in kb.kernels
        ],
        "strategies": [
            {
                "strategy": s.strategy,
                "description": s.description,
                "params": compact(s.params),
                "wins": s.wins,
                "losses": s.losses,
                "confidence": f"{s.confidence:.2f}",
                "measured": f"{s.speedup:.2f}x" if s.speedup is not None else "",
                "evidence": clip(s.evidence, CLIP["evidence"]),
            }
            for s in kb.strategies
        ],
        "failures": [
            {"strategy": f.strategy, "params": compact(f.params), "reason": clip(f.reason, CLIP["evidence"]), "count": f.count}
            for f in kb.failures
        ],
    }


def planner_view(ctx: PlanningContext) -> dict[str, Any]:
    """Everything the planner's templates read."""
    best, last = ctx.best, ctx.last
    limits = ctx.budget.limits
    return {
        "workload": workload_view(ctx),
        "analysis": analysis_view(ctx.analysis),
        "roofline": roofline_view(ctx.baseline),
        "history": [step_view(s) for s in ctx.history],
        "best": step_view(best) if best else None,
        "last": step_view(last) if last and last is not best else None,
        "kb": kb_view(ctx),
        "steps_left": max(0, limits.max_iters - ctx.budget.steps_done),
    }


def coder_view(plan: Plan, ctx: PlanningContext, offered: list[LibraryTemplate] | tuple = ()) -> dict[str, Any]:
    """Everything the coder's templates read: the plan, the code to build on, the last failure,
    kept kernels as worked examples, and the library's templates ``offered`` for the workload."""
    by_index = {s.index: s for s in ctx.history}
    base = by_index.get(plan.base_step) if plan.base_step is not None else None
    if base is None or not base.candidate_code:
        base = ctx.best
    last = ctx.last
    failed = last if last is not None and not last.correct and last.status != "skipped" else None
    # Kept kernels with Triton code of their own first (the worked examples the library asks
    # for), then the most similar.
    examples = sorted(ctx.kb.kernels, key=lambda k: ("@triton.jit" not in k.code, -k.similarity))[:KB_EXAMPLES]
    failure = None
    if failed is not None:
        same_code = base is not None and failed.candidate_code == base.candidate_code
        failure = {**step_view(failed), "text": failure_text(failed), "code": "" if same_code else (failed.candidate_code or "").strip()}
    return {
        "plan": {
            "strategy": plan.strategy,
            "params": compact(plan.params),
            "rationale": plan.rationale,
        },
        "workload": workload_view(ctx),
        "roofline": roofline_view(ctx.baseline),
        "base": {**step_view(base), "code": base.candidate_code.strip()} if base is not None and base.candidate_code else None,
        "failure": failure,
        "kb_kernels": [
            {"workload": k.workload_name, "strategy": k.strategy, "speedup": f"{k.speedup:.3g}x", "code": clip(k.code, CLIP["kb_code"])}
            for k in examples
        ],
        "library": library_view(list(offered)),
    }


def library_view(offered: list[LibraryTemplate]) -> list[dict[str, Any]]:
    """The kernel library's templates that apply to the workload, as the coder's prompt shows them."""
    return [
        {
            "entry": t.entry,
            "module": t.module,
            "kind": t.kind,
            "signature": t.signature,
            "example": t.example,
            "legend": t.legend,
            "rationale": t.rationale,
            "verdict": t.verdict,
        }
        for t in offered
    ]


def candidate_rules() -> dict[str, Any]:
    """The candidate format's allow-lists, read from the static checker so the prompt cannot drift."""
    return {
        "allowed_modules": sorted(m for m in sc.ALLOWED_MODULES if m != "__future__"),
        "denied_submodules": list(sc.DENIED_SUBMODULES),
        "os_attrs": sorted(sc.ALLOWED_OS_ATTRS),
        "denied_builtins": sorted(sc.DENIED_BUILTINS),
        "swallowable": sorted(sc.SWALLOWABLE),
    }
