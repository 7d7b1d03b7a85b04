"""The offline strategist's strategies: when each applies (read from the traced structure and the
roofline, never from a workload's name), the parameters it searches, and a prior score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from agents.analysis import Analysis
from kloom.speedup import REFERENCE_COPY

from . import cudnn_tuning, max_autotune
from .attention.option import options as attention_options
from .bincount.option import options as bincount_options
from .coalesce.option import options as coalesce_options
from .depthwise.option import options as depthwise_options
from .dominance import graph_costs_more, launch_bound, overlap_share
from .fused_matmul.option import options as fused_matmul_options
from .gather.option import options as gather_options
from .options import Option, option_key
from .overlap.options import overlap_options
from .prefetch.option import options as prefetch_options
from .symm_allreduce.option import options as symm_allreduce_options
from .triton_kernels.option import STRATEGY as KERNELS, kernel_offers


@dataclass
class Strategy:
    name: str
    description: str
    options: Callable[[Analysis], list[Option]]
    requires_cuda: bool = False
    tags: list[str] = field(default_factory=list)


def _reference_copy(a: Analysis) -> list[Option]:
    return [Option(REFERENCE_COPY, {"wrapper": "none"}, 0.01, "the reference itself: a correct anchor that measures timing noise")]


def _cuda_graph(a: Analysis) -> list[Option]:
    if not a.graph_capturable or graph_costs_more(a):
        return []
    lb = launch_bound(a)
    return [
        Option(
            "cuda_graph",
            {"wrapper": "graph", "warmup": 3},
            0.3 + lb,
            f"{a.n_kernels} kernels per step with no host synchronisation: one CUDA graph (collectives included) "
            f"removes launch overhead, an estimated {100 * lb:.0f}% of the reference's time",
        )
    ]


#: Reductions that inductor decomposes and fuses (normalisations, softmaxes and pooling go by name).
REDUCTIONS = frozenset({
    "aten::sum", "aten::mean", "aten::var", "aten::std", "aten::var_mean", "aten::std_mean", "aten::amax", "aten::amin",
    "aten::max", "aten::min", "aten::prod", "aten::logsumexp", "aten::norm", "aten::linalg_vector_norm", "aten::cumsum",
    "aten::cumprod", "aten::logcumsumexp", "aten::argmax", "aten::argmin", "aten::any", "aten::all",
})  # fmt: skip


def _lowered_by_inductor(op: str) -> bool:
    """Reductions, normalisations, softmaxes and pooling (a reduction over each window: KernelBench's
    dilated 1-D max pooling took 10.9 ms eager and 2.8 ms compiled on an H200, where only the
    reference was offered)."""
    return op in REDUCTIONS or "norm" in op or "softmax" in op or "pool" in op


def _torch_compile(a: Analysis) -> list[Option]:
    out = []
    fusable = a.n_elementwise >= 2
    dynamic = {} if a.graph_capturable else {"dynamic": True}
    hbm = 0.3 if a.dominant == "hbm" else 0.0
    if fusable:
        out.append(
            Option(
                "torch_compile",
                {"wrapper": "compile", "compile_mode": "default", **dynamic},
                0.25 + hbm + 0.02 * min(a.n_elementwise, 10),
                f"{a.n_elementwise} elementwise/normalisation kernels around the collectives: inductor fuses them into "
                f"fewer passes over memory{' (the roofline says HBM dominates)' if hbm else ''}",
            )
        )
    elif any(_lowered_by_inductor(op) for op in a.ops):
        # One normalisation or reduction still compiles to inductor's own fused passes, which
        # may beat the library's kernel (KernelBench's GroupNorm: eager 10.1 ms, compiled 7.7 ms
        # on an H100, where nothing but the reference was offered). A lone pointwise operator
        # or matmul compiles to the same work and is not offered.
        out.append(
            Option(
                "torch_compile",
                {"wrapper": "compile", "compile_mode": "default", **dynamic},
                0.15 + hbm / 3,
                "a single normalisation or reduction: inductor lowers it to fused passes of its own, which may beat "
                "the library's kernel",
            )
        )
    if a.device == "cuda":
        if fusable and a.graph_capturable and not graph_costs_more(a):
            out.append(
                Option(
                    "compile_cuda_graph",
                    {"wrapper": "compile_graph", "compile_mode": "default", "warmup": 3},
                    0.35 + launch_bound(a) + (0.3 if a.dominant == "hbm" else 0.0),
                    "fused kernels from inductor, launched from one CUDA graph: fewer bytes and no launch overhead",
                )
            )
        if not a.graph_capturable:
            out.append(
                Option(
                    "compile_reduce_overhead",
                    {"wrapper": "compile", "compile_mode": "reduce-overhead", "dynamic": True},
                    0.2 + 0.5 * launch_bound(a),
                    f"the step synchronises with the host ({', '.join(a.host_sync_ops) or 'device-to-host copies'}), so one graph "
                    "cannot hold it: torch.compile splits at the syncs and captures each sync-free segment in a CUDA graph",
                )
            )
    return out


def _micro_pipeline_tp(a: Analysis) -> list[Option]:
    pattern = any(p.startswith("collective_then_matmul") or p.startswith("matmul_then_collective:reduce_scatter") for p in a.patterns)
    if a.device != "cuda" or a.world_size < 2 or not pattern:
        return []
    # On 4xH200 the pass gave 0.98-0.99x on every step it ran on (results/gpu/h200x4-ws4-r2); where
    # the fused_ag_matmul rewrite reaches the same ops directly, the pass goes to the back.
    direct = a.source_rewrites.get("fused_ag_matmul", 0) > 0
    return [
        Option(
            "micro_pipeline_tp",
            {"wrapper": "compile", "compile_options": {"_micro_pipeline_tp": True}},
            0.05 if direct else 0.35 + (0.2 if a.dominant in ("compute", "link") else 0.0),
            "a collective feeds a matmul (or a matmul feeds a reduce-scatter): inductor's micro-pipeline pass "
            "splits them into symmetric-memory pipelines that overlap the copy of chunk i+1 with the matmul of chunk i",
        )
    ]


def _row_chunks(a: Analysis) -> list[Option]:
    if a.device != "cuda" or a.world_size < 2 or not a.row_split or not a.collectives:
        return []
    if a.n_matmul + a.n_elementwise + a.n_attention == 0:
        return []
    share = overlap_share(a)
    why = (
        "row blocks of the step are independent (the probe split the inputs' rows and got the same result), and "
        f"the roofline puts {100 * share:.0f}% of the unoverlapped time in the part overlap can hide: slices run on "
        "alternating streams so one slice's collective overlaps the next slice's compute"
    )
    base = {"wrapper": "chunks", "streams": 2}
    return [
        Option("row_chunk_overlap", dict(base, chunks=2), 0.25 + share, why),
        Option("row_chunk_overlap", dict(base, chunks=4), 0.2 + share, why + " (4 slices: more overlap, smaller kernels)", base="row_chunk_overlap"),
        Option(
            "row_chunk_overlap_compiled",
            dict(base, chunks=2, inner="compile"),
            0.15 + share,
            why + ", each slice compiled by inductor to fuse its elementwise work",
            base="row_chunk_overlap",
        ),
    ]


def _cudnn_tuning(a: Analysis) -> list[Option]:
    return cudnn_tuning.options(a)


def _max_autotune(a: Analysis) -> list[Option]:
    default = next((o for o in _torch_compile(a) if o.strategy == "torch_compile"), None)
    return max_autotune.options(a, compile_prior=default.score if default else None)


def _triton_kernels(a: Analysis) -> list[Option]:
    return [Option(KERNELS, o.params, o.score, o.rationale, setup_s=o.setup_s) for o in kernel_offers(a)]


STRATEGIES: list[Strategy] = [
    Strategy(REFERENCE_COPY, "Run the reference itself (a correct anchor).", _reference_copy),
    Strategy("cuda_graph", "Capture the whole step, collectives included, in one CUDA graph.", _cuda_graph, requires_cuda=True),
    Strategy("torch_compile", "Compile the step with torch.compile (fusion, CUDA graphs by segment).", _torch_compile),
    Strategy("symm_mem_allreduce", "Latency-bound all-reduce through torch symmetric memory.", symm_allreduce_options, requires_cuda=True),
    Strategy("micro_pipeline_tp", "Overlap all-gather/reduce-scatter with the matmul (symmetric-memory pipelines).", _micro_pipeline_tp, requires_cuda=True),
    Strategy("fused_ag_matmul", "All-gather + matmul / matmul + reduce-scatter as symmetric-memory fused ops (a source rewrite).", fused_matmul_options, requires_cuda=True),
    Strategy("coalesce_allreduce", "Merge independent all-reduces of the same reduction into one collective.", coalesce_options),
    Strategy("gather_into_tensor", "All-gather into a list + cat becomes one all_gather_into_tensor.", gather_options),
    Strategy("depthwise_conv", "Depthwise conv1d/conv2d as shifted multiply-adds that inductor fuses.", depthwise_options),
    Strategy("prefetch_exchange", "Issue a loop-carried point-to-point exchange one iteration early on a side stream.", prefetch_options, requires_cuda=True),
    Strategy("few_bin_count", "torch.bincount into a few bins by comparison and column sums (no contended atomics).", bincount_options, requires_cuda=True),
    Strategy("split_causal_attention", "Bottom-right causal attention as an unmasked and a square causal piece on the fast kernels.", attention_options, requires_cuda=True),
    Strategy("row_chunk_overlap", "Pipeline independent row slices over streams: collective of one, compute of the next.", _row_chunks, requires_cuda=True),
    Strategy("overlap_kernels", "Collectives fused with the matmuls and norms around them in kloom's Triton kernels over symmetric memory.", overlap_options, requires_cuda=True),
    Strategy(KERNELS, "kloom's own Triton kernels, instantiated by structure from the traced op graph.", _triton_kernels),
    Strategy("cudnn_tuning", "Convolutions under cuDNN's autotuner, optionally channels-last or compiled.", _cudnn_tuning, requires_cuda=True),
    Strategy("max_autotune", "Inductor's max-autotune search over matmul/conv templates (compile time counted).", _max_autotune, requires_cuda=True),
]


def options_for(a: Analysis) -> list[Option]:
    """Every option that applies to this structure, best prior first."""
    found: list[Option] = []
    for strategy in STRATEGIES:
        if strategy.requires_cuda and a.device != "cuda":
            continue
        found.extend(strategy.options(a))
    return sorted(found, key=lambda o: -o.score)
