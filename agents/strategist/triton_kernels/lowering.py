"""Aten elementwise operators as steps of the kernels' elementwise program
(``kernels/elementwise/opcodes.py``): which operators a fused chain can compute, and how.

``lower(node)`` gives a node's micro-ops over symbolic values; ``chains.py`` allocates registers.
An operator with an argument outside what the program computes exactly (a rounding mode, an
integer cast, a ``where``) is not lowered, so a chain stops before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kloom.opgraph import OpNode, decode_float

#: A reference to a value a micro-op reads: ("tensor", a tensor id or a temporary's symbol) or
#: ("scalar", a Python float).
Ref = tuple[str, Any]


@dataclass(frozen=True)
class MicroOp:
    op: str  # an op name of kernels.elementwise.opcodes.EW_OPS
    out: Any  # symbolic id of the value it makes (a tensor id, or a temporary)
    a: Ref
    b: Ref | None = None
    params: tuple[float, ...] = ()


FLOAT_DTYPES = ("float32", "bfloat16", "float16")
_UNARY = {
    "neg": "neg", "abs": "abs", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "silu": "silu", "mish": "mish",
    "hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "log1p": "log1p", "expm1": "expm1", "erf": "erf",
    "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil", "sign": "sign", "clone": "copy",
    "alias": "copy", "square": "square",
}  # fmt: skip
_BINARY = {"mul": "mul", "maximum": "maximum", "minimum": "minimum", "gt": "gt", "ge": "ge", "lt": "lt", "le": "le", "eq": "eq", "ne": "ne"}
ROUNDING = {"bfloat16": "round_bf16", "float16": "round_fp16"}


def base_name(node: OpNode) -> str:
    """``aten::relu_`` -> ``relu``: the operator without namespace and in-place mark."""
    name = node.op.split("::", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _ref(value: Any) -> Ref | None:
    if isinstance(value, dict) and "tensor" in value:
        return ("tensor", value["tensor"])
    value = decode_float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("scalar", float(value))
    if isinstance(value, bool):
        return ("scalar", 1.0 if value else 0.0)
    return None


def lower(node: OpNode, dtype_of) -> list[MicroOp] | None:
    """The micro-ops computing ``node``'s first output, or None when the program cannot.
    ``dtype_of(tensor id)`` gives a tensor's dtype name."""
    if len([o for o in node.outputs if o is not None]) < 1 or node.overload.startswith("out"):
        return None
    out = node.outputs[0]
    name = base_name(node)
    first = _ref(node.arg("self", node.arg("input")))
    if name in _UNARY and first is not None and len(node.outputs) == 1:
        return [MicroOp(_UNARY[name], out, first)]
    if name == "gelu" and first is not None:
        return [MicroOp("gelu_tanh" if node.arg("approximate") == "tanh" else "gelu", out, first)]
    if name == "leaky_relu":
        return [MicroOp("leaky_relu", out, first, params=(float(decode_float(node.arg("negative_slope"))),))]
    if name == "softplus":
        return [MicroOp("softplus", out, first, params=(float(decode_float(node.arg("beta"))), float(decode_float(node.arg("threshold")))))]
    if name == "elu":
        scalars = (node.arg("alpha"), node.arg("scale"), node.arg("input_scale"))
        return [MicroOp("elu", out, first, params=tuple(float(decode_float(s)) for s in scalars))]
    if name == "celu":  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): an ELU of input scale 1 / alpha
        alpha = float(decode_float(node.arg("alpha")))
        return [MicroOp("elu", out, first, params=(alpha, 1.0, 1.0 / alpha))] if alpha else None
    if name == "hardtanh":
        return [MicroOp("hardtanh", out, first, params=(float(decode_float(node.arg("min_val"))), float(decode_float(node.arg("max_val")))))]
    if name == "log_sigmoid_forward":
        return [MicroOp("logsigmoid", out, first)]
    if name in ("clamp", "clamp_min", "clamp_max"):
        return _clamp(node, name, out, first)
    if name in ("add", "sub", "rsub"):
        return _add_sub(node, name, out, first)
    if name == "div":
        if node.arg("rounding_mode") not in (None,):
            return None
        other = _ref(node.arg("other"))
        return [MicroOp("div", out, first, other)] if other else None
    if name in _BINARY:
        other = _ref(node.arg("other"))
        return [MicroOp(_BINARY[name], out, first, other)] if other and first else None
    if name == "pow":
        return _pow(node, out)
    if name == "_to_copy":
        return _cast(node, out, first, dtype_of)
    if name == "masked_fill":
        return _masked_fill(node, out, first, dtype_of)
    return None


def _masked_fill(node: OpNode, out, first: Ref | None, dtype_of) -> list[MicroOp] | None:
    """``x.masked_fill(mask, v)`` for a scalar ``v`` (the attention mask's ``-inf`` before a
    softmax): ``v`` where the mask is set, ``x`` elsewhere, through a NaN that only ``v`` could
    be (refused then). A ``v`` held in a tensor is not known at planning time."""
    mask = _ref(node.arg("mask"))
    value = _ref(node.arg("value"))
    if first is None or mask is None or mask[0] != "tensor" or value is None or value[0] != "scalar" or value[1] != value[1]:
        return None
    if dtype_of(mask[1]) != "bool":
        return None
    picked = ("tmp", out)
    return [MicroOp("select_nz", picked, mask, value), MicroOp("fill_nan", out, ("tensor", picked), first)]


def _clamp(node: OpNode, name: str, out, first: Ref | None) -> list[MicroOp] | None:
    low = _ref(node.arg("min")) if name != "clamp_max" else None
    high = _ref(node.arg("max")) if name != "clamp_min" else None
    if first is None or (low is None and high is None):
        return None
    if low is not None and high is not None:
        if low[0] == high[0] == "scalar":
            return [MicroOp("hardtanh", out, first, params=(low[1], high[1]))]
        return [MicroOp("maximum", ("tmp", out), first, low), MicroOp("minimum", out, ("tensor", ("tmp", out)), high)]
    if low is not None:
        return [MicroOp("maximum", out, first, low)]
    return [MicroOp("minimum", out, first, high)]


def _add_sub(node: OpNode, name: str, out, first: Ref | None) -> list[MicroOp] | None:
    other = _ref(node.arg("other"))
    alpha = decode_float(node.arg("alpha", 1))
    if first is None or other is None or not isinstance(alpha, (int, float)):
        return None
    ops: list[MicroOp] = []
    if alpha != 1:
        if other[0] == "scalar":
            other = ("scalar", other[1] * alpha)
        else:
            ops.append(MicroOp("mul", ("tmp", out), other, ("scalar", float(alpha))))
            other = ("tensor", ("tmp", out))
    if name == "rsub":
        return ops + [MicroOp("sub", out, other, first)]
    return ops + [MicroOp("add" if name == "add" else "sub", out, first, other)]


def _pow(node: OpNode, out) -> list[MicroOp] | None:
    base = _ref(node.arg("self"))
    exponent = _ref(node.arg("exponent"))
    if base is None or exponent is None:
        return None
    if exponent[0] == "scalar" and base[0] != "scalar":
        special = {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal", -0.5: "rsqrt", 1.0: "copy"}
        if exponent[1] in special:
            return [MicroOp(special[exponent[1]], out, base)]
        if exponent[1] == 3.0:
            return [MicroOp("square", ("tmp", out), base), MicroOp("mul", out, ("tensor", ("tmp", out)), base)]
    return [MicroOp("pow", out, base, exponent)]


def _cast(node: OpNode, out, first: Ref | None, dtype_of) -> list[MicroOp] | None:
    """A cast between float dtypes (or from bool): a rounding where the reference loses precision."""
    if first is None or first[0] != "tensor" or node.arg("device") is not None:
        return None
    source = dtype_of(first[1])
    dtype = node.arg("dtype")
    target = dtype["dtype"] if isinstance(dtype, dict) else source
    if target not in FLOAT_DTYPES or source not in FLOAT_DTYPES + ("bool",):
        return None
    if target in ROUNDING and source not in (target, "bool"):
        return [MicroOp(ROUNDING[target], out, first)]
    return [MicroOp("copy", out, first)]
