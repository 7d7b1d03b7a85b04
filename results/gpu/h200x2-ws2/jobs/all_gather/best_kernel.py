"""All-gather of sequence-sharded activations: every rank holds tokens/n rows and ends with all
of them, in rank order."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "collectives"
DESCRIPTION = "All-gather of sequence-sharded activations into the full sequence (sequence parallelism, FSDP parameter gather)."
SOURCE = "Megatron-LM gather_from_sequence_parallel_region; nccl-tests all_gather_perf"
WORLD_SIZES = [2, 4, 8]

SHAPES = {
    "ci": dict(tokens=64, hidden=128, dtype=torch.float32),
    "gpu": dict(tokens=16384, hidden=8192, dtype=torch.bfloat16),  # 256 MiB gathered
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def forward(self, shard):
        world = dist.get_world_size()
        out = torch.empty(world * shard.shape[0], shard.shape[1], dtype=shard.dtype, device=shard.device)
        dist.all_gather_into_tensor(out, shard)
        return out


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]


def roofline(world_size, inputs):
    x = inputs[0]
    n, e = x.numel(), x.element_size()
    return {
        "flops": 0,
        "hbm_bytes": e * (n + world_size * n),
        "link_bytes": e * n * (world_size - 1),
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
