"""When the catalog offers few-bin counting: bincount calls into few enough bins, on a GPU."""

from __future__ import annotations

from agents.analysis import Analysis

from ..options import Option
from . import FEW_BINS_MAX


def options(a: Analysis) -> list[Option]:
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
