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
