"""What a candidate whose independent all-reduces were coalesced runs
(``_kloom_all_reduce_coalesced``): one flat all-reduce over the concatenated tensors, copied back.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
import torch.distributed as _kl_dist


def _kloom_all_reduce_coalesced(tensors, op=None, group=None):
    """All-reduce ``tensors`` (same reduction) as one collective over a packed flat buffer."""
    kwargs = {} if op is None else {"op": op}
    if group is not None:
        kwargs["group"] = group
    first = tensors[0]
    packable = all(t.dtype == first.dtype and t.device == first.device for t in tensors)
    if packable and not _kl_torch.compiler.is_compiling():
        # Tensors that share storage would be reduced twice in sequence; packing would change that.
        packable = len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)
    if not packable:
        for t in tensors:
            _kl_dist.all_reduce(t, **kwargs)
        return None
    flat = _kl_torch.cat([t.reshape(-1) for t in tensors])
    _kl_dist.all_reduce(flat, **kwargs)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view(t.shape))
        offset += n
    return None
