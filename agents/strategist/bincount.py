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

from .rewrites import is_module_call, module_aliases, rename_calls

HELPER_NAME = "_kloom_bincount"
#: The most bins counted by comparison; beyond, the helper calls ``torch.bincount`` itself.
FEW_BINS_MAX = 64

BINCOUNT_HELPER = '''
import torch as _kl_torch

_KL_FEW_BINS_MAX = FEW_BINS_MAX_VALUE
_KL_FEW_BINS_MIN = 1 << 16
_KL_FEW_BINS_CHUNK = 1 << 25  # elements of one chunk's comparison matrix


def _kl_few_bins(values, minlength):
    """The counts of a one-dimensional integer tensor whose values fall in at most
    ``_KL_FEW_BINS_MAX`` bins, by comparison and column sums; None where they do not."""
    low, high = _kl_torch.stack(_kl_torch.aminmax(values)).tolist()
    bins = max(minlength, high + 1)
    if low < 0 or bins > _KL_FEW_BINS_MAX:
        return None
    ids = _kl_torch.arange(bins, device=values.device, dtype=values.dtype)
    counts = _kl_torch.zeros(bins, dtype=_kl_torch.int64, device=values.device)
    for part in values.split(max(1, _KL_FEW_BINS_CHUNK // bins)):
        counts += (part.unsqueeze(1) == ids).sum(0)
    return counts


def _kloom_bincount(values, weights=None, minlength=0):
    """``torch.bincount``; into a few bins of a large CUDA tensor, by comparison and column sums."""
    fast = (
        weights is None
        and isinstance(values, _kl_torch.Tensor)
        and values.is_cuda
        and values.dim() == 1
        and values.numel() >= _KL_FEW_BINS_MIN
        and not values.dtype.is_floating_point
        and not values.dtype.is_complex
        and values.dtype != _kl_torch.bool
        and isinstance(minlength, int)
        and 0 <= minlength <= _KL_FEW_BINS_MAX
        and not _kl_torch.compiler.is_compiling()
    )
    counts = _kl_few_bins(values, minlength) if fast else None
    return _kl_torch.bincount(values, weights, minlength) if counts is None else counts
'''.replace("FEW_BINS_MAX_VALUE", str(FEW_BINS_MAX))


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
