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

from ..embed import runtime_source
from ..rewrites import is_module_call, module_aliases, rename_calls

HELPER_NAME = "_kloom_sdpa"
#: Text that shows the module builds a bottom-right causal bias.
_MARKERS = ("causal_lower_right", "LOWER_RIGHT")

#: The runtime a candidate carries, copied from ``runtime.py``.
SPLIT_ATTENTION_HELPER = runtime_source(f"{__name__}.runtime")


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
