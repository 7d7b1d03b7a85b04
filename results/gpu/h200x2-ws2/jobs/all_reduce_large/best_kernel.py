"""Bandwidth-bound all-reduce of a 256 MiB gradient bucket, in place (as data-parallel training
reduces its buckets). The input buffer holds the sum on return, and the same buffer is returned."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "collectives"
DESCRIPTION = "Large bandwidth-bound in-place all-reduce of a gradient bucket (DDP / ZeRO-1 data-parallel training)."
SOURCE = "PyTorch DDP gradient buckets; nccl-tests all_reduce_perf at 256 MiB"
WORLD_SIZES = [2, 4, 8]
# Partial sums are scaled so that their total has unit variance; bf16 sums of up to 8 terms in
# another order differ by a few half-ulps of the partial sums (about 0.03 at worst).
TOLERANCE = {torch.bfloat16: (6.25e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(rows=256, cols=1024, dtype=torch.float32),  # 1 MiB
    "gpu": dict(rows=16384, cols=8192, dtype=torch.bfloat16),  # 256 MiB
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def forward(self, bucket):
        dist.all_reduce(bucket)
        return bucket


def get_init_inputs():
    return []


def get_inputs():
    world = dist.get_world_size()
    return [torch.randn(P["rows"], P["cols"], dtype=P["dtype"]) / world**0.5]


def roofline(world_size, inputs):
    x = inputs[0]
    n, e = x.numel(), x.element_size()
    return {
        "flops": n * (world_size - 1) / world_size,
        "hbm_bytes": 2 * n * e,
        # ring all-reduce: reduce-scatter then all-gather, each sending (n-1)/n of the buffer
        "link_bytes": 2 * (world_size - 1) / world_size * n * e,
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
