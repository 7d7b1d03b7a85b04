"""Counting into a few bins without atomics: a source rewrite of ``torch.bincount`` calls.

``torch.bincount`` on a GPU adds one to a counter in global memory per element. With a few bins
(a rank or bucket index per element: where each row of a sample sort or an all-to-all goes) every
thread contends for the same few counters: on H200 counting 8M int64 keys into 4 bins took 1.1 ms,
longer than sorting them (results/gpu/h200x4-paths). Compared with each bin's index and summed down
the columns, the same count is two passes over memory with no contention.

The rewrite renames calls of ``torch.bincount`` (under any alias of ``torch``) to a helper with the
same signature. At run time the helper takes the fast path for an unweighted, one-dimensional,
integer CUDA tensor of at least ``_KL_FEW_BINS_MIN`` elements whose bins (``max(minlength, max + 1)``)
number at most ``_KL_FEW_BINS_MAX``: it reads the minimum and maximum once (``bincount`` reads them
too, to size its output), counts in bounded chunks, and returns int64 counts as ``bincount`` does.
Everything else (weights, negative values, many bins, CPU tensors) calls ``torch.bincount``, which
raises what it raises. Counting is exact, so the rewrite never changes what is computed.
"""

from __future__ import annotations

import ast

from ..embed import runtime_source
from ..rewrites import is_module_call, module_aliases, rename_calls
from .runtime import _KL_FEW_BINS_MAX as FEW_BINS_MAX  # the most bins counted by comparison

HELPER_NAME = "_kloom_bincount"

#: The runtime a candidate carries, copied from ``runtime.py``.
BINCOUNT_HELPER = runtime_source(f"{__name__}.runtime")


def _bincounts(tree: ast.Module) -> list[tuple[ast.Call, str]]:
    modules, functions = module_aliases(tree, "torch")
    return [
        (node, HELPER_NAME)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and is_module_call(node, "bincount", modules, functions)
        and not any(k.arg == "input" for k in node.keywords)  # the helper names it ``values``
    ]


def few_bin_count(source: str) -> tuple[str, int]:
    """The source with every ``torch.bincount`` call renamed to the helper; returns it and the
    number of calls renamed (0: the source unchanged)."""
    calls = _bincounts(ast.parse(source))
    if not calls:
        return source, 0
    return rename_calls(source, calls), len(calls)
