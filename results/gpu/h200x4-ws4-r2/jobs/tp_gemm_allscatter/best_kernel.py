"""GEMM + all-scatter: every rank holds the same activations and a column shard of the weight,
computes its (tokens, out/n) block of the product and places it in every rank's full output, so
each rank ends with the whole (tokens, out) result: out[:, r*N/n:(r+1)*N/n] = x @ W_r^T."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "tensor_parallel"
DESCRIPTION = "Column-parallel GEMM whose output blocks are scattered to every rank (ColumnParallelLinear with gather_output, e.g. an LM head)."
SOURCE = "Megatron-LM ColumnParallelLinear(gather_output=True); Iris GEMM + all-scatter example"
WORLD_SIZES = [2, 4, 8]
# The weight is scaled by 1/sqrt(hidden) so outputs are O(1); implementations differ by the
# accumulation order in fp32 and one bf16 rounding of the output.
TOLERANCE = {torch.bfloat16: (2e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(tokens=16, hidden=32, out=48, dtype=torch.float32),
    "gpu": dict(tokens=4096, hidden=8192, out=28672, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, out_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)

    def forward(self, x):
        world = dist.get_world_size()
        block = x @ self.weight.t()
        tokens, cols = block.shape
        # gloo takes the gathered blocks concatenated along dim 0 only (NCCL also takes them stacked)
        blocks = torch.empty(world * tokens, cols, dtype=block.dtype, device=block.device)
        dist.all_gather_into_tensor(blocks, block)
        # (rank, tokens, out/n) -> (tokens, rank * out/n): rank r's block lands in columns r*out/n onwards
        return blocks.view(world, tokens, cols).permute(1, 0, 2).reshape(tokens, world * cols)


def get_init_inputs():
    return [P["hidden"], P["out"] // dist.get_world_size()]


def get_inputs():
    x = torch.randn(P["tokens"], P["hidden"], dtype=P["dtype"])
    dist.broadcast(x, src=0)  # replicated activations
    return [x]


def roofline(world_size, inputs):
    x = inputs[0]
    e = x.element_size()
    m, k, n = x.shape[0], x.shape[1], P["out"] // world_size
    return {
        "flops": 2 * m * k * n,
        "hbm_bytes": e * (m * k + k * n + m * n * world_size),
        "link_bytes": e * m * n * (world_size - 1),
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
