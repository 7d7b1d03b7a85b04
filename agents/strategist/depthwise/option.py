"""When the catalog offers depthwise convolutions as shifted multiply-adds."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option, rewrite_options


def options(a: Analysis) -> list[Option]:
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
    return rewrite_options(a, "depthwise_conv", 0.15 + (0.1 if hbm else 0.0), why, compiled_score=compiled)
