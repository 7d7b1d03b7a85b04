"""FSDP backward: reduce-scatter one transformer block's gradients to their dim-0 shards.

Every rank holds the full bf16 gradient of each parameter of a Llama block, computed from its own
batch. FSDP2 with ``reduce_dtype=float32`` copies them, upcast, into one flat buffer laid out
rank-major (row ``r`` holds the ``r``-th dim-0 chunk of every gradient), reduce-scatters it with
an average, and hands each parameter its float32 shard. Each rank returns the shards it owns:
``mean over ranks of grad[p]`` restricted to rows ``r*n/W .. (r+1)*n/W - 1``, in float32.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "data_parallel"
DESCRIPTION = "FSDP/ZeRO gradient reduce-scatter of a transformer block's gradients into float32 dim-0 shards (FSDP2 foreach_reduce)."
SOURCE = "PyTorch FSDP2 foreach_reduce with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); Llama-3-8B block shapes"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(hidden=16, kv=8, ffn=24, dtype=torch.bfloat16),
    # One Llama-3-8B block: hidden 4096, 8 KV heads of 128, ffn 14336 (218M parameters).
    "gpu": dict(hidden=4096, kv=1024, ffn=14336, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def block_shapes(hidden, kv, ffn):
    """Parameter shapes of one Llama block, in registration order."""
    return [
        (hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden),  # q, k, v, o
        (ffn, hidden), (ffn, hidden), (hidden, ffn),  # gate, up, down
        (hidden,), (hidden,),  # attention and MLP norms
    ]


class Model(nn.Module):
    def forward(self, *grads):
        world = dist.get_world_size()
        shard_sizes = [g.numel() // world for g in grads]
        staging = torch.empty(world, sum(shard_sizes), dtype=torch.float32, device=grads[0].device)
        offset = 0
        for g, n in zip(grads, shard_sizes):
            staging[:, offset : offset + n].copy_(g.view(world, n))
            offset += n
        shard = staging.new_empty(sum(shard_sizes))
        dist.reduce_scatter_tensor(shard, staging.view(-1), op=dist.ReduceOp.AVG)
        out = []
        for g, piece in zip(grads, shard.split(shard_sizes)):
            out.append(piece.view(g.shape[0] // world, *g.shape[1:]))
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(shape, dtype=P["dtype"]) for shape in block_shapes(P["hidden"], P["kv"], P["ffn"])]


def roofline(world_size, inputs):
    numel = sum(g.numel() for g in inputs)
    e = inputs[0].element_size()
    return {
        "flops": numel,  # one add per element received, summed over the ranks
        "hbm_bytes": numel * e + numel // world_size * 4,
        # Each rank sends every other rank that rank's chunk, at the gradients' own precision
        # (exact float32 accumulation happens at the receiver).
        "link_bytes": numel // world_size * (world_size - 1) * e,
        "dtype": "fp32",
    }


# ---- kloom offline strategist: torch_compile ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, compiled with torch.compile (mode default)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = _kl_torch.compile(self._kloom_eager, dynamic=False, mode='default')

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
