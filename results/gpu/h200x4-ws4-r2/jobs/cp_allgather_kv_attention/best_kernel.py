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
        return _kloom_sdpa(q, k[:, :, :keys], v[:, :, :keys], attn_mask=mask, enable_gqa=True)


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

import math as _kl_math
import torch as _kl_torch
import torch.nn.functional as _kl_F

_kl_attention_served = set()  # the GPU kernels that computed a piece (for tests and profiles)


def _kl_lower_right_prefix(attn_mask, q, k):
    """``sk - sq`` when ``attn_mask`` is a bottom-right causal bias over more keys than queries."""
    try:
        from torch.nn.attention.bias import CausalBias, CausalVariant
    except ImportError:
        return None
    if not isinstance(attn_mask, CausalBias) or attn_mask.variant != CausalVariant.LOWER_RIGHT:
        return None
    sq, sk = q.shape[-2], k.shape[-2]
    if attn_mask.seq_len_q != sq or attn_mask.seq_len_kv != sk or sk <= sq:
        return None
    return sk - sq


def _kl_accumulate(dtype):
    return _kl_torch.promote_types(dtype, _kl_torch.float32)


def _kl_attend_math(q, k, v, causal, scale):
    acc = _kl_accumulate(q.dtype)
    scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * scale
    if causal:
        keep = _kl_torch.ones(q.shape[-2], k.shape[-2], dtype=_kl_torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = _kl_torch.logsumexp(scores, dim=-1)
    return _kl_torch.exp(scores - lse.unsqueeze(-1)) @ v.to(acc), lse  # unrounded: the merge rounds once


def _kl_attend(q, k, v, causal, scale):
    """(output, log-sum-exp (float32, or float64 for float64)) of softmax attention; q's heads a
    multiple of k's. The GPU kernels round the output to q's dtype; before the merge, the bf16
    rounding of a piece is weighted by that piece's share, so it stays within a rounding of the
    result wherever neither piece is far larger than the result (cancellation)."""
    b, h, s, d = q.shape
    group = h // k.shape[1]
    if group > 1 and not causal and q.is_contiguous():
        out, lse = _kl_attend(q.view(b, k.shape[1], group * s, d), k, v, False, scale)
        return out.reshape(b, h, s, out.shape[-1]), lse.reshape(b, h, s)
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if q.is_cuda:
        params = _kl_torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, causal, False)
        res = None
        if _kl_torch.backends.cuda.can_use_cudnn_attention(params, False):
            res = _kl_torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
            _kl_attention_served.add("cudnn")
        elif _kl_torch.backends.cuda.can_use_flash_attention(params, False):
            res = _kl_torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
            _kl_attention_served.add("flash")
        if res is not None:
            return res[0], res[1].reshape(b, h, s).to(_kl_accumulate(q.dtype))
    return _kl_attend_math(q, k, v, causal, scale)


def _kl_split_attention(q, k, v, prefix, scale):
    out_a, lse_a = _kl_attend(q, k[:, :, :prefix], v[:, :, :prefix], False, scale)
    out_b, lse_b = _kl_attend(q, k[:, :, prefix:], v[:, :, prefix:], True, scale)
    weight = _kl_torch.sigmoid(lse_b - lse_a).unsqueeze(-1)
    acc = _kl_accumulate(q.dtype)
    return _kl_torch.lerp(out_a.to(acc), out_b.to(acc), weight).to(q.dtype)


def _kloom_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention``; a bottom-right causal bias over more keys than queries
    is computed as an unmasked and a square causal piece, merged by their log-sum-exps."""
    prefix = None
    if isinstance(query, _kl_torch.Tensor) and isinstance(key, _kl_torch.Tensor) and isinstance(value, _kl_torch.Tensor):
        shapes_ok = query.dim() == key.dim() == value.dim() == 4 and query.shape[0] == key.shape[0] == value.shape[0]
        heads_ok = shapes_ok and key.shape[1] == value.shape[1] and query.shape[1] % key.shape[1] == 0
        heads_ok = heads_ok and (enable_gqa or query.shape[1] == key.shape[1])
        if heads_ok and not is_causal and dropout_p == 0.0 and query.shape[-1] == key.shape[-1]:
            prefix = _kl_lower_right_prefix(attn_mask, query, key)
    if prefix is None:
        return _kl_F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
        )
    scale = 1.0 / _kl_math.sqrt(query.shape[-1]) if scale is None else scale
    return _kl_split_attention(query, key, value, prefix, scale)


# ---- kloom offline strategist: split_causal_attention ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


class ModelNew(Model):
    """The reference's computation, with rewritten calls (split_causal_attention)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {}
        self._kloom_streams = []
        self._kloom_fn = self._kloom_eager

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
        return self._kloom_fn(*args)
