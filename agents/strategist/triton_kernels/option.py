"""The kernel strategy's offer to the catalog: whether kloom's own kernels apply to a traced
workload, with which templates, what that is worth, and why.

Kernels run where Triton runs: on a CUDA device, or on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1``, which the evaluator passes to its ranks; the tests use it). Elsewhere
(a CPU job without the interpreter) the strategy is not offered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agents.analysis import Analysis
from kloom.opgraph import VIEW_OPS

from ..codegen import NotApplicable
from ..dominance import LAUNCH_MS, graph_copies_ms, graph_costs_more, launch_bound
from ..embed import EmbedError
from .compile_cost import compile_cost
from .emit import NotReplayable, replay_problem
from .plan import KernelPlan, find_matches, kernel_candidate, measured_kinds
from .templates import TEMPLATES

#: The strategy's name in plans, the trajectory and the knowledge base.
STRATEGY = "triton_kernels"
#: Its candidates: the replay run operator by operator; the replay compiled by inductor with the
#: kernels' regions as opaque operators (``compiled.py``); and on a GPU, where the step has no
#: host synchronisation, the replay captured in one CUDA graph, which launches none of it from
#: the host (``emit.py``, with ``agents/strategist/cuda_graph/runtime.py``).
PLAIN, COMPILED, GRAPHED = "kernels", "kernels_compiled", "kernels_graph"
#: The hybrid's compiled step captured in a CUDA graph: inductor's fusion around the kernels and
#: no launch from Python, as ``compile_cuda_graph`` is for inductor's code alone.
COMPILED_GRAPH = "kernels_compiled_graph"
KERNEL_WRAPPERS = (PLAIN, COMPILED, GRAPHED, COMPILED_GRAPH)
#: Inside a compiled step a region's rival is inductor's own code for it, so the hybrid keeps only
#: regions of kinds measured at least this much faster than inductor (or not measured yet: the
#: evaluator decides). On the H100, elementwise chains (1.07x) and reductions (1.03x) were not:
#: after a convolution they cost inductor's channels-last layout (results/gpu/h100-kernels).
HYBRID_MARGIN = 1.1
#: Host time of the replay on an H100 host (``results/gpu/h100-launch-bound``, three small
#: networks): each operator replayed as a ``torch.ops.aten`` call took 25-52 us (1.3x eager's
#: time per operator on the same networks), and each region's kernel call about 200 us more
#: (the Triton launcher and the region's checks): the plain replays ran at 0.39-0.49x of eager.
REPLAY_CALL_MS = 0.03
REGION_CALL_MS = 0.2
#: Where the predicted speedup is below 1 (the host time outlasts the reference), the offer goes
#: behind the compiled and graph-captured options, which launch from C++ or a graph.
BEHIND = 0.1
#: A first call's compilation said in the rationale from this many seconds on.
NOTED_SETUP_S = 20.0


@dataclass(frozen=True)
class KernelOffer:
    params: dict
    score: float
    rationale: str
    setup_s: float = 0.0  # the first call's compilation, estimated (``compile_cost.py``)


def gpu_only_kinds() -> set[str]:
    """Kinds offered only once the GPU benchmark measured them winning (``offered_unmeasured``
    false): the same work as cuBLAS/cuDNN/PyTorch's kernels done differently."""
    return {t.kind for t in TEMPLATES.values() if not t.offered_unmeasured}


def kernels_can_run(device: str) -> bool:
    return device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _rationale(plan: KernelPlan, a: Analysis) -> str:
    share = plan.saved_ms / plan.eager_ms if plan.eager_ms else 0.0
    lead = "; ".join(m.rationale for m in plan.matches[:3])
    more = f" (+{len(plan.matches) - 3} more region(s))" if len(plan.matches) > 3 else ""
    skipped = f"; not used, measured slower than inductor: {', '.join(plan.skipped)}" if plan.skipped else ""
    return (
        f"kloom's Triton kernels for {len(plan.matches)} region(s) of the traced graph, the largest first: {lead}{more}; "
        f"the roofline puts the time they save (memory traffic, and products on faster units) at ~{100 * share:.0f}% of "
        f"the operators' eager time{skipped}"
    )


def _with_setup(rationale: str, plan: KernelPlan, a: Analysis) -> tuple[str, float]:
    """The rationale with the first call's compilation where it is long enough to matter, and
    its estimate (0 off the GPU: the interpreter compiles nothing)."""
    if a.device != "cuda":
        return rationale, 0.0
    cost = compile_cost(a.op_graph, plan.matches)
    return (f"{rationale}; {cost.note()}" if cost.seconds >= NOTED_SETUP_S else rationale), cost.seconds


def _unclaimed_compute(plan: KernelPlan, a: Analysis) -> int:
    """Operators of the step outside the kernels' regions that inductor could fuse or schedule."""
    claimed = {i for m in plan.matches for i in m.nodes}
    return sum(1 for n in a.op_graph.nodes if n.index not in claimed and n.op not in VIEW_OPS)


def replay_host_ms(plan: KernelPlan, a: Analysis) -> float:
    """The plain replay's host time a call: every operator left replayed from Python, and each
    region's kernel call (``REPLAY_CALL_MS``, ``REGION_CALL_MS``)."""
    claimed = {i for m in plan.matches for i in m.nodes}
    return sum(1 for n in a.op_graph.nodes if n.index not in claimed) * REPLAY_CALL_MS + len(plan.matches) * REGION_CALL_MS


def compiled_host_ms(plan: KernelPlan, a: Analysis) -> float:
    """The compiled replay's host time a call, at most: a launch per operator left with compute
    (none fused: a bound) and each region's kernel call."""
    return _unclaimed_compute(plan, a) * LAUNCH_MS + len(plan.matches) * REGION_CALL_MS


def predicted_speedup(plan: KernelPlan, a: Analysis, wrapper: str) -> float | None:
    """The candidate's speedup over the reference on a GPU (None without a measured reference):
    the reference's time less what the regions save, or the candidate's host time where that is
    longer, a launch-bound step. The plain replay calls every operator left from Python and each
    region's kernel; the compiled one launches, at eager's rate, a kernel per operator left with
    compute (none fused: a bound, not a forecast) and calls each region's kernel; a graph
    launches nothing from the host."""
    if a.device != "cuda" or not a.reference_ms:
        return None
    if wrapper == PLAIN:
        host_ms = replay_host_ms(plan, a)
    elif wrapper == COMPILED:
        host_ms = compiled_host_ms(plan, a)
    else:
        host_ms = 0.0
    return a.reference_ms / max(a.reference_ms - plan.saved_ms, host_ms, 1e-9)


def _placed(offer: KernelOffer, plan: KernelPlan, a: Analysis) -> KernelOffer:
    """The offer behind the others where its host time alone outlasts the reference."""
    predicted = predicted_speedup(plan, a, offer.params["wrapper"])
    if predicted is None or predicted >= 1.0:
        return offer
    why = (f"; tried late: launched from Python its host time alone outlasts the reference's {a.reference_ms:.3g} ms "
           f"(predicted {predicted:.2f}x on this launch-bound step)")
    return KernelOffer(offer.params, BEHIND * (1 + predicted), offer.rationale + why, offer.setup_s)


def kernel_offers(a: Analysis) -> list[KernelOffer]:
    """The kernel candidates for this structure, if any template matches the traced graph: the
    plain replay, and the replay compiled by inductor around the kernels where operators outside
    their regions are left for it to fuse (a convolution's epilogue, a GEMM's neighbours)."""
    graph = a.op_graph
    if graph is None or not kernels_can_run(a.device) or replay_problem(graph):
        return []
    wins = measured_kinds()
    if a.device != "cuda":
        # The verdicts are the GPU's. A kind offered only once measured winning there does the
        # vendor library's work on other units (the tensor cores, as three TF32 products): under
        # the CPU's interpreter it is only slower (a product interpreted tile by tile outlasted
        # the judge's hang bound), so a CPU job is not offered it.
        gpu_only = gpu_only_kinds()
        wins = {k: v for k, v in wins.items() if not (v.wins and k in gpu_only)}
    plan = find_matches(graph, wins=wins)
    if not plan.matches:
        return []
    kinds = {m.kind for m in plan.matches}
    proven = all(k in wins and wins[k].wins for k in kinds)
    share = plan.saved_ms / plan.eager_ms if plan.eager_ms else 0.0
    score = 0.55 + (0.35 if proven else 0.0) + 0.3 * min(share, 1.0) + (0.2 if a.dominant == "hbm" else 0.0)
    rationale, setup_s = _with_setup(_rationale(plan, a), plan, a)
    offers = [KernelOffer({"wrapper": PLAIN, "templates": plan.templates}, score, rationale, setup_s)]
    strong = sorted({m.template for m in plan.matches if m.kind not in wins or wins[m.kind].vs_inductor >= HYBRID_MARGIN})
    hybrid = find_matches(graph, strong, wins=wins) if strong else None
    rest = _unclaimed_compute(hybrid, a) if hybrid and hybrid.matches else 0
    if rest:
        lead, hybrid_setup_s = _with_setup(_rationale(hybrid, a), hybrid, a)
        why = (
            f"{lead}; the {rest} operator(s) outside the kernels' regions compiled by inductor around them, "
            f"each region an opaque operator inside the compiled step (only kinds measured >= {HYBRID_MARGIN}x inductor, or unmeasured)"
        )
        # Above the plain replay where inductor has something to fuse: a replay runs those
        # operators one by one, with Python's dispatch between them.
        offers.append(_placed(KernelOffer({"wrapper": COMPILED, "templates": hybrid.templates, "compile_mode": "default"},
                                          score + 0.02 * min(rest, 10), why, hybrid_setup_s), hybrid, a))
    capturable = a.device == "cuda" and a.graph_capturable
    # The graphed forms' prior: the reference's own launch overhead (what a graph saves), an
    # estimated share ``lb`` of its time.
    lb = launch_bound(a) if capturable else 0.0
    graph_score = 0.3 + lb + 0.3 * min(share, 1.0) + (0.2 if proven else 0.0)
    if rest and capturable and not graph_costs_more(a, compiled_host_ms(hybrid, a)):
        why_graph = (f"{why}; the compiled step captured in one CUDA graph (inductor's fusion around the kernels, and "
                     f"nothing launched from Python: the reference's own launch overhead an estimated {100 * lb:.0f}% of its time)")
        # Beside the graphed plain replay, as the hybrid is beside the plain one: ahead of it by
        # what inductor has to fuse.
        offers.append(KernelOffer({"wrapper": COMPILED_GRAPH, "templates": hybrid.templates, "compile_mode": "default"},
                                  graph_score + 0.02 * min(rest, 10), why_graph, hybrid_setup_s))
    offers[0] = _placed(offers[0], plan, a)
    # The graph saves the replay's host time (its kernels' launches from Python), not only the
    # reference's ~8 us a launch: a GEMM region's call alone costs ~0.2 ms of host time, which the
    # judge counts (it times each call from an idle GPU).
    host_ms = replay_host_ms(plan, a)
    if capturable and not graph_costs_more(a, host_ms):
        why = (f"{rationale}; the replay captured in one CUDA graph, so neither its operators nor its kernels are "
               f"launched from Python (the replay's host time, ~{host_ms:.2g} ms a call, against ~{graph_copies_ms(a):.2g} ms "
               f"of copies into and out of the graph's buffers; the reference's own launch overhead an estimated "
               f"{100 * lb:.0f}% of its time)")
        offers.append(KernelOffer({"wrapper": GRAPHED, "templates": plan.templates}, graph_score, why, setup_s))
    return offers


def kernel_candidate_for(source: str, analysis: Analysis | None, params: dict, label: str) -> str:
    """The candidate for a kernel option (``NotApplicable`` when the traced graph no longer
    gives one)."""
    if analysis is None or analysis.op_graph is None:
        raise NotApplicable("the reference was not traced into an op graph")
    try:
        wrapper = params.get("wrapper")
        mode = params.get("compile_mode", "default") if wrapper in (COMPILED, COMPILED_GRAPH) else None
        graphed = analysis.mutated_inputs if wrapper in (GRAPHED, COMPILED_GRAPH) else None
        return kernel_candidate(source, analysis.op_graph, params.get("templates"), label, mode, graphed=graphed)
    except (NotReplayable, EmbedError) as exc:
        raise NotApplicable(str(exc)) from None
