"""What a candidate whose bottom-right causal attention was split runs (``attention/``'s rewrite
calls ``_kloom_sdpa``): an unmasked piece over the prefix and a square causal piece, merged by their
log-sum-exp; anything else goes to ``scaled_dot_product_attention`` as written.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import math as _kl_math
import torch as _kl_torch
import torch.nn.functional as _kl_F

_kl_attention_served = set()  # the GPU kernels that computed a piece (for tests and profiles)


def _kl_lower_right_prefix(attn_mask, q, k):
    """``sk - sq`` when ``attn_mask`` is a bottom-right causal bias over more keys than queries."""
    try:
        from torch.nn.attention.bias import CausalBias, CausalVariant  # lazy: ~0.9 s; loaded already where the mask is a CausalBias
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
