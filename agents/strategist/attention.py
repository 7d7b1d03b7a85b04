"""Bottom-right causal attention as two fast pieces: a source rewrite of
``scaled_dot_product_attention`` calls whose mask is a lower-right ``CausalBias``.

With more keys than queries (``sk > sq``: a context-parallel rank attending to the keys of the ranks
before it, chunked prefill, a KV cache), a bottom-right causal mask lets query ``i`` see keys
``0 .. sk - sq + i``. PyTorch dispatches such a ``CausalBias`` to FlashAttention-2 kernels, while a
square causal or an unmasked attention on Hopper goes to cuDNN's kernels: on H200 the cuDNN kernel
did the same work about 1.7x faster (results/gpu/h200x4-paths). The same attention is exactly

- every query against the first ``P = sk - sq`` keys, unmasked, and
- every query against the last ``sq`` keys, causal (a square, so top-left and bottom-right agree),

merged by their log-sum-exps: ``out = lerp(out_a, out_b, sigmoid(lse_b - lse_a))`` in float32,
rounded once. Grouped-query heads: the unmasked piece folds each group of query heads into the
sequence (a view, no copy); the causal piece repeats the last ``sq`` keys per head.

The rewrite renames the calls that pass a mask, in a module that builds a lower-right causal bias
(``causal_lower_right`` or ``CausalVariant.LOWER_RIGHT`` appear in it). At run time the helper
takes this path only for a lower-right ``CausalBias`` with ``sk > sq``, 4-d inputs, no dropout and
query heads a multiple of the key heads; every piece goes to cuDNN where PyTorch's own check
allows it, else the flash kernel, else (on a CPU, say) a float32 softmax. Everything else calls the original function.
"""

from __future__ import annotations

import ast

from .rewrites import is_module_call, module_aliases, rename_calls

HELPER_NAME = "_kloom_sdpa"
#: Text that shows the module builds a bottom-right causal bias.
_MARKERS = ("causal_lower_right", "LOWER_RIGHT")

SPLIT_ATTENTION_HELPER = '''
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
'''


def _masked_calls(tree: ast.Module) -> list[tuple[ast.Call, str]]:
    """Calls of ``scaled_dot_product_attention`` that pass a mask (the fourth argument or
    ``attn_mask=``; unpacked arguments may hold one)."""
    modules, functions = module_aliases(tree, "torch.nn.functional")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if not is_module_call(node, "scaled_dot_product_attention", modules, functions):
            continue
        unpacked = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        if unpacked or len(node.args) >= 4 or any(k.arg == "attn_mask" for k in node.keywords):
            found.append((node, HELPER_NAME))
    return found


def split_causal_attention(source: str) -> tuple[str, int]:
    """The source with each masked attention call renamed to the helper, where the module builds a
    bottom-right causal bias; returns it and the number of calls renamed (0: unchanged)."""
    if not any(marker in source for marker in _MARKERS):
        return source, 0
    calls = _masked_calls(ast.parse(source))
    if not calls:
        return source, 0
    return rename_calls(source, calls), len(calls)
