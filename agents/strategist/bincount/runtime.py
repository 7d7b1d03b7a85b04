"""What a candidate whose ``torch.bincount`` calls were rewritten runs (``_kloom_bincount``): a few
bins counted by comparison and column sums, in chunks; anything else goes to ``torch.bincount``.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch

_KL_FEW_BINS_MAX = 64
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
