"""The op codes of the elementwise program that ``program.py`` runs inside kernels (plain Python:
the strategist builds programs from the op graph with it, without importing Triton).

A program is a flat tuple of steps, four ints each: ``(op, dst, a, b)``. ``dst`` is a register
(0..3); ``a`` and ``b`` are references: a register (0..3), a loaded operand (``EW_OPERAND + k``, k in
0..3) or a scalar (``EW_SCALAR + j``: the program's ``j``-th scalar). Registers start as the value
flowing in (the kernel's input element, or a reduction's result); the result is register 0
after the last step. Unary ops read ``a``; binary ops read ``a`` and ``b``; an op with
parameters reads them from the scalars ``b``, ``b + 1``, ... (``b`` is then a scalar reference).
Everything is computed in float32 (float64 for float64 data); comparisons give 0.0 or 1.0.
"""

from dataclasses import dataclass

#: Registers, loaded operands, and where scalar references start.
EW_REGISTERS = 4
EW_OPERAND = 4
EW_MAX_OPERANDS = 4
EW_SCALAR = 8


@dataclass(frozen=True)
class EwOp:
    code: int
    inputs: int  # values read: 1 (unary) or 2 (binary)
    params: int = 0  # scalars read after the inputs (from the scalar reference ``b``)


#: Every op a program may use, by name.
EW_OPS = {
    # unary
    "neg": EwOp(1, 1),
    "abs": EwOp(2, 1),
    "relu": EwOp(3, 1),
    "sigmoid": EwOp(4, 1),
    "tanh": EwOp(5, 1),
    "exp": EwOp(6, 1),
    "log": EwOp(7, 1),
    "sqrt": EwOp(8, 1),
    "rsqrt": EwOp(9, 1),
    "reciprocal": EwOp(10, 1),
    "gelu": EwOp(11, 1),
    "gelu_tanh": EwOp(12, 1),
    "silu": EwOp(13, 1),
    "mish": EwOp(14, 1),
    "hardsigmoid": EwOp(15, 1),
    "hardswish": EwOp(16, 1),
    "log1p": EwOp(17, 1),
    "expm1": EwOp(18, 1),
    "erf": EwOp(19, 1),
    "sin": EwOp(20, 1),
    "cos": EwOp(21, 1),
    "floor": EwOp(22, 1),
    "ceil": EwOp(23, 1),
    "sign": EwOp(24, 1),
    "round_bf16": EwOp(25, 1),  # the value rounded to bfloat16 (a cast the reference makes)
    "round_fp16": EwOp(26, 1),
    "copy": EwOp(27, 1),
    "square": EwOp(28, 1),
    "logsigmoid": EwOp(29, 1),
    # unary with parameters
    "leaky_relu": EwOp(40, 1, 1),  # negative slope
    "softplus": EwOp(41, 1, 2),  # beta, threshold
    "elu": EwOp(42, 1, 3),  # alpha, scale, input scale (selu and celu are elu)
    "hardtanh": EwOp(43, 1, 2),  # min, max
    # binary
    "add": EwOp(60, 2),
    "sub": EwOp(61, 2),
    "mul": EwOp(62, 2),
    "div": EwOp(63, 2),
    "maximum": EwOp(64, 2),
    "minimum": EwOp(65, 2),
    "pow": EwOp(66, 2),
    "gt": EwOp(67, 2),
    "ge": EwOp(68, 2),
    "lt": EwOp(69, 2),
    "le": EwOp(70, 2),
    "eq": EwOp(71, 2),
    "ne": EwOp(72, 2),
    # masked_fill(x, m, v) as fill_nan(select_nz(m, v), x), exact for every x (infinities and
    # NaN included) and every v but NaN, which the lowering refuses
    "select_nz": EwOp(73, 2),  # b where a != 0, else NaN
    "fill_nan": EwOp(74, 2),  # b where a is NaN, else a
}
