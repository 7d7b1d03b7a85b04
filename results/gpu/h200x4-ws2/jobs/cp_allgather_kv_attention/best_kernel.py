"""All-gather-KV causal attention with grouped-query heads: rank r holds the contiguous tokens
[r*S/n, (r+1)*S/n) of q (heads) and of k, v (fewer kv_heads). The ranks all-gather k and v, and
each attends its queries to the keys up to its last token (causal, aligned to the bottom right).
Output: (batch, heads, seq/n, head_dim)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

FAMILY = "context_parallel"
DESCRIPTION = "All-gather of GQA keys/values, then causal attention of the local queries (Llama 3 context-parallel training)."
SOURCE = "Llama 3 herd of models (2024), context parallelism by all-gathering K/V; Megatron-LM CP with a2a+p2p off"
WORLD_SIZES = [2, 4, 8]
# Late tokens average thousands of random values (outputs O(0.01)), early ones few (O(1)):
# atol covers the former, rtol the latter.
TOLERANCE = {torch.bfloat16: (1e-3, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=1, heads=4, kv_heads=2, seq=64, head_dim=16, dtype=torch.float32),
    "gpu": dict(batch=1, heads=32, kv_heads=8, seq=16384, head_dim=128, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def gather_sequence(x):
    """(B, H, S/n, D) on every rank -> (B, H, S, D), the ranks' blocks in rank order."""
    world = dist.get_world_size()
    b, h, s_local, d = x.shape
    # gloo takes the gathered blocks concatenated along dim 0 only (NCCL also takes them stacked)
    blocks = torch.empty(world * b, h, s_local, d, dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(blocks, x)
    return blocks.view(world, b, h, s_local, d).permute(1, 2, 0, 3, 4).reshape(b, h, world * s_local, d)


class Model(nn.Module):
    def forward(self, q, k, v):
        s_local = q.shape[2]
        k, v = gather_sequence(k), gather_sequence(v)
        keys = (dist.get_rank() + 1) * s_local  # later ranks' keys are all in the future
        mask = causal_lower_right(s_local, keys)
        return F.scaled_dot_product_attention(q, k[:, :, :keys], v[:, :, :keys], attn_mask=mask, enable_gqa=True)


def get_init_inputs():
    return []


def get_inputs():
    world = dist.get_world_size()
    b, s_local, d = P["batch"], P["seq"] // world, P["head_dim"]
    q = torch.randn(b, P["heads"], s_local, d, dtype=P["dtype"])
    k = torch.randn(b, P["kv_heads"], s_local, d, dtype=P["dtype"])
    v = torch.randn(b, P["kv_heads"], s_local, d, dtype=P["dtype"])
    return [q, k, v]


def roofline(world_size, inputs):
    q, k, v = inputs
    b, h, s_local, d = q.shape
    rank = dist.get_rank()
    e = q.element_size()
    pairs = rank * s_local * s_local + s_local * (s_local + 1) // 2  # unmasked (query, key) pairs
    return {
        "flops": 4 * b * h * d * pairs,
        # q read and the output written once; the K/V blocks of this rank and earlier ones read once
        "hbm_bytes": e * (2 * q.numel() + (k.numel() + v.numel()) * (rank + 1)),
        # this rank's K/V block is needed by the ranks after it only
        "link_bytes": e * (k.numel() + v.numel()) * (world_size - 1 - rank),
        "dtype": "bf16" if q.dtype == torch.bfloat16 else "fp32",
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
