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
