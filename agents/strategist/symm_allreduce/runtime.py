"""What a candidate whose ``all_reduce`` calls were renamed runs (``_kloom_all_reduce``): small sum
all-reduces of contiguous CUDA tensors on the default group go through torch symmetric memory
(peer-to-peer loads, no NVLink multicast), everything else through the original collective.
``_KL_SYMM_MAX_BYTES`` and ``_KL_SYMM_ALGO`` are set per candidate from the plan's parameters.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
import torch.distributed as _kl_dist
import torch.distributed._symmetric_memory as _kl_symm

_KL_SYMM_MAX_BYTES = 8 << 20
_KL_SYMM_ALGO = "one_shot"
#: torch's symmetric-memory all-reduces refuse a buffer whose size is not 4-byte aligned (a bf16
#: tensor of odd length: PKB's grad_acc_loss on 2xH200), and two-shot splits it in world parts:
#: the buffer is padded to a multiple of this many bytes per rank, the padding kept at zero.
_KL_SYMM_ALIGN_BYTES = 16
_KL_SYMM_DTYPES = (_kl_torch.float32, _kl_torch.bfloat16, _kl_torch.float16)
_kl_symm_buffers = {}


def _kl_symm_padded(numel, element_size, world):
    """The buffer's length for ``numel`` elements: a multiple of ``world`` aligned pieces."""
    unit = max(1, _KL_SYMM_ALIGN_BYTES // element_size) * world
    return -(-numel // unit) * unit


def _kloom_all_reduce(tensor, op=None, group=None, async_op=False):
    nbytes = tensor.numel() * tensor.element_size()
    eligible = (
        tensor.is_cuda
        and not async_op
        and group is None
        and (op is None or op == _kl_dist.ReduceOp.SUM)
        and tensor.dtype in _KL_SYMM_DTYPES
        and tensor.is_contiguous()
        and 0 < nbytes <= _KL_SYMM_MAX_BYTES
        and _kl_dist.get_world_size() > 1
    )
    if not eligible:
        if op is None:
            return _kl_dist.all_reduce(tensor, group=group, async_op=async_op)
        return _kl_dist.all_reduce(tensor, op=op, group=group, async_op=async_op)
    group_name = _kl_dist.group.WORLD.group_name
    n = tensor.numel()
    padded = _kl_symm_padded(n, tensor.element_size(), _kl_dist.get_world_size())
    key = (padded, tensor.dtype, tensor.device)
    buffer = _kl_symm_buffers.get(key)
    if buffer is None:
        _kl_symm.enable_symm_mem_for_group(group_name)
        buffer = _kl_symm.empty(padded, dtype=tensor.dtype, device=tensor.device)
        _kl_symm.rendezvous(buffer, group_name)
        _kl_symm_buffers[key] = buffer
    buffer[:n].copy_(tensor.reshape(-1))
    if padded > n:
        buffer[n:].zero_()  # a shorter tensor of the same padded size may have left its values there
    if _KL_SYMM_ALGO == "two_shot":
        _kl_torch.ops.symm_mem.two_shot_all_reduce_(buffer, "sum", group_name)
        tensor.copy_(buffer[:n].view_as(tensor))
    else:
        tensor.copy_(_kl_torch.ops.symm_mem.one_shot_all_reduce(buffer, "sum", group_name)[:n].view_as(tensor))
    return None
