"""How a staged block's calls travel (``RankBase.run_staged``): every call's argument list (drawn
by the reference's ranks) or flattened outputs (sent back by either side), as one tensor per
position stacked over the calls where every call has a tensor of the same shape and dtype there,
else the values as they are. A block of a hundred small calls then travels as a few tensors (in
the message, or in one shared file the judge passes on unread) instead of hundreds: on two CPU
cores the per-tensor packing was half of a staged block's span and most of the projections'
request.

What arrives is the other side's, and may be anything plain: ``unstack`` checks the form and the
call count and raises ``ValueError`` where they are wrong.
"""

from __future__ import annotations

from typing import Any

import torch

from .shared import BlobRef

#: The form's marker (a dict of this key and the positions).
_KEY = "stacked_calls"


def stack(calls: list[list[Any]]) -> dict[str, Any]:
    """``calls`` (each a list of the same length) as one entry per position: ``{"tensor": t}`` with
    the calls stacked on a new first dimension, or ``{"values": [...]}`` (one per call)."""
    count = len(calls)
    width = len(calls[0]) if calls else 0
    if any(len(c) != width for c in calls):
        return {_KEY: None, "calls": calls, "count": count}
    positions = []
    for p in range(width):
        column = [c[p] for c in calls]
        first = column[0]
        alike = isinstance(first, torch.Tensor) and not first.is_sparse and all(
            isinstance(x, torch.Tensor) and not x.is_sparse and x.shape == first.shape and x.dtype == first.dtype and x.device == first.device
            for x in column)
        positions.append({"tensor": torch.stack([x.detach() for x in column])} if alike else {"values": column})
    return {_KEY: positions, "count": count}


def unstack(packed: Any, count: int | None = None) -> list[list[Any]]:
    """The calls ``stack`` packed: a list per call, its tensors views of the stacked ones (call
    ``i``'s are row ``i``). ``count``: the number of calls there must be."""
    if not isinstance(packed, dict) or _KEY not in packed or not isinstance(packed.get("count"), int):
        raise ValueError("not a staged block's calls")
    n = packed["count"]
    if count is not None and n != count:
        raise ValueError(f"{n} calls where the block ran {count}")
    positions = packed[_KEY]
    if positions is None:
        calls = packed.get("calls")
        if not isinstance(calls, list) or len(calls) != n or not all(isinstance(c, list) for c in calls):
            raise ValueError("a staged block's calls are not a list of lists of its length")
        return calls
    if not isinstance(positions, list):
        raise ValueError("a staged block's positions are not a list")
    columns = []
    for p, entry in enumerate(positions):
        stacked = entry.get("tensor") if isinstance(entry, dict) else None
        if isinstance(stacked, BlobRef):  # in the judge's process, a shared file passed on unread: mapped here
            stacked = stacked.tensor()
        if isinstance(stacked, torch.Tensor) and stacked.dim() >= 1 and stacked.shape[0] == n:
            columns.append(list(stacked.unbind(0)))
        elif isinstance(entry, dict) and isinstance(entry.get("values"), list) and len(entry["values"]) == n:
            columns.append(entry["values"])
        else:
            raise ValueError(f"position {p} of a staged block's calls does not hold {n} calls")
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in range(n)]
