"""A whole tensor- and sequence-parallel SwiGLU MLP block: all-gather the sequence shards, a
column-parallel gate/up GEMM, SiLU(gate) * up, a row-parallel down GEMM, and a reduce-scatter
of the partial sums back to sequence shards. Output: this rank's (tokens/n, hidden) rows."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "tensor_parallel"
DESCRIPTION = "TP+SP SwiGLU MLP block: all-gather, gate/up GEMM, SiLU-and-multiply, down GEMM, reduce-scatter (Megatron LLM training)."
SOURCE = "Megatron-LM ParallelMLP with sequence_parallel=True and SwiGLU (Llama-3-70B sizes)"
WORLD_SIZES = [2, 4, 8]
# The down projection's partials are O(0.6/sqrt(n)) and rounded to bf16 before the reduction;
# summing them in another order differs by a few of their half-ulps.
TOLERANCE = {torch.bfloat16: (6.25e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(tokens=32, hidden=32, ffn=64, dtype=torch.float32),
    "gpu": dict(tokens=4096, hidden=8192, ffn=28672, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, ffn, ffn_per_rank):
        super().__init__()
        # Rows [0, ffn/n) of w_in are this rank's gate features, rows [ffn/n, 2 ffn/n) its up features.
        self.w_in = nn.Parameter(torch.randn(2 * ffn_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)
        self.w_out = nn.Parameter(torch.randn(hidden, ffn_per_rank, dtype=P["dtype"]) / ffn**0.5)

    def forward(self, x_shard):
        world = dist.get_world_size()
        x = torch.empty(world * x_shard.shape[0], x_shard.shape[1], dtype=x_shard.dtype, device=x_shard.device)
        dist.all_gather_into_tensor(x, x_shard)
        gate, up = (x @ self.w_in.t()).chunk(2, dim=-1)
        partial = (F.silu(gate) * up) @ self.w_out.t()
        out = torch.empty_like(x_shard)
        dist.reduce_scatter_tensor(out, partial)
        return out


def get_init_inputs():
    return [P["hidden"], P["ffn"], P["ffn"] // dist.get_world_size()]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    e = x.element_size()
    tokens, hidden, ffn_r = x.shape[0] * world_size, x.shape[1], P["ffn"] // world_size
    return {
        # gate/up GEMM (2 ffn/n outputs) + down GEMM (K = ffn/n), SiLU-and-multiply, the reduction
        "flops": 6 * tokens * hidden * ffn_r + 4 * tokens * ffn_r + tokens * hidden * (world_size - 1) / world_size,
        # the gathered input read once, the weights once, the output shard written once
        "hbm_bytes": e * (tokens * hidden + 3 * ffn_r * hidden + x.numel()),
        # all-gather of the input shard, then reduce-scatter of the (tokens, hidden) partial
        "link_bytes": e * (x.numel() * (world_size - 1) + tokens * hidden * (world_size - 1) / world_size),
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
