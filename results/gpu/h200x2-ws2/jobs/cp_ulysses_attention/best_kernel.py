"""Ulysses (DeepSpeed sequence parallelism) attention: q, k and v arrive sharded by sequence,
(batch, seq/n, heads, head_dim). An all-to-all turns each into the whole sequence for heads/n
heads, causal attention runs on those heads, and a second all-to-all turns the output back into
this rank's sequence block for all heads."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAMILY = "context_parallel"
DESCRIPTION = "Ulysses attention: all-to-all sequence->heads, causal attention, all-to-all heads->sequence (DeepSpeed-Ulysses long-context training)."
SOURCE = "Jacobs et al., 2023, 'DeepSpeed Ulysses'; DeepSpeed DistributedAttention"
WORLD_SIZES = [2, 4, 8]
# Late tokens average thousands of random values (outputs O(0.01)), early ones few (O(1)):
# atol covers the former, rtol the latter.
TOLERANCE = {torch.bfloat16: (1e-3, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=1, seq=32, heads=8, head_dim=16, dtype=torch.float32),
    "gpu": dict(batch=1, seq=16384, heads=32, head_dim=128, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def sequence_to_heads(x):
    """(B, S/n, H, D) sharded by sequence -> (B, S, H/n, D) sharded by heads."""
    world = dist.get_world_size()
    b, s_local, h, d = x.shape
    send = x.reshape(b, s_local, world, h // world, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # recv[j]: rank j's sequence block of this rank's heads
    return recv.permute(1, 0, 2, 3, 4).reshape(b, world * s_local, h // world, d)


def heads_to_sequence(x):
    """(B, S, H/n, D) sharded by heads -> (B, S/n, H, D) sharded by sequence."""
    world = dist.get_world_size()
    b, s, h_local, d = x.shape
    send = x.reshape(b, world, s // world, h_local, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # recv[j]: this rank's sequence block of rank j's heads
    return recv.permute(1, 2, 0, 3, 4).reshape(b, s // world, world * h_local, d)


class Model(nn.Module):
    def forward(self, q, k, v):
        q, k, v = (sequence_to_heads(t).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return heads_to_sequence(out.transpose(1, 2))


def get_init_inputs():
    return []


def get_inputs():
    shape = (P["batch"], P["seq"] // dist.get_world_size(), P["heads"], P["head_dim"])
    return [torch.randn(shape, dtype=P["dtype"]) for _ in range(3)]


def roofline(world_size, inputs):
    q = inputs[0]
    b, s_local, h, d = q.shape
    s = s_local * world_size
    e = q.element_size()
    return {
        "flops": 4 * b * (h // world_size) * d * (s * (s + 1) // 2),
        "hbm_bytes": e * 4 * q.numel(),
        # three all-to-alls in (q, k, v) and one out, each keeping 1/n of the data at home
        "link_bytes": e * 4 * q.numel() * (world_size - 1) / world_size,
        "dtype": "bf16" if q.dtype == torch.bfloat16 else "fp32",
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
