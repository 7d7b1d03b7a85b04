"""Distributed flash-decode: one decode step's queries (replicated) against a KV cache whose
sequence is split across ranks. Each rank computes attention over its split with the
log-sum-exp of its scores; the ranks all-gather (partial output, lse) and combine them with
softmax weights over the lse. Output: (batch, heads, head_dim), the same on every rank."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "context_parallel"
DESCRIPTION = "Long-context decode with the KV cache split by sequence across GPUs: partial attention + log-sum-exp combine."
SOURCE = "Flash-Decoding (Dao et al., 2023) split-KV combine across ranks; vLLM decode context parallelism"
WORLD_SIZES = [2, 4, 8]
# Outputs average 128k random values, so they are O(0.005): atol is sized to that; bf16
# rounding of the partial outputs moves results by about 3e-5.
TOLERANCE = {torch.bfloat16: (2e-4, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=2, heads=8, kv_heads=2, context=64, head_dim=16, dtype=torch.float32),
    "gpu": dict(batch=8, heads=32, kv_heads=8, context=131072, head_dim=128, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def attention_with_lse(q, k, v):
    """Attention of q over k, v, and the log-sum-exp of its scores, (B, H, Sq) in fp32."""
    # The public SDPA does not return the log-sum-exp.
    if not q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    if q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)[:2]
    # The flash kernel takes half precision only; the memory-efficient one also takes float32
    # (its lse may be padded along the queries).
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False)[:2]
    return out, lse[..., : q.shape[-2]]


class Model(nn.Module):
    def forward(self, q, k_cache, v_cache):
        world = dist.get_world_size()
        b, h, d = q.shape
        kv_heads = k_cache.shape[1]
        # The heads sharing a kv head become that head's query rows, so the kernel sees MHA.
        out, lse = attention_with_lse(q.view(b, kv_heads, h // kv_heads, d), k_cache, v_cache)
        partial = torch.cat([out.float().reshape(b, h, d), lse.reshape(b, h, 1)], dim=-1)
        # gloo takes the gathered parts concatenated along dim 0 only (NCCL also takes them stacked)
        parts = torch.empty(world * b, h, d + 1, dtype=partial.dtype, device=partial.device)
        dist.all_gather_into_tensor(parts, partial)
        parts = parts.view(world, b, h, d + 1)
        weights = torch.softmax(parts[..., d], dim=0).unsqueeze(-1)  # each rank's share of the mass
        return (parts[..., :d] * weights).sum(0).to(q.dtype)


def get_init_inputs():
    return []


def get_inputs():
    world = dist.get_world_size()
    b, d = P["batch"], P["head_dim"]
    q = torch.randn(b, P["heads"], d, dtype=P["dtype"])
    dist.broadcast(q, src=0)  # every rank decodes the same queries
    shape = (b, P["kv_heads"], P["context"] // world, d)
    return [q, torch.randn(shape, dtype=P["dtype"]), torch.randn(shape, dtype=P["dtype"])]


def roofline(world_size, inputs):
    q, k, v = inputs
    b, h, d = q.shape
    s_local = k.shape[2]
    e = q.element_size()
    return {
        "flops": 4 * b * h * s_local * d,
        "hbm_bytes": e * (2 * q.numel() + k.numel() + v.numel()),
        # the (output, lse) partial in fp32 goes to every other rank
        "link_bytes": 4 * b * h * (d + 1) * (world_size - 1),
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
