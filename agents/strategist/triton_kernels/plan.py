"""Planning kernels from the trace: which templates apply to the op graph, in which order, what
they are worth, and the candidate that calls them.

Templates run in priority order over the graph (``templates.ordered``); each match is checked
(``check_match``) and claims its nodes. The regions are ranked by the time the roofline says
they save over running their operators one by one, and the option's rationale names the
regions that dominate. A template whose kind the GPU benchmark measured slower than inductor
(``kernels/wins.json``) is not used; one not measured yet is used (the evaluator decides against
the ``torch.compile`` candidates offered beside it) unless it says it is offered only once
measured (``offered_unmeasured``: the GEMM and convolution kinds that do the vendor libraries'
work differently).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from kloom.opgraph import VIEW_OPS, OpGraph

from . import t_attention, t_elementwise, t_gemm, t_pool, t_reduce, t_rowwise  # noqa: F401  (they register their templates)
from .emit import NotReplayable, candidate_source, replay_problem
from ..dominance import BYTES_PER_MS, FLOPS_PER_MS
from ..embed import KERNELS_ROOT
from .t_elementwise import eager_bytes
from .templates import GraphView, Match, MatchError, check_match, ordered

#: What the GPU benchmark measured per template kind (``kernels/bench_all.py`` writes it).
WINS_FILE = KERNELS_ROOT / "wins.json"


@dataclass(frozen=True)
class Measured:
    """The benchmark's verdict on one kind of kernel against inductor."""

    kind: str
    vs_inductor: float  # geometric mean of inductor's time over the kernel's
    wins: bool
    vs_eager: float | None = None  # the same over eager PyTorch (cuBLAS/cuDNN), where measured
    measured_on: str = ""  # the device (and date) of the measurement
    channels_last: bool = False  # measured (and offered) with the input made channels-last first

    def evidence(self) -> str:
        """What the measurement says, with its numbers, for a rationale."""
        eager = f", {self.vs_eager:.2f}x eager's" if self.vs_eager else ""
        where = f" on {self.measured_on}" if self.measured_on else ""
        return f"measured {'faster' if self.wins else 'slower'}{where}: {self.vs_inductor:.2f}x inductor's speed{eager} (kernels/wins.json)"


def measured_kinds(path: Path | None = None) -> dict[str, Measured]:
    """The kinds the GPU benchmark measured (none when it has not run)."""
    path = path or WINS_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    found = {}
    for kind, v in data.get("kinds", {}).items():
        eager = v.get("vs_eager")
        where = v.get("measured_on") or data.get("measured_on", "")
        found[kind] = Measured(kind, float(v["vs_inductor"]), bool(v["wins"]), float(eager) if eager else None, where, bool(v.get("channels_last")))
    return found


def _evidence(template, verdict: Measured | None, forced: bool) -> str:
    """What is known of a template's kind on the GPU, as its matches' rationale says it."""
    if verdict is not None:
        return verdict.evidence()
    if forced:
        return "not measured on a GPU: used because the caller asked for this kind"
    return "not measured on a GPU yet" + ("" if template.offered_unmeasured else " (offered only once measured faster)")


@dataclass(frozen=True)
class KernelPlan:
    """The regions the kernels take over, best first, and what was left out and why."""

    matches: list[Match]
    skipped: list[str]  # kinds measured slower than inductor
    saved_ms: float  # roofline estimate of the time the regions save over eager
    eager_ms: float  # roofline estimate of the whole graph run operator by operator

    @property
    def templates(self) -> list[str]:
        return sorted({m.template for m in self.matches})


def _eager_ms(view: GraphView, nodes=None) -> float:
    """The nodes (default: the whole graph) run one operator at a time, each at its roofline:
    the bytes it moves at HBM speed or its products' floating-point work at the float32 rate,
    whichever is longer (``dominance.py``'s machine: an H100's float32 CUDA-core rate)."""
    graph = view.graph
    total = 0.0
    for i in range(len(graph.nodes)) if nodes is None else nodes:
        node = graph.nodes[i]
        if node.op in VIEW_OPS:
            continue
        total += max(eager_bytes(view, [i]) / BYTES_PER_MS, graph.node_flops(node) / FLOPS_PER_MS)
    return total


def _saves(full: GraphView, match: Match) -> float:
    """The roofline's estimate of what one region saves over its operators run one by one."""
    return _eager_ms(full, match.nodes) - match.cost.ms()


def _valid(view: GraphView, match: Match) -> bool:
    try:
        check_match(view, match)
    except MatchError:
        return False
    return True


def find_matches(
    graph: OpGraph, templates: list[str] | None = None, wins: dict[str, Measured] | None = None, force: frozenset[str] = frozenset()
) -> KernelPlan:
    """The matches of the registered templates (or those named), in priority order, each checked.
    ``force``: kinds used whatever the GPU benchmark said of them, or without a verdict (the
    benchmark that measures them, the LLM coder's library). Each match's rationale ends with
    what is known of its kind on the GPU."""
    wins = measured_kinds() if wins is None else wins
    view = GraphView(graph, verdicts=wins)
    matches: list[Match] = []
    skipped: list[str] = []
    for template in ordered(templates):
        verdict = wins.get(template.kind)
        forced = template.kind in force
        if verdict is not None and not verdict.wins and not forced:
            skipped.append(template.kind)
            continue
        if verdict is None and not template.offered_unmeasured and not forced:
            continue  # a kind that pays only where the GPU benchmark measured it winning
        evidence = _evidence(template, verdict, forced)
        # A template may offer overlapping matches: the first that passes the check is taken,
        # and the template is asked again about the nodes left.
        while True:
            match = next((m for m in template.match(view) if _valid(view, m)), None)
            if match is None:
                break
            matches.append(replace(match, rationale=f"{match.rationale}; {evidence}"))
            view = view.with_claimed(match.nodes)
    full = GraphView(graph)
    saves = [_saves(full, m) for m in matches]
    ranked = [m for _, m in sorted(zip(saves, matches), key=lambda pair: -pair[0])]
    return KernelPlan(ranked, sorted(set(skipped)), sum(max(0.0, x) for x in saves), _eager_ms(full))


def kernel_candidate(reference: str, graph: OpGraph, templates: list[str] | None, label: str, compile_mode: str | None = None,
                     graphed: list[int] | None = None) -> str:
    """The candidate file computing ``graph`` with the templates' kernels (``NotReplayable``
    when no template applies or the graph cannot be replayed)."""
    problem = replay_problem(graph)
    if problem:
        raise NotReplayable(problem)
    plan = find_matches(graph, templates)
    if not plan.matches:
        raise NotReplayable("no kernel template matches the traced operators")
    return candidate_source(reference, graph, plan.matches, label, compile_mode, graphed)
