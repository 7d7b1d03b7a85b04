"""Latency-bound all-reduce: one decode step's activations (a few tokens x hidden) summed over
the tensor-parallel group, out of place. At 16-64 KiB the time is launch and synchronisation
latency, not bandwidth: the floor from the link bytes is far below what any NCCL call takes."""
import torch.distributed as dist
import torch.nn as nn

class Model(nn.Module):

    def forward(self, x):
        out = x.clone()
        _kloom_all_reduce(out)
        return out

import torch as _kl_torch
import torch.distributed as _kl_dist
import torch.distributed._symmetric_memory as _kl_symm

_KL_SYMM_MAX_BYTES = 16777216
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


# ---- kloom offline strategist: symm_mem_allreduce_graph ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree

import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


def _kloom_key(args):
    return tuple(
        (tuple(a.shape), a.dtype, a.device, a.stride()) if isinstance(a, _kl_torch.Tensor) else ("value", repr(a))
        for a in args
    )


def _kloom_clone_inputs(args):
    return [a.clone() if isinstance(a, _kl_torch.Tensor) else a for a in args]


def _kloom_capture(fn, args, warmup):
    """Warm ``fn`` up on a side stream (compiling and allocating what it needs), then capture one
    call on static copies of the inputs in a CUDA graph. Every rank captures the same calls, so
    collectives inside are captured on all ranks together."""
    static = _kloom_clone_inputs(args)
    side = _kl_torch.cuda.Stream()
    side.wait_stream(_kl_torch.cuda.current_stream())
    with _kl_torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*_kloom_clone_inputs(args))
    _kl_torch.cuda.current_stream().wait_stream(side)
    _kl_torch.cuda.synchronize()
    graph = _kl_torch.cuda.CUDAGraph()
    with _kl_torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn(*static)
    return graph, static, out


def _kloom_replay(entry, args, mutated):
    """Copy this call's inputs into the graph's static buffers, replay, copy back the inputs the
    reference modifies in place, and return fresh copies of the outputs (the graph reuses its
    buffers on the next call)."""
    graph, static, out = entry
    for buffer, arg in zip(static, args):
        if isinstance(buffer, _kl_torch.Tensor):
            buffer.copy_(arg)
    graph.replay()
    for i in mutated:
        args[i].copy_(static[i])
    return _kl_pytree.tree_map(lambda t: t.clone() if isinstance(t, _kl_torch.Tensor) else t, out)


def _kloom_graphed(graphs, fn, args, warmup, mutated):
    """``fn`` on ``args`` through the CUDA graph kept in ``graphs`` for their signature, captured
    at the first call with it; where an input is not on a GPU, ``fn`` itself."""
    if not all(a.is_cuda for a in args if isinstance(a, _kl_torch.Tensor)):
        return fn(*args)
    key = _kloom_key(args)
    entry = graphs.get(key)
    if entry is None:
        entry = graphs[key] = _kloom_capture(fn, args, warmup)
    return _kloom_replay(entry, list(args), mutated)


class ModelNew(Model):
    """The reference's computation, replayed from a whole-step CUDA graph, with rewritten calls (symm_allreduce)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return _kloom_graphed(self._kloom_graphs, self._kloom_fn, args, 3, [])
