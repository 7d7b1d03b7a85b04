"""Causal depthwise convolution (Mamba's short conv) of a sequence split across ranks.

Rank ``r`` holds positions ``r*L/W .. (r+1)*L/W - 1`` of ``x`` (batch, channels, length). The
convolution is causal and depthwise with kernel ``K`` (each channel its own filter, ``K-1`` zeros
before the start of the whole sequence), followed by SiLU: each rank receives the last ``K-1``
columns of the previous rank, sends its own to the next, and returns its positions of
``silu(conv1d(x, weight, bias, padding=K-1, groups=C)[..., :L])``. Weights are the same on every
rank.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "other"
DESCRIPTION = "Causal depthwise conv1d + SiLU under context parallelism: the last K-1 columns pass to the next rank (Mamba/Mamba-2 short convolution with the sequence split over GPUs)."
SOURCE = "Mamba-2 causal_conv1d (kernel 4) with context parallelism; Mamba-2 2.7B conv width (d_inner 5120 + 2 x 128 state = 5376 channels)"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(batch=2, channels=6, length=32, kernel=4, dtype=torch.float32),
    "gpu": dict(batch=4, channels=5376, length=32768, kernel=4, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, kernel, dtype=P["dtype"]) / kernel**0.5)
        self.bias = nn.Parameter(torch.randn(channels, dtype=P["dtype"]))
        for p in (self.weight, self.bias):
            dist.broadcast(p.data, src=0)

    def forward(self, x):
        rank, world = dist.get_rank(), dist.get_world_size()
        history = self.weight.shape[-1] - 1
        previous = x.new_zeros(x.shape[0], x.shape[1], history)
        ops = []
        if rank > 0:
            ops.append(dist.P2POp(dist.irecv, previous, rank - 1))
        if rank < world - 1:
            ops.append(dist.P2POp(dist.isend, x[..., -history:].contiguous(), rank + 1))
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        y = F.conv1d(torch.cat([previous, x], dim=-1), self.weight, self.bias, groups=x.shape[1])
        return F.silu(y)


def get_init_inputs():
    return [P["channels"], P["kernel"]]


def get_inputs():
    length = P["length"] // dist.get_world_size()
    return [torch.randn(P["batch"], P["channels"], length, dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    b, c, _ = x.shape
    k = P["kernel"]
    e = x.element_size()
    return {
        "flops": 2 * x.numel() * k,
        "hbm_bytes": e * (2 * x.numel() + c * (k + 1)),
        "link_bytes": e * b * c * (k - 1),
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }


# ---- kloom offline strategist: reference_copy ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
