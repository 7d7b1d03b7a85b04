"""When the catalog offers the fused collective matmul: pairs the rewrite found, on a GPU."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option


def options(a: Analysis) -> list[Option]:
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
