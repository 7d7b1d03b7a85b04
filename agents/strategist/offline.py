"""The offline strategist: a planner and a coder that need no language model.

The planner ranks the options that apply to the workload's traced structure (``catalog.py``),
adjusted by what the knowledge base knows and by what this job has already measured: a strategy
whose kind of wrapper crashed is not tried again, a refinement is tried only after the option it
refines won, a candidate identical to one already evaluated is not written again, and the
reference itself is kept as a last resort so that a job always ends with a correct kernel.

With a knowledge base, a kernel kept from this workload (or the same computation at another
size or world size) is tried first, unless it was kept from a neighbouring size or world size
and its strategy's runs on nearly this workload average no gain; then the options the knowledge base saw win, fastest first; then those it knows nothing
of, in the catalog's order; and last the options it saw lose (the reference itself goes before
those when nothing correct is known yet). What it measured on nearly this workload decides over
what it measured on merely similar ones.
Once the job has a correct kernel, an option the knowledge base measured on this very workload
slower than it is not evaluated again, and when only such options are left the job ends.
The coder writes each option's candidate from the reference's own source.
"""

from __future__ import annotations

import hashlib

from agents.analysis import Analysis
from agents.records import NOT_EVALUATED, Plan, Usage
from agents.roles import CoderOutput, PlanningContext, StrategyHint
from kloom.static_check import check_candidate
from kloom.speedup import REFERENCE_COPY
from kloom.workload_parts import candidate_base

from .catalog import Option, options_for, option_key
from .codegen import NotApplicable, render, source_rewrites
from .cudnn_tuning import WRAPPER as CUDNN_WRAPPER, candidate as cudnn_candidate
from .triton_kernels.option import KERNEL_WRAPPERS, STRATEGY as KERNELS, kernel_candidate_for
from .triton_kernels.emit import tuned_block

#: Statuses after which other options with the same wrapper are not worth their evaluation.
_BROKEN = {"runtime_error", "crashed", "timeout", "compile_error"}
#: A knowledge-base kernel this similar is tried before anything else.
KB_REUSE_SIMILARITY = 0.6
#: Knowledge-base evidence that a strategy ran at least this much faster than the reference on
#: similar workloads puts it before the options the knowledge base knows nothing of; evidence of
#: less puts it after them (a reference run as a candidate measures within a few per cent of 1x).
KB_GAIN = 1.02
#: Evidence worth less than this (the summed similarity of the jobs behind it) changes nothing.
KB_MIN_WEIGHT = 0.5

_WINS, _UNKNOWN, _ANCHOR, _LOSES = 0, 1, 2, 3


def _tried(ctx: PlanningContext) -> set[str]:
    return {option_key(s.plan.strategy, s.plan.params) for s in ctx.history}


def _evaluated_code(ctx: PlanningContext) -> set[str]:
    return {s.candidate_sha256 for s in ctx.history if s.candidate_sha256 and s.status not in NOT_EVALUATED}


def _broken_wrappers(ctx: PlanningContext) -> set[str]:
    return {s.plan.params.get("wrapper") for s in ctx.history if s.status in _BROKEN and s.plan.source == "offline"}


def _won(ctx: PlanningContext, strategy: str) -> bool:
    return any(s.plan.strategy == strategy and (s.speedup or 0) > 1.0 for s in ctx.history)


def _sha(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def _evidence_for(strategy: str, ctx: PlanningContext) -> StrategyHint | None:
    """What the knowledge base offered about one strategy, if anything."""
    return next((h for h in ctx.kb.strategies if h.strategy == strategy), None)


def _measured(hint: StrategyHint | None) -> tuple[float | None, float]:
    """What the knowledge base measured of a strategy for this workload: on nearly this workload
    when it has enough of that (the same computation at a neighbouring size or world size, on
    this hardware), else on the similar workloads; (speedup, weight)."""
    if hint is None:
        return None, 0.0
    if hint.close_weight >= KB_MIN_WEIGHT:
        return hint.close_speedup, hint.close_weight
    return hint.speedup, hint.weight


def _tier(option: Option, evidence: dict[str, StrategyHint]) -> tuple[int, float]:
    """Where the knowledge base puts an option: (tier, the speedup it measured there)."""
    if option.strategy == REFERENCE_COPY:
        return _ANCHOR, 1.0
    speedup, weight = _measured(evidence.get(option.strategy))
    if weight < KB_MIN_WEIGHT:
        return _UNKNOWN, 0.0
    if speedup is not None and speedup >= KB_GAIN:
        return _WINS, speedup
    return _LOSES, speedup or 0.0


def _lost_kernels(ctx: PlanningContext) -> list[tuple[frozenset[str], float]]:
    """The template sets of this job's kernel candidates that ran correct and slower than the
    reference, with their speedups."""
    return [(frozenset(s.plan.params.get("templates") or ()), s.speedup) for s in ctx.history
            if s.plan.strategy == KERNELS and s.speedup is not None and s.speedup < 1.0 and s.plan.params.get("templates")]


def behind_lost_kernels(options: list[Option], ctx: PlanningContext) -> tuple[list[Option], set[str], str]:
    """``options`` with the kernel options that take every region of a kernel candidate this job
    measured slower than the reference moved after the others (the same slow kernels would run
    in them: a transposed convolution's kernel lost to cuDNN at 0.83x, and its second variant,
    with more regions, took the step torch.compile's 1.16x needed), the keys of those moved, and
    why."""
    lost = _lost_kernels(ctx)
    if not lost:
        return options, set(), ""

    def repeats(option: Option) -> bool:
        taken = set(option.params.get("templates") or ())
        return option.strategy == KERNELS and any(templates <= taken for templates, _ in lost)

    moved = {o.key for o in options if repeats(o)}
    if not moved:
        return options, set(), ""
    templates, speedup = min(lost, key=lambda t: t[1])
    why = (f"kloom's kernels for {', '.join(sorted(templates))} ran at {speedup:.2f}x the reference in this job: "
           "options without them first; ")
    return sorted(options, key=repeats), moved, why  # stable: the ranking holds within each part


#: An option whose first call is expected to compile longer than this share of the job's remaining
#: wall time, or than ``SLOW_SETUP_S`` without a wall limit (half the evaluator's first-call limit
#: on a GPU, ``EvalSettings.load_timeout_s``), is tried after the others: it may spend the job
#: compiling, and run out of its deadline before it computes anything.
SETUP_SHARE = 0.5
SLOW_SETUP_S = 300.0


def behind_slow_setup(options: list[Option], remaining_s: float | None) -> tuple[list[Option], set[str], str]:
    """``options`` with those whose estimated first-call compilation (``Option.setup_s``) is too
    long for the job moved after the others, the keys of those moved, and why."""
    limit = SLOW_SETUP_S if remaining_s is None else min(SLOW_SETUP_S, SETUP_SHARE * remaining_s)

    def slow(option: Option) -> bool:
        return option.setup_s > limit

    moved = {o.key for o in options if slow(o)}
    if not moved or all(slow(o) for o in options):
        return options, set(), ""
    shortest = min(o.setup_s for o in options if slow(o))
    left = f"{SETUP_SHARE:.0%} of the job's remaining {remaining_s:.0f} s" if remaining_s is not None and limit < SLOW_SETUP_S else f"{SLOW_SETUP_S:.0f} s"
    why = (f"kloom's kernel candidate would compile for ~{shortest:.0f} s before computing anything, more than {left}: "
           "options that start sooner first; ")
    return sorted(options, key=slow), moved, why  # stable: the ranking holds within each part


#: A reference at this share of its roofline floor (or nearer) leaves nothing worth a search.
AT_FLOOR = 0.9


def _at_floor(analysis: Analysis) -> str:
    """Why no kernel can be much faster than the reference (on a GPU, whose hardware profile
    was measured), or ""."""
    if analysis.device != "cuda" or not analysis.floor_ms or not analysis.reference_ms:
        return ""
    share = analysis.floor_ms / analysis.reference_ms
    if share < AT_FLOOR:
        return ""
    terms = analysis.roofline_terms
    bound = analysis.dominant or ("hbm" if (terms.get("hbm_ms") or 0) >= (terms.get("compute_ms") or 0) else "compute")
    return (f"the reference already runs at {100 * share:.0f}% of its roofline floor ({bound}-bound: "
            f"{analysis.floor_ms:.3g} of its {analysis.reference_ms:.3g} ms, from the {analysis.floor_from or 'workload'}'s "
            "figures): no kernel can be much faster")


class OfflinePlanner:
    #: Why the last ``plan`` call found nothing to try, when it was the knowledge base's doing.
    done_reason = ""

    def plan(self, ctx: PlanningContext) -> tuple[Plan | None, Usage]:
        self.done_reason = ""
        analysis = ctx.analysis
        if analysis is None:
            return None, Usage()
        tried = _tried(ctx)
        evaluated = _evaluated_code(ctx)
        reuse = self._kb_reuse(ctx, tried, evaluated)
        if reuse is not None:
            return reuse, Usage()
        at_floor = _at_floor(analysis)
        if at_floor and ctx.best is not None:
            # One correct candidate says the workload runs; the floor says none can gain more.
            self.done_reason = at_floor
            return None, Usage()
        remaining = ctx.budget.limits.max_iters - ctx.budget.steps_done
        # The reference's copy is the job's correct anchor: it is needed only while no candidate is
        # correct. A correct candidate slower than the reference already makes the job's outcome
        # "no faster kernel found" (the reference stands at 1.00x); spending the last step on the
        # copy then took the place of an untried option (torch.compile, 1.15x on a transposed
        # convolution whose two kernel candidates had lost).
        has_correct = ctx.best is not None
        ranked = self._ranked(ctx, analysis, tried)
        options, moved, why_moved = behind_lost_kernels(ranked, ctx)
        options, slow, why_slow = behind_slow_setup(options, ctx.budget.remaining_s())
        anchor = next((o for o in options if o.strategy == REFERENCE_COPY), None)
        if anchor and not has_correct and (remaining <= 1 or len(options) == 1):
            return self._plan(anchor, analysis, "no candidate is correct yet and this is the last step: "), Usage()
        settled = []
        for option in options:
            if option.strategy == REFERENCE_COPY:
                if not has_correct:
                    # Only options the knowledge base saw lose are left before it.
                    return self._plan(anchor, analysis, "the knowledge base measured every remaining option below the reference: "), Usage()
                continue
            if self._duplicate(option, ctx, evaluated):
                continue
            if has_correct and self._settled(option, ctx):
                settled.append(option.strategy)
                continue
            # Said where an option moved behind took its place.
            ahead = {o.key for o in ranked[:ranked.index(option)]}
            prefix = "".join(why for keys, why in ((moved, why_moved), (slow, why_slow)) if ahead & keys and option.key not in keys)
            return self._plan(option, analysis, prefix + self._kb_note(option, ctx)), Usage()
        self.done_reason = (
            f"the knowledge base measured the remaining option(s) ({', '.join(settled)}) on this very workload below "
            f"this job's best ({ctx.best.speedup:.2f}x)"
            if settled
            else ""
        )
        return None, Usage()

    def annotate(self, analysis: Analysis, source: str) -> None:
        """The rewrites of the reference's source that apply, each with the calls it changes: what
        the catalog offers its strategies by (``Analysis.source_rewrites``)."""
        analysis.source_rewrites = source_rewrites(source)

    def fallback(self, ctx: PlanningContext) -> Plan | None:
        """The reference itself, run as a candidate: the job's last resort for a correct kernel
        when its limits stop the search before anything else was correct."""
        analysis = ctx.analysis
        if analysis is None:
            return None
        anchor = next((o for o in options_for(analysis) if o.strategy == REFERENCE_COPY), None)
        if anchor is None:
            return None
        return self._plan(anchor, analysis, "a limit stopped the search with no correct candidate: ")

    def _kb_reuse(self, ctx: PlanningContext, tried: set[str], evaluated: set[str]) -> Plan | None:
        # The most similar first (this workload's own kernels before the same computation at
        # another size); among equals the knowledge base's order, fastest first.
        for hint in sorted(ctx.kb.kernels, key=lambda h: -round(h.similarity, 2)):
            if hint.similarity < KB_REUSE_SIMILARITY:
                break
            params = {"kernel_id": hint.kernel_id}
            if option_key("kb_reuse", params) in tried or _sha(hint.code) in evaluated:
                continue
            best = ctx.best.speedup if ctx.best is not None else None
            if best and hint.close and hint.speedup * KB_GAIN < best:
                continue  # measured on nearly this workload slower than what the job has
            if hint.close and not hint.exact and self._no_gain_nearby(hint.strategy, ctx):
                continue  # won at a neighbouring size, but its strategy gains nothing on nearly this workload
            if hint.strategy == KERNELS and not (hint.exact or hint.same_workload):
                # Its kernels run only on the traced shapes (elsewhere it falls back to the
                # reference); for this workload the strategy instantiates them from this trace,
                # ranked by the knowledge base's evidence for it.
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
        evidence = {h.strategy: h for h in ctx.kb.strategies}
        failed = {option_key(f.strategy, f.params) for f in ctx.kb.failures}
        ranked = []
        for option in options_for(analysis):
            if option.key in tried or option.key in failed:
                continue
            if option.params.get("wrapper") in broken and option.strategy != REFERENCE_COPY:
                continue
            if option.base and not _won(ctx, option.base):
                continue
            ranked.append(option)
        # Knowledge-base tiers first; within a tier, the speedup measured there, then the prior.
        return sorted(ranked, key=lambda o: (_tier(o, evidence)[0], -_tier(o, evidence)[1], -o.score))

    @staticmethod
    def _duplicate(option: Option, ctx: PlanningContext, evaluated: set[str]) -> bool:
        """Whether this option's candidate is one this job already evaluated (a kept kernel it
        reused, say): the same code measures the same."""
        if not evaluated:
            return False
        try:
            code = offline_candidate(ctx, option.params, option.strategy)
        except NotApplicable:
            return False  # the coder will say why
        return _sha(code) in evaluated

    @staticmethod
    def _no_gain_nearby(strategy: str, ctx: PlanningContext) -> bool:
        """Whether the knowledge base's runs of a strategy on nearly this workload, wins and
        losses together, average less than ``KB_GAIN``: a kernel kept from one of them won
        there by less than the others lost."""
        hint = _evidence_for(strategy, ctx)
        if hint is None or hint.close_weight < KB_MIN_WEIGHT:
            return False
        return hint.close_speedup is None or hint.close_speedup < KB_GAIN

    @staticmethod
    def _settled(option: Option, ctx: PlanningContext) -> bool:
        """Whether the knowledge base already measured this option on this very workload (the
        same computation, sizes, world size and hardware) slower than the best this job has:
        evaluating it again would spend a candidate to learn what is known. A neighbouring size
        or world size only orders the search: the balance of compute and communication moves
        with them, and one measurement there says too little to skip an option here."""
        hint = _evidence_for(option.strategy, ctx)
        if hint is None or hint.exact_weight < KB_MIN_WEIGHT or hint.exact_speedup is None or ctx.best is None:
            return False
        return hint.exact_speedup * KB_GAIN < (ctx.best.speedup or 0.0)

    @staticmethod
    def _kb_note(option: Option, ctx: PlanningContext) -> str:
        tuned = ""
        if option.strategy == KERNELS and ctx.kb.tuned:
            tuned = (f"its kernels start from the {len(ctx.kb.tuned)} autotuning choice(s) the knowledge base kept on this "
                     "hardware, pinned where a kernel and its key match (no timing, no compiling the other configurations); ")
        hint = _evidence_for(option.strategy, ctx)
        speedup, weight = _measured(hint)
        if hint is None or weight < KB_MIN_WEIGHT or speedup is None:
            return tuned
        where = "nearly this workload" if hint.close_weight >= KB_MIN_WEIGHT else "similar workloads"
        return f"the knowledge base measured it at {speedup:.2f}x on {where} ({hint.wins} won, {hint.losses} lost); " + tuned

    @staticmethod
    def _plan(option: Option, analysis: Analysis, prefix: str = "") -> Plan:
        bound = f"; the roofline says the step is {analysis.dominant}-bound" if analysis.dominant else ""
        return Plan(strategy=option.strategy, params=option.params, rationale=prefix + option.rationale + bound, source="offline")


def offline_candidate(ctx: PlanningContext, params: dict, label: str) -> str:
    """The candidate the offline coder writes for an option: the reference's source, rewritten
    and wrapped as ``params`` say (or, for the kernel strategy, with kloom's kernels; for cuDNN
    tuning, under cuDNN's autotuner)."""
    # The workload's computation only: its harness (input builders, metadata) is not candidate code.
    source = candidate_base(ctx.workload_source)
    if params.get("wrapper") in KERNEL_WRAPPERS:
        code = kernel_candidate_for(source, ctx.analysis, params, label)
        return code + tuned_block(code, ctx.kb.tuned)
    if params.get("wrapper") == CUDNN_WRAPPER:
        return cudnn_candidate(source, params, label)
    analysis = ctx.analysis
    return render(
        source,
        params,
        mutated_inputs=analysis.mutated_inputs if analysis else [],
        label=label,
        row_split=analysis.row_split if analysis else None,
    )


class OfflineCoder:
    def write(self, plan: Plan, ctx: PlanningContext) -> CoderOutput:
        if plan.strategy == "kb_reuse":
            hint = next((h for h in ctx.kb.kernels if h.kernel_id == plan.params.get("kernel_id")), None)
            if hint is None:
                return CoderOutput(None, error=f"knowledge-base kernel {plan.params.get('kernel_id')} is no longer offered")
            return CoderOutput(hint.code + (tuned_block(hint.code, ctx.kb.tuned) if hint.strategy == KERNELS else ""))
        try:
            code = offline_candidate(ctx, plan.params, plan.strategy)
        except NotApplicable as exc:
            return CoderOutput(None, error=f"{plan.strategy} does not apply: {exc}")
        violations = check_candidate(code, "<offline candidate>")
        if violations:
            listed = "; ".join(str(v) for v in violations[:3])
            return CoderOutput(None, error=f"the reference's source breaks the candidate rules, so it cannot be reused: {listed}")
        return CoderOutput(code)
