"""How the offline planner orders a job by what the knowledge base measured on similar workloads:
winners first, losers after everything it knows nothing of, a kept kernel before all of them, and
never the same candidate twice."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from agent_helpers import planning_context

from agents.analysis import build_analysis
from agents.records import Plan, Step
from agents.roles import KBAdvice, KernelHint, StrategyHint
from agents.strategist import OfflinePlanner
from agents.strategist.catalog import options_for
from agents.strategist.codegen import source_rewrites
from agents.strategist.offline import KB_MIN_WEIGHT, behind_lost_kernels, offline_candidate
from agents.strategist.options import Option
from kloom.suite import find
from tests import eval_records

#: On the CPU the vocab-parallel cross-entropy has three options besides the reference.
OPTIONS = {"torch_compile", "coalesce_allreduce_compiled", "coalesce_allreduce"}


@pytest.fixture(scope="module")
def cross_entropy(evaluator):
    path = Path(find("vocab_parallel_cross_entropy").path)
    analysis = build_analysis(evaluator.analyze(path, world_size=2), family="vocab_parallel", world_size=2, device="cpu", baseline=None)
    analysis.source_rewrites = source_rewrites(path.read_text())  # as the loop does
    return path, analysis


@pytest.fixture(scope="module")
def catalog_order(cross_entropy):
    """The catalog's own order of the options (the reference apart)."""
    order = [o.strategy for o in options_for(cross_entropy[1]) if o.strategy != "reference_copy"]
    assert set(order) == OPTIONS
    return order


def _evidence(strategy: str, speedup: float | None, weight: float = 1.0) -> StrategyHint:
    won = speedup is not None and speedup > 1
    return StrategyHint(strategy, "", {}, int(won), int(not won), 0.0, speedup=speedup, weight=weight)


def _step(index: int, plan: Plan, code: str, speedup: float | None) -> Step:
    evaluation = eval_records.evaluation(timing=eval_records.timing(speedup, 1.0 / speedup)) if speedup else None
    status = "correct" if speedup else "incorrect"
    return Step(index, plan, status, code, hashlib.sha256(code.encode()).hexdigest(), evaluation)


def _run(ctx, speedups: dict[str, float]) -> list[str]:
    """Plan, 'evaluate' at the given speedups, and repeat until the planner is done."""
    planner = OfflinePlanner()
    order = []
    while True:
        plan, _ = planner.plan(ctx)
        if plan is None or len(order) > 8:
            return order
        if plan.strategy == "kb_reuse":
            code = next(k.code for k in ctx.kb.kernels if k.kernel_id == plan.params["kernel_id"])
        else:
            code = offline_candidate(ctx, plan.params, plan.strategy)
        order.append(plan.strategy)
        ctx.history.append(_step(len(ctx.history), plan, code, speedups.get(plan.strategy, 1.0)))
        ctx.budget.steps_done = len(ctx.history)


def test_without_evidence_the_catalog_order_stands(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    assert _run(planning_context(path, analysis), {}) == catalog_order  # the reference would come only if nothing were correct


def test_winners_on_similar_workloads_go_first_fastest_first_and_losers_last(cross_entropy):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[_evidence("torch_compile", 0.8), _evidence("coalesce_allreduce", 2.1), _evidence("coalesce_allreduce_compiled", 1.3)])
    first, _ = OfflinePlanner().plan(ctx)
    assert first.strategy == "coalesce_allreduce"
    assert "measured it at 2.10x" in first.rationale
    assert _run(ctx, {"coalesce_allreduce": 2.0, "coalesce_allreduce_compiled": 1.4}) == ["coalesce_allreduce", "coalesce_allreduce_compiled", "torch_compile"]


def test_a_strategy_seen_to_lose_goes_after_those_without_evidence(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[_evidence("torch_compile", 0.9)])
    assert _run(ctx, {"coalesce_allreduce": 1.5}) == [s for s in catalog_order if s != "torch_compile"] + ["torch_compile"]


def test_when_everything_left_lost_elsewhere_the_reference_comes_first(cross_entropy):
    """Nothing correct yet and the knowledge base saw every option lose: the job establishes its
    correct anchor before spending candidates on them (and still tries them after)."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[_evidence(s, 0.7) for s in OPTIONS])
    order = _run(ctx, {})
    assert order[0] == "reference_copy"
    assert sorted(order[1:]) == sorted(OPTIONS)


def test_correct_candidates_slower_than_the_reference_leave_the_last_step_to_an_untried_option(cross_entropy, catalog_order):
    """A correct candidate, even a slower one, is the job's correct anchor: the reference's copy
    does not take the last step from an option not yet tried."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.budget.limits.max_iters = len(catalog_order)
    order = _run(ctx, {s: 0.8 for s in OPTIONS})
    assert order == catalog_order and "reference_copy" not in order


def test_with_nothing_correct_the_last_step_is_the_reference(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.budget.limits.max_iters = 2
    planner = OfflinePlanner()
    plan, _ = planner.plan(ctx)
    ctx.history.append(_step(0, plan, offline_candidate(ctx, plan.params, plan.strategy), None))
    ctx.budget.steps_done = 1
    last, _ = planner.plan(ctx)
    assert last.strategy == "reference_copy" and "no candidate is correct yet" in last.rationale


def test_thin_evidence_changes_nothing(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[_evidence("coalesce_allreduce", 3.0, weight=KB_MIN_WEIGHT / 2), _evidence("torch_compile", 0.5, weight=KB_MIN_WEIGHT / 2)])
    assert _run(ctx, {}) == catalog_order


def test_a_kept_kernel_comes_first_and_its_strategy_is_not_written_again(cross_entropy, catalog_order):
    """The kept kernel is what the catalog's option would write for this workload: once it has
    been evaluated, that option would measure the same and is passed over."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    kept = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    ctx.kb = KBAdvice(kernels=[KernelHint("k7", kept, "coalesce_allreduce", {}, 2.0, "vocab_parallel_cross_entropy", 1.0, True)])
    order = _run(ctx, {"kb_reuse": 2.0})
    assert order == ["kb_reuse"] + [s for s in catalog_order if s != "coalesce_allreduce"]


def test_a_kept_kernel_already_evaluated_is_not_reused(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    code = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    ctx.history.append(_step(0, Plan("coalesce_allreduce", {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}), code, 2.0))
    ctx.kb = KBAdvice(kernels=[KernelHint("k7", code, "coalesce_allreduce", {}, 2.0, "vocab_parallel_cross_entropy", 1.0, True)])
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy == next(s for s in catalog_order if s != "coalesce_allreduce")


def _close(strategy: str, speedup: float, weight: float = 1.0) -> StrategyHint:
    """Evidence from nearly this workload (a neighbouring size or world size)."""
    hint = _evidence(strategy, speedup, weight)
    hint.close_speedup, hint.close_weight = speedup, weight
    return hint


def _exact(strategy: str, speedup: float, weight: float = 1.0) -> StrategyHint:
    """Evidence from this very workload (which is also nearly this workload)."""
    hint = _close(strategy, speedup, weight)
    hint.exact_speedup, hint.exact_weight = speedup, weight
    return hint


def test_options_measured_slower_on_this_very_workload_are_not_evaluated_again(cross_entropy, catalog_order):
    """Once the job has a correct kernel, an option the knowledge base measured on this very
    workload slower than that kernel is passed over; when only such options are left, the job
    ends and says why."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    kept = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    ctx.kb = KBAdvice(
        kernels=[KernelHint("k7", kept, "coalesce_allreduce", {}, 2.0, "vocab_parallel_cross_entropy", 1.0, True, True, True)],
        strategies=[_exact("torch_compile", 1.2), _exact("coalesce_allreduce_compiled", 1.4), _exact("coalesce_allreduce", 2.0)],
    )
    planner = OfflinePlanner()
    assert _run(ctx, {"kb_reuse": 1.9}) == ["kb_reuse"]
    assert planner.plan(ctx)[0] is None
    assert "torch_compile" in planner.done_reason and "1.90x" in planner.done_reason


def test_a_neighbouring_size_only_orders_the_search(cross_entropy, catalog_order):
    """The same measurements from a neighbouring world size end nothing: the job tries every
    option, those measured faster there first and those measured slower last (at ws2 torch_compile
    lost on CPU where at ws4 it won 1.25x)."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    kept = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    ctx.kb = KBAdvice(
        kernels=[KernelHint("k7", kept, "coalesce_allreduce", {}, 2.0, "vocab_parallel_cross_entropy", 0.95, True, True)],
        strategies=[_close("torch_compile", 0.9), _close("coalesce_allreduce_compiled", 1.4), _close("coalesce_allreduce", 2.0)],
    )
    planner = OfflinePlanner()
    assert _run(ctx, {"kb_reuse": 1.9}) == ["kb_reuse", "coalesce_allreduce_compiled", "torch_compile"]
    assert planner.done_reason == ""


def test_an_option_measured_faster_on_this_workload_is_still_tried(cross_entropy):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    kept = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    ctx.kb = KBAdvice(
        kernels=[KernelHint("k7", kept, "coalesce_allreduce", {}, 2.0, "vocab_parallel_cross_entropy", 1.0, True, True, True)],
        strategies=[_exact("torch_compile", 1.2), _exact("coalesce_allreduce_compiled", 2.6)],
    )
    # The reused kernel measured only 1.5x now: the compiled variant (2.6x before) may beat it, and
    # the option without evidence is tried too; torch_compile (1.2x before) is not.
    assert _run(ctx, {"kb_reuse": 1.5, "coalesce_allreduce_compiled": 2.4}) == ["kb_reuse", "coalesce_allreduce_compiled"]


def test_distant_evidence_never_ends_a_job_early(cross_entropy, catalog_order):
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[_evidence(s, 0.5) for s in OPTIONS])  # lost everywhere, but nowhere close
    order = _run(ctx, {"reference_copy": 1.0})
    assert order[0] == "reference_copy" and sorted(order[1:]) == sorted(OPTIONS)


def test_a_kept_kernel_measured_slower_nearby_than_the_jobs_best_is_not_reused(cross_entropy):
    """After the first kept kernel (2.0x here), another kept from nearly this workload at 1.3x is
    passed over; one from a merely similar workload is still tried (its speedup there says little)."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    first = offline_candidate(ctx, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, "coalesce_allreduce")
    slower = offline_candidate(ctx, {"wrapper": "compile", "compile_mode": "default"}, "torch_compile")
    ctx.kb = KBAdvice(kernels=[KernelHint("k1", first, "coalesce_allreduce", {}, 2.0, "x", 1.0, True, True), KernelHint("k2", slower, "torch_compile", {}, 1.3, "x", 0.9, False, True)])
    plan, _ = OfflinePlanner().plan(ctx)
    ctx.history.append(_step(0, plan, first, 2.0))
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy != "kb_reuse"
    ctx.kb.kernels[1].close = False
    plan, _ = OfflinePlanner().plan(ctx)
    assert (plan.strategy, plan.params) == ("kb_reuse", {"kernel_id": "k2"})


def test_evidence_on_nearly_this_workload_decides_over_similar_workloads(cross_entropy, catalog_order):
    """torch_compile won on similar workloads but lost on nearly this one: it goes after the
    options without evidence; the reverse puts it first."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    lost_nearby = _evidence("torch_compile", 1.6)
    lost_nearby.close_speedup, lost_nearby.close_weight = 0.99, 1.0  # no gain there, yet not settled
    ctx.kb = KBAdvice(strategies=[lost_nearby])
    order = _run(ctx, {})
    assert order == [s for s in catalog_order if s != "torch_compile"] + ["torch_compile"]
    won_nearby = _evidence("torch_compile", 0.8)
    won_nearby.close_speedup, won_nearby.close_weight = 1.3, 1.0
    ctx = planning_context(path, analysis)
    ctx.kb = KBAdvice(strategies=[won_nearby])
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy == "torch_compile" and "1.30x on nearly this workload" in plan.rationale


def test_a_kept_kernel_whose_strategy_gains_nothing_nearby_is_not_reused_first(cross_entropy, catalog_order):
    """A kernel kept from a neighbouring world size where it won 1.04x, while the same strategy's
    runs on nearly this workload average 0.97x (it lost on this very workload): the job does not
    spend its first candidate on it. With those runs averaging a gain, or kept from this very
    workload, it is reused first."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    kept = offline_candidate(ctx, {"wrapper": "compile", "compile_mode": "default"}, "torch_compile")
    hint = KernelHint("k3", kept, "torch_compile", {}, 1.04, "vocab_parallel_cross_entropy", 0.95, True, True)
    ctx.kb = KBAdvice(kernels=[hint], strategies=[_close("torch_compile", 0.97, weight=1.9)])
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy != "kb_reuse" and plan.strategy != "torch_compile"
    ctx.kb = KBAdvice(kernels=[hint], strategies=[_close("torch_compile", 1.04, weight=1.9)])
    plan, _ = OfflinePlanner().plan(ctx)
    assert (plan.strategy, plan.params) == ("kb_reuse", {"kernel_id": "k3"})
    # Kept from this very workload (at this size and world size): a previous winner here is the
    # first candidate whatever its neighbours measured.
    hint.similarity, hint.exact = 1.0, True
    ctx.kb = KBAdvice(kernels=[hint], strategies=[_close("torch_compile", 0.97, weight=1.9)])
    plan, _ = OfflinePlanner().plan(ctx)
    assert (plan.strategy, plan.params) == ("kb_reuse", {"kernel_id": "k3"})


def _kernels(templates: list[str], wrapper: str = "kernels") -> Option:
    return Option("triton_kernels", {"wrapper": wrapper, "templates": templates}, 1.0, "kloom's kernels")


def test_kernel_options_that_repeat_a_kernel_candidate_slower_than_the_reference_go_last(cross_entropy, monkeypatch):
    """A job whose kernel candidate lost to the reference (a transposed convolution's kernel at
    0.83x of cuDNN) tries the options without those kernels before another variant holding them
    all; a variant without one of them keeps its place."""
    path, analysis = cross_entropy
    ctx = planning_context(path, analysis)
    lost = _kernels(["conv_transposed", "pool"], "kernels_compiled")
    ctx.history.append(_step(0, Plan("triton_kernels", lost.params, "", "offline"), "code of the kernels", 0.83))
    ctx.budget.steps_done = 1
    superset, other = _kernels(["conv_transposed", "layer_norm", "pool"]), _kernels(["pool"], "kernels_graph")
    compile_ = next(o for o in options_for(analysis) if o.strategy == "torch_compile")
    ranked = [superset, other, compile_]
    order, moved, why = behind_lost_kernels(ranked, ctx)
    assert order == [other, compile_, superset] and moved == {superset.key}
    assert why.startswith("kloom's kernels for conv_transposed, pool ran at 0.83x")
    monkeypatch.setattr(OfflinePlanner, "_ranked", lambda self, ctx, analysis, tried: [superset, compile_])
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy == "torch_compile" and plan.rationale.startswith(why)
    # A kernel candidate that won moves nothing.
    ctx.history[0] = _step(0, Plan("triton_kernels", lost.params, "", "offline"), "code of the kernels", 1.4)
    assert behind_lost_kernels(ranked, ctx) == (ranked, set(), "")
