"""The ``symm_allreduce`` strategy: every ``torch.distributed.all_reduce`` call renamed to
``_kloom_all_reduce`` (``rewrites.rename_collective``), whose runtime (``runtime.py``) takes torch
symmetric memory's one-shot or two-shot all-reduce for small messages."""

from __future__ import annotations

from ..embed import runtime_source


def symm_allreduce_helper(max_bytes: int, algo: str) -> str:
    """The runtime a candidate carries, with the largest message it serves and the algorithm
    (``one_shot`` | ``two_shot``)."""
    return runtime_source(f"{__name__}.runtime", _KL_SYMM_MAX_BYTES=int(max_bytes), _KL_SYMM_ALGO=algo)
