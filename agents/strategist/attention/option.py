"""When the catalog offers split causal attention: bottom-right causal masks, on a GPU."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option


def options(a: Analysis) -> list[Option]:
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
