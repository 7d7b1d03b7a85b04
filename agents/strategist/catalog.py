"""The offline strategist's strategies: when each applies (read from the traced structure and the
roofline, never from a workload's name), the parameters it searches, and a prior score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from agents.analysis import Analysis

from .bincount import FEW_BINS_MAX

#: Collective messages up to this size are latency-bound on NVLink; symmetric-memory one-shot
#: all-reduce beats NCCL's ring there (larger ones use two-shot, then NCCL).
SYMM_ONE_SHOT_MAX = 1 << 20
SYMM_TWO_SHOT_MAX = 16 << 20
#: What a symmetric-memory all-reduce saves over NCCL's per call, at most (4xH200: the 0.053 ms
#: one-element all-reduce step went to 0.048 ms inside a graph). Where the step's other work is
#: milliseconds, that saving is noise: on 4xH200 the symmetric-memory options gave 0.87-1.0x on every
#: step whose all-reduces were a small part of it (results/gpu/h200x4-ws4, -ws4-r2).
SYMM_SAVING_MS = 0.01


@dataclass
class Option:
    """One concrete thing to try: a strategy with its parameters and why it might pay."""

    strategy: str
    params: dict[str, Any]
    score: float
    rationale: str
    base: str | None = None  # a strategy this refines (tried after it wins)

    @property
    def key(self) -> str:
        return option_key(self.strategy, self.params)


def option_key(strategy: str, params: dict[str, Any]) -> str:
    import json

    return f"{strategy}:{json.dumps(params, sort_keys=True)}"


@dataclass
class Strategy:
    name: str
    description: str
    options: Callable[[Analysis], list[Option]]
    requires_cuda: bool = False
    tags: list[str] = field(default_factory=list)


def _launch_bound(a: Analysis) -> float:
    """How much of the reference's time is likely host launch overhead (0..1)."""
    if not a.reference_ms:
        return 0.5
    launch_ms = 0.008 * max(a.n_kernels, 1)  # ~8 us of host work per eager kernel launch
    return min(1.0, launch_ms / a.reference_ms)


def _reference_copy(a: Analysis) -> list[Option]:
    return [Option("reference_copy", {"wrapper": "none"}, 0.01, "the reference itself: a correct anchor that measures timing noise")]


def _cuda_graph(a: Analysis) -> list[Option]:
    if not a.graph_capturable:
        return []
    lb = _launch_bound(a)
    return [
        Option(
            "cuda_graph",
            {"wrapper": "graph", "warmup": 3},
            0.3 + lb,
            f"{a.n_kernels} kernels per step with no host synchronisation: one CUDA graph (collectives included) "
            f"removes launch overhead, an estimated {100 * lb:.0f}% of the reference's time",
        )
    ]


def _torch_compile(a: Analysis) -> list[Option]:
    out = []
    fusable = a.n_elementwise >= 2
    dynamic = {} if a.graph_capturable else {"dynamic": True}
    if fusable:
        hbm = 0.3 if a.dominant == "hbm" else 0.0
        out.append(
            Option(
                "torch_compile",
                {"wrapper": "compile", "compile_mode": "default", **dynamic},
                0.25 + hbm + 0.02 * min(a.n_elementwise, 10),
                f"{a.n_elementwise} elementwise/normalisation kernels around the collectives: inductor fuses them into "
                f"fewer passes over memory{' (the roofline says HBM dominates)' if hbm else ''}",
            )
        )
    if a.device == "cuda":
        if fusable and a.graph_capturable:
            out.append(
                Option(
                    "compile_cuda_graph",
                    {"wrapper": "compile_graph", "compile_mode": "default", "warmup": 3},
                    0.35 + _launch_bound(a) + (0.3 if a.dominant == "hbm" else 0.0),
                    "fused kernels from inductor, launched from one CUDA graph: fewer bytes and no launch overhead",
                )
            )
        if not a.graph_capturable:
            out.append(
                Option(
                    "compile_reduce_overhead",
                    {"wrapper": "compile", "compile_mode": "reduce-overhead", "dynamic": True},
                    0.2 + 0.5 * _launch_bound(a),
                    f"the step synchronises with the host ({', '.join(a.host_sync_ops) or 'device-to-host copies'}), so one graph "
                    "cannot hold it: torch.compile splits at the syncs and captures each sync-free segment in a CUDA graph",
                )
            )
    return out


def _symm_allreduce(a: Analysis) -> list[Option]:
    size = a.collective_sizes.get("allreduce")
    if a.device != "cuda" or a.world_size < 2 or size is None or size > SYMM_TWO_SHOT_MAX:
        return []
    algo = "one_shot" if size <= SYMM_ONE_SHOT_MAX else "two_shot"
    share = _allreduce_latency_share(a)
    why = (
        f"all-reduce of {size / 1024:.0f} KiB is latency-bound: torch symmetric memory's {algo.replace('_', '-')} "
        f"kernel reads peers' buffers directly over NVLink instead of NCCL's ring (its saving is at most "
        f"~{100 * share:.0f}% of the step)"
    )
    params = {"wrapper": "none", "rewrites": ["symm_allreduce"], "symm_algo": algo, "symm_max_bytes": SYMM_TWO_SHOT_MAX}
    opts = [Option("symm_mem_allreduce", params, 0.2 + (0.1 if algo == "one_shot" else 0.0) + 2 * share, why)]
    if a.graph_capturable:
        opts.append(
            Option(
                "symm_mem_allreduce_graph",
                dict(params, wrapper="graph", warmup=3),
                0.3 + _launch_bound(a) + 2 * share,
                why + ", all launched from one CUDA graph (the copies in and out cost launches that the graph removes)",
            )
        )
        other = "two_shot" if algo == "one_shot" else "one_shot"
        opts.append(
            Option(
                "symm_mem_allreduce_graph",
                dict(params, wrapper="graph", warmup=3, symm_algo=other),
                0.1,
                f"the same with the {other.replace('_', '-')} algorithm (searched: the crossover depends on the machine)",
                base="symm_mem_allreduce_graph",
            )
        )
    return opts


def _allreduce_latency_share(a: Analysis) -> float:
    """The most of the reference's time that a faster small all-reduce could remove (0..0.5)."""
    if not a.reference_ms:
        return 0.25
    calls = max(a.collective_calls.get("allreduce", 1), 1)
    return min(0.5, SYMM_SAVING_MS * calls / a.reference_ms)


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


def _fused_ag_matmul(a: Analysis) -> list[Option]:
    pairs = a.source_rewrites.get("fused_ag_matmul", 0)
    if a.device != "cuda" or a.world_size < 2 or not pairs:
        return []
    bound = a.dominant in ("compute", "link")
    why = (
        f"{pairs} all_gather_into_tensor + matmul / matmul + reduce_scatter_tensor pair(s) in the source: torch symmetric "
        "memory's fused_all_gather_matmul / fused_matmul_reduce_scatter overlap each shard's transfer with the matmul "
        "of another, called directly (inductor's micro-pipeline pass measured no gain on these steps)"
    )
    # Above micro_pipeline_tp (0.35, +0.2 when compute- or link-bound), which reaches the same ops only
    # through inductor's pattern matching.
    return [Option("fused_ag_matmul", {"wrapper": "none", "rewrites": ["fused_ag_matmul"]}, 0.45 + (0.35 if bound else 0.0), why)]


def _overlap_share(a: Analysis) -> float:
    """The share of the unoverlapped time that overlapping communication with compute can hide."""
    t = a.roofline_terms or {}
    link, work = t.get("link_ms") or 0.0, max(t.get("compute_ms") or 0.0, t.get("hbm_ms") or 0.0)
    total = link + work
    return min(link, work) / total if total > 0 else 0.0


def _row_chunks(a: Analysis) -> list[Option]:
    if a.device != "cuda" or a.world_size < 2 or not a.row_split or not a.collectives:
        return []
    if a.n_matmul + a.n_elementwise + a.n_attention == 0:
        return []
    share = _overlap_share(a)
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


def _rewritten(a: Analysis, rewrite: str, score: float, why: str, compiled_score: float | None = None) -> list[Option]:
    """A source rewrite on its own, and (where there is elementwise work to fuse) compiled.
    ``compiled_score``: the compiled variant's prior, for a rewrite that itself makes the
    elementwise work inductor fuses (then the variant is offered whatever the trace counted)."""
    params = {"wrapper": "none", "rewrites": [rewrite]}
    opts = [Option(rewrite, params, score, why)]
    if compiled_score is None and a.n_elementwise >= 2:
        compiled_score = score - 0.05 + 0.02 * min(a.n_elementwise, 10)
    if compiled_score is not None:
        dynamic = {} if a.graph_capturable else {"dynamic": True}
        opts.append(
            Option(
                f"{rewrite}_compiled",
                dict(params, wrapper="compile", compile_mode="default", **dynamic),
                compiled_score,
                why + ", and the elementwise work around it fused by inductor",
            )
        )
    return opts


def _coalesce(a: Analysis) -> list[Option]:
    removed = a.source_rewrites.get("coalesce_allreduce", 0)
    if a.world_size < 2 or not removed:
        return []
    size = a.collective_sizes.get("allreduce")
    small = size is not None and size <= SYMM_ONE_SHOT_MAX
    why = (
        f"{removed} all-reduce call(s) can merge with an independent one of the same reduction: one collective over a "
        f"packed buffer instead of several{' (small messages: each call is mostly latency)' if small else ''}"
    )
    return _rewritten(a, "coalesce_allreduce", 0.2 + (0.2 if small else 0.0) + 0.05 * min(removed, 4), why)


def _gather_into_tensor(a: Analysis) -> list[Option]:
    gathers = a.source_rewrites.get("gather_into_tensor", 0)
    if a.world_size < 2 or not gathers:
        return []
    why = (
        f"{gathers} all-gather(s) into a list feed a torch.cat: one all_gather_into_tensor writes every rank's block "
        "into one buffer that already is the concatenation (no per-rank copies, no cat)"
    )
    return _rewritten(a, "gather_into_tensor", 0.3 + (0.2 if a.dominant in ("hbm", "link") else 0.0), why)


def _depthwise_conv(a: Analysis) -> list[Option]:
    convs = a.source_rewrites.get("depthwise_conv", 0)
    if not convs:
        return []
    hbm = a.dominant == "hbm"
    why = (
        f"{convs} conv1d/conv2d call(s) pass groups and may be depthwise: as shifted multiply-adds (float32 "
        "accumulation, one rounding) they become elementwise work, where cuDNN's depthwise kernels run far from the "
        f"HBM floor and inductor keeps a convolution as an extern call{' (the roofline says HBM dominates)' if hbm else ''}"
    )
    # The rewrite exists for inductor: compiled, the taps, the padding or concatenation before and
    # the activation after become one pass over memory; eagerly, each tap is a float32 pass of its
    # own, a fallback that rarely beats cuDNN. So the compiled variant is tried early.
    compiled = 0.9 + (0.3 if hbm else 0.0) + 0.05 * min(convs, 4)
    return _rewritten(a, "depthwise_conv", 0.15 + (0.1 if hbm else 0.0), why, compiled_score=compiled)


def _prefetch_exchange(a: Analysis) -> list[Option]:
    loops = a.source_rewrites.get("prefetch_exchange", 0)
    if a.device != "cuda" or a.world_size < 2 or not loops:
        return []
    share = _overlap_share(a)
    bound = a.dominant in ("compute", "link")
    why = (
        f"{loops} loop(s) wait for a point-to-point exchange of their carried state before computing with it: "
        "issued one iteration early on a side stream, each exchange overlaps the previous iteration's compute "
        f"(the roofline puts {100 * share:.0f}% of the unoverlapped time in the part overlap can hide)"
    )
    # Nothing else hides this communication: torch.compile breaks the graph at P2P calls and a CUDA
    # graph replays the same serial order, so for compute- or link-bound steps it goes first.
    # No compiled variant: inductor would only compile the pieces between the exchanges.
    return [Option("prefetch_exchange", {"wrapper": "none", "rewrites": ["prefetch_exchange"]}, 0.5 + (0.3 if bound else 0.0) + share, why)]


def _few_bin_count(a: Analysis) -> list[Option]:
    calls = a.source_rewrites.get("few_bin_count", 0)
    if a.device != "cuda" or not calls:
        return []
    if a.bincount_bins is not None and a.bincount_bins > FEW_BINS_MAX:
        # The rewrite would fall back to bincount itself: a candidate spent on the reference's own
        # code (the MoE steps count 256 experts; on 2xH200 moe_layer lost its 1.13x winner to it).
        return []
    why = (
        f"{calls} torch.bincount call(s): on a GPU each element adds to a counter in global memory, and with a few "
        "bins (a destination rank per row) every thread contends for the same counters; compared with each bin and "
        "summed down the columns, the count is two passes over memory"
    )
    # On 4xH200, 8M int64 keys into 4 bins took 1.1 ms, longer than sorting them (results/gpu/h200x4-paths);
    # the rewrite falls back to bincount itself wherever the bins are many, so trying it costs one candidate.
    return [Option("few_bin_count", {"wrapper": "none", "rewrites": ["few_bin_count"]}, 0.6 + 0.05 * min(calls, 4), why)]


def _split_causal_attention(a: Analysis) -> list[Option]:
    calls = a.source_rewrites.get("split_causal_attention", 0)
    if a.device != "cuda" or not calls:
        return []
    why = (
        f"{calls} attention call(s) with a bottom-right causal mask over more keys than queries: PyTorch sends them to "
        "FlashAttention-2, while an unmasked and a square causal attention go to cuDNN's Hopper kernels; the same "
        "attention is those two pieces merged by their log-sum-exps"
    )
    # On 4xH200 the cuDNN kernel did the same work ~1.7x faster than the flash kernel that the bottom-right
    # bias gets (results/gpu/h200x4-paths); attention dominates such steps, so it goes first.
    return [Option("split_causal_attention", {"wrapper": "none", "rewrites": ["split_causal_attention"]}, 0.7 + (0.3 if a.dominant == "compute" else 0.0), why)]


STRATEGIES: list[Strategy] = [
    Strategy("reference_copy", "Run the reference itself (a correct anchor).", _reference_copy),
    Strategy("cuda_graph", "Capture the whole step, collectives included, in one CUDA graph.", _cuda_graph, requires_cuda=True),
    Strategy("torch_compile", "Compile the step with torch.compile (fusion, CUDA graphs by segment).", _torch_compile),
    Strategy("symm_mem_allreduce", "Latency-bound all-reduce through torch symmetric memory.", _symm_allreduce, requires_cuda=True),
    Strategy("micro_pipeline_tp", "Overlap all-gather/reduce-scatter with the matmul (symmetric-memory pipelines).", _micro_pipeline_tp, requires_cuda=True),
    Strategy("fused_ag_matmul", "All-gather + matmul / matmul + reduce-scatter as symmetric-memory fused ops (a source rewrite).", _fused_ag_matmul, requires_cuda=True),
    Strategy("coalesce_allreduce", "Merge independent all-reduces of the same reduction into one collective.", _coalesce),
    Strategy("gather_into_tensor", "All-gather into a list + cat becomes one all_gather_into_tensor.", _gather_into_tensor),
    Strategy("depthwise_conv", "Depthwise conv1d/conv2d as shifted multiply-adds that inductor fuses.", _depthwise_conv),
    Strategy("prefetch_exchange", "Issue a loop-carried point-to-point exchange one iteration early on a side stream.", _prefetch_exchange, requires_cuda=True),
    Strategy("few_bin_count", "torch.bincount into a few bins by comparison and column sums (no contended atomics).", _few_bin_count, requires_cuda=True),
    Strategy("split_causal_attention", "Bottom-right causal attention as an unmasked and a square causal piece on the fast kernels.", _split_causal_attention, requires_cuda=True),
    Strategy("row_chunk_overlap", "Pipeline independent row slices over streams: collective of one, compute of the next.", _row_chunks, requires_cuda=True),
]


def options_for(a: Analysis) -> list[Option]:
    """Every option that applies to this structure, best prior first."""
    found: list[Option] = []
    for strategy in STRATEGIES:
        if strategy.requires_cuda and a.device != "cuda":
            continue
        found.extend(strategy.options(a))
    return sorted(found, key=lambda o: -o.score)
