"""Ring attention, forward, bidirectional (no mask): each rank holds a contiguous block of the
sequence's queries, keys and values. For n steps it attends its queries to the KV block it holds,
merges the block's result into a running output with the log-sum-exp (online softmax), and passes
the KV block to the next rank of the ring. Output: attention of this rank's queries over the whole
sequence, (batch, heads, seq/n, head_dim)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "context_parallel"
DESCRIPTION = "Ring attention forward: KV blocks passed around the ring with send/recv, online-softmax merge (long-context training/prefill)."
SOURCE = "Liu et al., 2023, 'Ring Attention with Blockwise Transformers'; zhuzilin/ring-flash-attention; torch context_parallel"
WORLD_SIZES = [2, 4, 8]
# Outputs average ~16k random values, so they are O(0.01): atol is sized to that, and the
# bf16 rounding of each block's output before the merge moves results by about 1e-4.
TOLERANCE = {torch.bfloat16: (1e-3, 1.6e-2)}

SHAPES = {
    "ci": dict(batch=1, heads=2, seq=64, head_dim=16, dtype=torch.float32),
    "gpu": dict(batch=1, heads=32, seq=16384, head_dim=128, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


def attention_with_lse(q, k, v):
    """Attention of q over one KV block, and the log-sum-exp of its scores, (B, H, Sq) in fp32."""
    # The public SDPA does not return the log-sum-exp; torch's own context parallelism calls
    # these ops for the same reason.
    if not q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    if q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)[:2]
    # The flash kernel takes half precision only; the memory-efficient one also takes float32
    # (its lse may be padded along the queries).
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False)[:2]
    return out, lse[..., : q.shape[-2]]


def pass_along(k, v):
    """Send this rank's KV block to the next rank of the ring; receive the previous rank's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    ops = [
        dist.P2POp(dist.isend, k, (rank + 1) % world),
        dist.P2POp(dist.isend, v, (rank + 1) % world),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % world),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % world),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_next, v_next


class Model(nn.Module):
    def forward(self, q, k, v):
        out = lse = None
        for step in range(dist.get_world_size()):
            if step:
                k, v = pass_along(k, v)
            block_out, block_lse = attention_with_lse(q, k, v)
            if out is None:
                out, lse = block_out.float(), block_lse
                continue
            merged = torch.logaddexp(lse, block_lse)
            out = out * torch.exp(lse - merged).unsqueeze(-1) + block_out.float() * torch.exp(block_lse - merged).unsqueeze(-1)
            lse = merged
        return out.to(q.dtype)


def get_init_inputs():
    return []


def get_inputs():
    shape = (P["batch"], P["heads"], P["seq"] // dist.get_world_size(), P["head_dim"])
    return [torch.randn(shape, dtype=P["dtype"]) for _ in range(3)]


def roofline(world_size, inputs):
    q, k, v = inputs
    b, h, s_local, d = q.shape
    e = q.element_size()
    return {
        "flops": 4 * b * h * s_local * (s_local * world_size) * d,
        # q read and the output written once; every rank's K/V block read once
        "hbm_bytes": e * (2 * q.numel() + (k.numel() + v.numel()) * world_size),
        # every KV block travels to the n-1 other ranks
        "link_bytes": e * (k.numel() + v.numel()) * (world_size - 1),
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
