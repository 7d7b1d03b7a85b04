"""Which operators dominate a traced step, by the roofline of each node of its op graph: the
share of the step's floor time spent in products, in convolutions, and in everything else.
Strategies that act on products and convolutions (``cudnn_tuning``, ``max_autotune``) scale
their priors with it and say it in their rationale, so the plan tries first what acts on most of
the step."""

from __future__ import annotations

from dataclasses import dataclass

from agents.analysis import Analysis
from kloom.opgraph import PRODUCT_OPS, VIEW_OPS, OpGraph

#: The machine the floor assumes (an H100's float32 CUDA-core rate and HBM bandwidth); only the
#: shares are used, so the absolute rates matter little.
FLOPS_PER_MS = 60e9
BYTES_PER_MS = 3e9


@dataclass(frozen=True)
class Dominance:
    """Shares (0..1) of the step's roofline time."""

    products: float
    convolutions: float

    @property
    def heavy(self) -> float:
        return self.products + self.convolutions


def dominance(graph: OpGraph | None) -> Dominance:
    """The shares of the step's roofline time in products and convolutions (0, 0 untraced)."""
    if graph is None or not graph.nodes:
        return Dominance(0.0, 0.0)
    times = {"product": 0.0, "conv": 0.0, "other": 0.0}
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            continue  # a view moves no data
        moved = graph.bytes_of(set(node.tensor_args()) | {t for t in node.outputs if t is not None})
        ms = max(graph.node_flops(node) / FLOPS_PER_MS, moved / BYTES_PER_MS)
        kind = "product" if node.op in PRODUCT_OPS else "conv" if node.op == "aten::convolution" else "other"
        times[kind] += ms
    total = sum(times.values()) or 1.0
    return Dominance(times["product"] / total, times["conv"] / total)


def overlap_share(a: Analysis) -> float:
    """The share of the unoverlapped time that overlapping communication with compute can hide."""
    t = a.roofline_terms or {}
    link, work = t.get("link_ms") or 0.0, max(t.get("compute_ms") or 0.0, t.get("hbm_ms") or 0.0)
    total = link + work
    return min(link, work) / total if total > 0 else 0.0


LAUNCH_MS = 0.008  # ~8 us of host work per eager kernel launch


def launch_bound(a: Analysis) -> float:
    """How much of the reference's time is likely host launch overhead (0..1)."""
    if not a.reference_ms:
        return 0.5
    return min(1.0, LAUNCH_MS * max(a.n_kernels, 1) / a.reference_ms)


def graph_copies_ms(a: Analysis) -> float:
    """What a CUDA graph's replay adds to a call: it reuses its input buffers, so each call copies
    its inputs in and its outputs out (read and written once each), at the HBM roofline."""
    if a.op_graph is None:
        return 0.0
    return 2 * (a.total_input_bytes + a.op_graph.bytes_of(a.op_graph.output_ids())) / BYTES_PER_MS


def graph_costs_more(a: Analysis, host_ms: float | None = None) -> bool:
    """Whether a CUDA graph's copies cost more than the host time it saves: ``host_ms``, or ~8 us
    per kernel the reference launches. On KernelBench's 6 GiB elementwise problems a graph ran at
    half the reference's speed."""
    if a.op_graph is None:
        return False
    return graph_copies_ms(a) > (LAUNCH_MS * max(a.n_kernels, 1) if host_ms is None else host_ms)
