"""Equal-split all-to-all: rank i's j-th block of rows goes to rank j, which stores it as its
i-th block."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "collectives"
DESCRIPTION = "Equal-split all-to-all of token blocks (MoE dispatch at fixed capacity, Ulysses head/sequence resharding)."
SOURCE = "DeepSpeed-Ulysses and GShard-style fixed-capacity MoE; nccl-tests alltoall_perf"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=64, hidden=128, dtype=torch.float32),
    "gpu": dict(tokens=16384, hidden=8192, dtype=torch.bfloat16),  # 256 MiB per rank
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(P["tokens"], P["hidden"], dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    n, e = x.numel(), x.element_size()
    return {
        "flops": 0,
        "hbm_bytes": 2 * n * e,
        "link_bytes": e * n * (world_size - 1) / world_size,
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
