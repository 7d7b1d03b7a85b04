"""The structure of a workload, found by tracing its reference on every rank: the signature the
planner and the knowledge base work from. Nothing here looks at a workload's name."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kloom.evaluation import BaselineResult
from kloom.opgraph import OpGraph
from kloom.roofline.model import RooflineRecord, RooflineTerms, estimate
from kloom.roofline.profiles import detect_profile, load_profile


@dataclass
class Analysis:
    family: str
    world_size: int
    device: str
    collectives: list[str]  # sorted unique collective names, e.g. ["allgather_into_tensor", "allreduce"]
    collective_sizes: dict[str, int]  # largest message in bytes per collective
    ops: list[str]  # sorted unique aten operators
    n_kernels: int
    n_elementwise: int
    n_matmul: int
    n_attention: int
    host_syncs: int
    host_sync_ops: list[str]
    patterns: list[str]  # data flow, e.g. "collective_then_matmul", "matmul_then_collective:reduce_scatter"
    input_shapes: list[Any]
    dtypes: list[str]
    total_input_bytes: int
    param_bytes: int
    collective_bytes: int
    mutated_inputs: list[int]
    output_shapes: list[Any]
    dominant: str | None = None  # compute | hbm | link, from the roofline
    floor_ms: float | None = None
    #: Where the roofline comes from: "workload" (its ``roofline()``), "trace" (the traced op
    #: graph's least traffic and its products' work, on a GPU, where the workload states none), "".
    floor_from: str = ""
    reference_ms: float | None = None
    roofline_terms: dict[str, Any] = field(default_factory=dict)
    row_split: dict[str, Any] | None = None  # {"args": [...], "rows": N}: row blocks are independent
    trace_error: str = ""  # why the reference could not be traced (then the counts are unknown)
    #: rewrite -> calls it changes, which the offline planner notes from the source (``annotate``)
    source_rewrites: dict[str, int] = field(default_factory=dict)
    collective_calls: dict[str, int] = field(default_factory=dict)  # calls per step per collective (the busiest rank)
    bincount_bins: int | None = None  # the most bins a torch.bincount call of the step counts into (None: none traced)
    #: The operators of one reference call on the first rank, with the tensors they pass (None:
    #: not traced); the kernel templates plan from it (``agents/strategist/triton_kernels``).
    op_graph: OpGraph | None = None

    @property
    def graph_capturable(self) -> bool:
        """No host synchronisation in the step: the whole step can be one CUDA graph."""
        return self.host_syncs == 0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(dataclasses.replace(self, op_graph=None))
        data["op_graph"] = self.op_graph.to_dict() if self.op_graph is not None else None
        data["graph_capturable"] = self.graph_capturable
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Analysis":
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        if isinstance(fields.get("op_graph"), dict):
            fields["op_graph"] = OpGraph.from_dict(fields["op_graph"])
        return cls(**fields)


def build_analysis(traces: list[dict], *, family: str, world_size: int, device: str, baseline: BaselineResult | None) -> Analysis:
    """Merge the per-rank traces (``Evaluator.analyze``) with the baseline's roofline."""
    first = traces[0]
    sizes: dict[str, int] = {}
    calls: dict[str, int] = {}
    for trace in traces:
        for c in trace["collectives"]:
            sizes[c["op"]] = max(sizes.get(c["op"], 0), int(c["bytes"]))
        for op, n in Counter(c["op"] for c in trace["collectives"]).items():
            calls[op] = max(calls.get(op, 0), n)
    graph = OpGraph.from_dict(first["op_graph"]) if first.get("op_graph") else None
    if baseline and baseline.roofline:
        roofline, floor_from = baseline.roofline, "workload"
    else:  # a step with collectives has link time the graph does not hold
        roofline, floor_from = (None if sizes else traced_roofline(graph, baseline, device)), "trace"
    dtypes = sorted({d for t in traces for d in t["input_dtypes"] + t["output_dtypes"]})
    return Analysis(
        family=family,
        world_size=world_size,
        device=device,
        collectives=sorted(sizes),
        collective_sizes=sizes,
        ops=sorted({op for t in traces for op in t["ops"]}),
        n_kernels=max(t["n_kernels"] for t in traces),
        n_elementwise=max(t["n_elementwise"] for t in traces),
        n_matmul=max(t["n_matmul"] for t in traces),
        n_attention=max(t["n_attention"] for t in traces),
        host_syncs=max(t["host_syncs"] for t in traces),
        host_sync_ops=sorted({op for t in traces for op in t["host_sync_ops"]}),
        patterns=sorted({p for t in traces for p in t["patterns"]}),
        input_shapes=first["input_shapes"],
        dtypes=dtypes,
        total_input_bytes=max(t["input_bytes"] for t in traces),
        param_bytes=max(t["param_bytes"] for t in traces),
        collective_bytes=max(t["collective_bytes"] for t in traces),
        mutated_inputs=sorted({i for t in traces for i in t["mutated_inputs"]}),
        output_shapes=first["output_shapes"],
        # A traced floor stops a search at it (the offline planner) but does not steer the
        # strategies' priors, which were tuned on the workloads' own rooflines.
        dominant=roofline.dominant if roofline and floor_from == "workload" else None,
        floor_ms=roofline.floor_ms if roofline else None,
        floor_from=floor_from if roofline else "",
        reference_ms=baseline.reference_ms if baseline else None,
        roofline_terms={k: getattr(roofline, k) for k in ("flops", "hbm_bytes", "link_bytes", "compute_ms", "hbm_ms", "link_ms")} if roofline else {},
        row_split=first.get("row_split"),
        collective_calls=calls,
        bincount_bins=max((t["bincount_bins"] for t in traces if t.get("bincount_bins") is not None), default=None),
        op_graph=graph,
    )


def traced_roofline(graph: OpGraph | None, baseline: BaselineResult | None, device: str) -> RooflineRecord | None:
    """A floor for a workload that states no roofline, from its traced op graph on a GPU (the
    hardware profile of the baseline's GPU, measured there): the least traffic any
    implementation moves (``OpGraph.least_traffic``) at the profile's HBM bandwidth, or the
    products' and convolutions' work at the rate of the outputs' dtype, whichever takes longer.
    None on the CPU (its profile is a guess) or untraced."""
    if device != "cuda" or graph is None or not graph.nodes or baseline is None or not baseline.environment.get("gpu"):
        return None
    out = [graph.tensors[t].dtype for t in graph.output_ids() if t in graph.tensors]
    dtype = Counter(out).most_common(1)[0][0] if out else "float32"  # the profile's rate() knows torch's names
    terms = RooflineTerms(flops=float(sum(graph.node_flops(n) for n in graph.nodes)), hbm_bytes=float(graph.least_traffic()), dtype=dtype)
    try:
        profile = load_profile(detect_profile(baseline.environment))
    except (KeyError, ValueError):
        return None
    return estimate(terms, profile, reference_ms=baseline.reference_ms)


def untraced_analysis(error: str, *, family: str, world_size: int, device: str, baseline: BaselineResult | None) -> Analysis:
    """What is known of a reference that could not be traced: its roofline, nothing of its
    operators. Unknown counts are set so that the generic strategies (CUDA graph, compilation)
    stay eligible; their evaluations decide."""
    roofline = baseline.roofline if baseline else None
    return Analysis(
        family=family,
        world_size=world_size,
        device=device,
        collectives=[],
        collective_sizes={},
        ops=[],
        n_kernels=0,
        n_elementwise=2,
        n_matmul=0,
        n_attention=0,
        host_syncs=0,
        host_sync_ops=[],
        patterns=[],
        input_shapes=[],
        dtypes=[],
        total_input_bytes=0,
        param_bytes=0,
        collective_bytes=0,
        mutated_inputs=[],
        output_shapes=[],
        dominant=roofline.dominant if roofline else None,
        floor_ms=roofline.floor_ms if roofline else None,
        reference_ms=baseline.reference_ms if baseline else None,
        trace_error=error[:2000],
    )
