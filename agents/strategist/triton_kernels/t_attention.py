"""Template: float32 scaled-dot-product attention as two products on the tensor cores, each as
three TF32 products carrying the operands' rounding error (``kernels/gemm/matmul.py``,
``precision="tf32x3"``), with the scale applied in the first product's epilogue and the softmax
between them.

In float32, PyTorch runs attention on the CUDA cores (its memory-efficient kernel; flash
attention takes only 16-bit inputs): a 32 x 32 heads x 512 x 1024 call took 25 ms on an H100,
~44 TFLOP/s. The template takes the attention operator whatever backend the trace recorded
(``_scaled_dot_product_efficient_attention`` on a GPU, ``..._flash_attention_for_cpu`` on the
CPU) when it has no mask, no dropout, is not causal, and only its output is read; the scores
``(..., L, S)`` are materialised, so only where they take at most ``MAX_SCORES_BYTES``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from kernels.elementwise.opcodes import EW_OPS, EW_SCALAR
from kloom.opgraph import decode_float

from .t_common import cost, float_tensor, unused
from .t_gemm import FP32X3_SPEEDUP, GEMM_MODULE
from .templates import GraphView, Match, RegionCost, register

#: The attention operators of the backends a float32 trace records (the output is output 0).
ATTENTION_OPS = ("aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention_for_cpu")
#: The most the materialised scores may take (bytes): beyond it the memory-efficient kernel stays.
MAX_SCORES_BYTES = 4 << 30
#: The elementwise program ``x * scalar 0``.
_SCALE = (EW_OPS["mul"].code, 0, 0, EW_SCALAR)


class AttentionFp32x3:
    name = "attention_fp32x3"
    kind = "attention_fp32x3"
    priority = 8
    offered_unmeasured = False  # the same work as PyTorch's kernel, done differently: measured first

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op not in ATTENTION_OPS:
                continue
            match = self._region(view, node)
            if match is not None:
                yield match
                view = view.with_claimed(match.nodes)

    def _region(self, view: GraphView, node) -> Match | None:
        q, k, v = (float_tensor(view, node.arg(n)) for n in ("query", "key", "value"))
        if q is None or k is None or v is None or any(view.tensor(t).dtype != "float32" for t in (q, k, v)):
            return None
        mask = node.arg("attn_bias") if node.op.endswith("efficient_attention") else node.arg("attn_mask")
        if mask is not None or decode_float(node.arg("dropout_p", 0.0)) != 0.0 or node.arg("is_causal") or not unused(view, node):
            return None
        qs, ks, vs = (view.tensor(t).shape for t in (q, k, v))
        if len(qs) < 3 or qs[:-2] != ks[:-2] or ks[:-1] != vs[:-1] or qs[-1] != ks[-1]:
            return None  # batch and head dimensions shared (no broadcast, no grouped heads)
        scale = node.arg("scale")
        scale = 1.0 / math.sqrt(qs[-1]) if scale is None else decode_float(scale)
        if not isinstance(scale, float):
            return None
        batch, length, keys, depth, width = math.prod(qs[:-2]), qs[-2], ks[-2], qs[-1], vs[-1]
        if 4 * batch * length * keys > MAX_SCORES_BYTES:
            return None
        out = node.outputs[0]
        flops = 2 * batch * length * keys * (depth + width)
        region = cost(view, (q, k, v), (out,), flops)
        post = ([], _SCALE, (scale,))
        return Match(
            template=self.name,
            kind=self.kind,
            nodes=frozenset({node.index}),
            outputs=(out,),
            modules=(GEMM_MODULE,),
            emit=lambda names: [
                f"{names.define(out)} = gemm(torch.softmax(gemm({names.read(q)}, {names.read(k)}.transpose(-2, -1), {post!r}, "
                f"precision=\"tf32x3\"), dim=-1), {names.read(v)}, precision=\"tf32x3\")"
            ],
            cost=RegionCost(bytes=region.bytes + 16 * batch * length * keys, flops=flops, tflops=RegionCost.tflops * FP32X3_SPEEDUP),
            rationale=(
                f"float32 attention over {batch} x {length} queries and {keys} keys (depth {depth}) as two products on the tensor cores, "
                f"each three TF32 products carrying the operands' rounding error (float32's accuracy, no TF32 rounding), where "
                f"PyTorch's float32 kernel runs on the CUDA cores; the {4 * batch * length * keys / 2**20:.0f} MiB of scores written, "
                f"softmaxed and read back"
            ),
            params={"kind": self.kind, "batch": batch, "length": length, "keys": keys, "depth": depth},
        )


register(AttentionFp32x3())
