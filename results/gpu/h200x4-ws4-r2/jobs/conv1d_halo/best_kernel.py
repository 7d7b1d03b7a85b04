"""1-D convolution of a sequence split across ranks, with a halo exchange.

Rank ``r`` holds positions ``r*L/W .. (r+1)*L/W - 1`` of ``x`` (batch, channels, length). The
convolution is the global ``same`` one (kernel ``K`` odd, ``(K-1)/2`` zeros beyond both ends of
the whole sequence): each rank trades ``(K-1)/2`` boundary columns with each neighbour, pads, and
returns its positions of ``conv1d(x, weight, bias, padding=(K-1)/2)``. Weights are the same on
every rank.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "other"
DESCRIPTION = "1-D convolution with halo exchange: a sequence decomposed over ranks trades boundary columns with its neighbours, then a dense conv1d (long-sequence/audio convolutions under context parallelism)."
SOURCE = "Domain-decomposed convolution (halo exchange with batch_isend_irecv); WaveNet/HyenaDNA-style long 1-D convolutions"
WORLD_SIZES = [2, 4, 8]
# Outputs are O(1); implementations differ by fp32 accumulation order and one bf16 rounding.
TOLERANCE = {torch.bfloat16: (2e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=2, channels=4, length=32, kernel=5, dtype=torch.float32),
    "gpu": dict(batch=4, channels=1024, length=32768, kernel=7, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, channels, kernel, dtype=P["dtype"]) / (channels * kernel) ** 0.5)
        self.bias = nn.Parameter(torch.randn(channels, dtype=P["dtype"]))
        for p in (self.weight, self.bias):
            dist.broadcast(p.data, src=0)

    def forward(self, x):
        rank, world = dist.get_rank(), dist.get_world_size()
        halo = (self.weight.shape[-1] - 1) // 2
        left = x.new_zeros(x.shape[0], x.shape[1], halo)
        right = x.new_zeros(x.shape[0], x.shape[1], halo)
        ops = []
        if rank > 0:
            ops.append(dist.P2POp(dist.isend, x[..., :halo].contiguous(), rank - 1))
            ops.append(dist.P2POp(dist.irecv, left, rank - 1))
        if rank < world - 1:
            ops.append(dist.P2POp(dist.isend, x[..., -halo:].contiguous(), rank + 1))
            ops.append(dist.P2POp(dist.irecv, right, rank + 1))
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return F.conv1d(torch.cat([left, x, right], dim=-1), self.weight, self.bias)


def get_init_inputs():
    return [P["channels"], P["kernel"]]


def get_inputs():
    length = P["length"] // dist.get_world_size()
    return [torch.randn(P["batch"], P["channels"], length, dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    b, c, length = x.shape
    k = P["kernel"]
    e = x.element_size()
    return {
        "flops": 2 * b * length * c * c * k,
        "hbm_bytes": e * (2 * x.numel() + c * c * k + c),
        # An inner rank sends (K-1)/2 columns each way.
        "link_bytes": e * b * c * (k - 1),
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }


# ---- kloom offline strategist: compile_cuda_graph ----
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


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile and replayed from a whole-step CUDA graph."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, mode='default')

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        if not all(a.is_cuda for a in args if isinstance(a, _kl_torch.Tensor)):
            return self._kloom_fn(*args)
        key = _kloom_key(args)
        entry = self._kloom_graphs.get(key)
        if entry is None:
            entry = self._kloom_graphs[key] = _kloom_capture(self._kloom_fn, args, warmup=3)
        return _kloom_replay(entry, list(args), [])
