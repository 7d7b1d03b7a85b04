"""When the catalog offers the prefetched exchange: loops the rewrite found, on a GPU."""

from __future__ import annotations

from agents.analysis import Analysis

from ..dominance import overlap_share
from ..options import Option


def options(a: Analysis) -> list[Option]:
    loops = a.source_rewrites.get("prefetch_exchange", 0)
    if a.device != "cuda" or a.world_size < 2 or not loops:
        return []
    share = overlap_share(a)
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
