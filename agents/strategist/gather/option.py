"""When the catalog offers one all_gather_into_tensor for a list all-gather and its cat."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option, rewrite_options


def options(a: Analysis) -> list[Option]:
    gathers = a.source_rewrites.get("gather_into_tensor", 0)
    if a.world_size < 2 or not gathers:
        return []
    why = (
        f"{gathers} all-gather(s) into a list feed a torch.cat: one all_gather_into_tensor writes every rank's block "
        "into one buffer that already is the concatenation (no per-rank copies, no cat)"
    )
    return rewrite_options(a, "gather_into_tensor", 0.3 + (0.2 if a.dominant in ("hbm", "link") else 0.0), why)
