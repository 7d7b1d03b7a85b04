"""When the catalog offers coalesced all-reduces: calls the rewrite can merge."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option, rewrite_options
from ..symm_allreduce.option import SYMM_ONE_SHOT_MAX


def options(a: Analysis) -> list[Option]:
    removed = a.source_rewrites.get("coalesce_allreduce", 0)
    if a.world_size < 2 or not removed:
        return []
    size = a.collective_sizes.get("allreduce")
    small = size is not None and size <= SYMM_ONE_SHOT_MAX
    why = (
        f"{removed} all-reduce call(s) can merge with an independent one of the same reduction: one collective over a "
        f"packed buffer instead of several{' (small messages: each call is mostly latency)' if small else ''}"
    )
    return rewrite_options(a, "coalesce_allreduce", 0.2 + (0.2 if small else 0.0) + 0.05 * min(removed, 4), why)
