"""All-reduce + residual add + RMSNorm: after a row-parallel layer, the partial outputs are summed
over ranks, added to the residual stream, and normalised for the next layer. Returns the
normalised activations and the new residual (both replicated on every rank)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

# Partials are scaled so that their sum has unit variance; bf16 sums of up to 8 of them in
# another order differ by a few half-ulps of the partials, and the norm divides by rms(h) ~ 1.4.

SHAPES = {
    "ci": dict(tokens=16, hidden=64, eps=1e-6, dtype=torch.float32),
    "gpu": dict(tokens=4096, hidden=8192, eps=1e-6, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(hidden, dtype=P["dtype"]))
        dist.broadcast(self.weight.data, src=0)  # the norm's weight is replicated

    def forward(self, partial, residual):
        h = partial.clone()
        dist.all_reduce(h)
        h += residual
        hf = h.float()
        normed = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(h.dtype), h


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
