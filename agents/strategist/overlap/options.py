"""When the catalog offers the overlap strategy: read from the trace's structure (collectives that
feed or are fed by matmuls, an all-reduce followed by a normalisation, small all-reduces), never
from a workload's name, and only where the source rewrite changes something."""

from __future__ import annotations

from agents.analysis import Analysis

from ..dominance import overlap_share
from ..options import Option

#: Collective messages up to this size go through the all-reduce kernels at all (larger ones are
#: bandwidth-bound, where NCCL's ring is as good as a kernel gets and the buffers would be large).
ALL_REDUCE_MAX = 16 << 20
_NOT_MEASURED = (
    "; not yet measured on several GPUs, so offered after the options that won before (the knowledge base moves it "
    "up once it measures a win), and every kernel times itself against the reference's own calls and torch's fused "
    "symmetric-memory op on its first call and keeps the fastest"
)


def overlap_options(a: Analysis) -> list[Option]:
    """The overlap option for this structure (a list of one ``Option``, or none)."""
    changes = a.source_rewrites.get("overlap", 0)
    half = bool({"bfloat16", "float16"} & set(a.dtypes))
    if a.device != "cuda" or a.world_size < 2 or not changes or not half:
        return []
    kinds, score = [], 0.0
    bound = a.dominant in ("compute", "link")
    if any(p == "collective_then_matmul" or p.startswith("matmul_then_collective:") for p in a.patterns):
        kinds.append("collective + matmul pairs as tile-level overlapped GEMMs (a tile waits only for its rows' data, a finished tile travels at once)")
        score = max(score, 0.4 + (0.3 if bound else 0.0))
    reduces = a.collective_sizes.get("allreduce")
    if reduces is not None and "aten::rsqrt" in a.ops:
        kinds.append("an all-reduce followed by a residual add and RMSNorm as one kernel")
        score = max(score, 0.3 + (0.2 if a.dominant in ("hbm", "link") else 0.0))
    if reduces is not None and reduces <= ALL_REDUCE_MAX:
        calls = max(a.collective_calls.get("allreduce", 1), 1)
        share = min(0.5, 0.01 * calls / a.reference_ms) if a.reference_ms else 0.25
        kinds.append(f"all-reduces of up to {reduces / 1024:.0f} KiB in one launch each (no copy-in, no barrier kernel)")
        score = max(score, 0.15 + 2 * share)
    if "collective_then_attention" in a.patterns:
        kinds.append("a ring's exchanges served by one copy-engine push of every rank's blocks, each attention step waiting only for its own")
        # Below prefetch_exchange (0.5, +0.3 when compute- or link-bound), which measured 1.16-1.18x.
        score = max(score, 0.4 + (0.3 if bound else 0.0) + overlap_share(a))
    if not kinds:
        return []
    why = f"{changes} call(s) rewritten: " + "; ".join(kinds) + _NOT_MEASURED
    return [Option("overlap_kernels", {"wrapper": "none", "rewrites": ["overlap"]}, score, why)]
