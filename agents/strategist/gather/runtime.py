"""What a candidate whose list all-gathers were rewritten runs (``_kloom_all_gather_list``,
``_kloom_cat_gathered``): one ``all_gather_into_tensor`` whose buffer the later ``cat`` returns as
it is.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
import torch.distributed as _kl_dist


def _kloom_all_gather_list(tensor_list, tensor, group=None, async_op=False):
    """``all_gather`` into ``tensor_list`` through one ``all_gather_into_tensor``: the list ends up
    holding views of one flat buffer (rank-major), the concatenation along dim 0."""
    same = all(t.shape == tensor.shape and t.dtype == tensor.dtype and t.device == tensor.device for t in tensor_list)
    if async_op or not same or tensor.dim() == 0 or len(tensor_list) != _kl_dist.get_world_size(group):
        return _kl_dist.all_gather(tensor_list, tensor, group=group, async_op=async_op)
    flat = _kl_torch.empty((len(tensor_list) * tensor.shape[0],) + tuple(tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    _kl_dist.all_gather_into_tensor(flat, tensor.contiguous(), group=group)
    tensor_list[:] = list(flat.chunk(len(tensor_list)))
    return None


def _kloom_cat_gathered(tensors, dim=0, *, out=None):
    """``torch.cat``, without the copy when ``tensors`` are the consecutive blocks of one buffer."""
    if out is None and dim == 0 and len(tensors) > 1 and not _kl_torch.compiler.is_compiling():
        base = tensors[0]._base
        if base is not None and base.is_contiguous() and all(t._base is base and t.is_contiguous() for t in tensors):
            step = tensors[0].numel() * tensors[0].element_size()
            start = base.data_ptr()
            if all(t.data_ptr() == start + i * step for i, t in enumerate(tensors)) and len(tensors) * tensors[0].numel() == base.numel():
                return base.view((-1,) + tuple(tensors[0].shape[1:]))
    if out is not None:
        return _kl_torch.cat(tensors, dim=dim, out=out)
    return _kl_torch.cat(tensors, dim=dim)
