"""RMSNorm over a hidden dimension that is sharded across ranks: each rank holds hidden/n of the
features (and of the norm's weight), so the per-token sum of squares is all-reduced before each
rank normalises its own slice. Output: this rank's (tokens, hidden/n) slice."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "tensor_parallel"
DESCRIPTION = "RMSNorm of hidden-sharded activations: all-reduce of the per-token sum of squares (TP norm inside attention blocks)."
SOURCE = "vLLM MiniMaxText01RMSNormTP (lightning attention output norm); QK-norm over TP-sharded heads"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=16, hidden=64, eps=1e-6, dtype=torch.float32),
    "gpu": dict(tokens=16384, hidden=8192, eps=1e-6, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, hidden_per_rank, eps):
        super().__init__()
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden_per_rank, dtype=P["dtype"]))

    def forward(self, x):
        xf = x.float()
        sum_sq = xf.pow(2).sum(-1, keepdim=True)
        dist.all_reduce(sum_sq)
        normed = xf * torch.rsqrt(sum_sq / self.hidden + self.eps)
        return self.weight * normed.to(x.dtype)


def get_init_inputs():
    return [P["hidden"], P["hidden"] // dist.get_world_size(), P["eps"]]


def get_inputs():
    return [torch.randn(P["tokens"], P["hidden"] // dist.get_world_size(), dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    n, e = x.numel(), x.element_size()
    tokens = x.shape[0]
    return {
        "flops": 4 * n,
        "hbm_bytes": e * (2 * n + x.shape[-1]),
        "link_bytes": 2 * (world_size - 1) / world_size * tokens * 4,  # fp32 sums of squares
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
