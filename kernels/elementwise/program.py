"""The elementwise program interpreter that kernels inline: ``ew_run`` applies a program
(``opcodes.py``) to a tile, ``ew_load`` loads a broadcast operand for a tile of flat output
indexes. Both are ``@triton.jit`` functions: the program is a ``tl.constexpr`` tuple, so each
step's op is chosen at compile time and the kernel holds only the arithmetic of its ops.

Operand layouts are constexpr tuples of 10 ints, ``(groups, size0, stride0, div0, size1,
stride1, div1, size2, stride2, div2)``: an operand element's offset for the flat output index
``i`` is the sum over its groups of ``((i // div) % size) * stride`` (``layout_of`` in
``kernel.py`` folds an operand's broadcast dimensions into at most three such groups).

Transcendentals are written with ``tl.exp``/``tl.log``/``tl.erf`` only (no libdevice), so that the
same code runs in Triton's CPU interpreter, where the tests run it, and on the GPU.
"""

import triton
import triton.language as tl

from kernels.elementwise.opcodes import EW_OPS

_EW_NEG = tl.constexpr(EW_OPS["neg"].code)
_EW_ABS = tl.constexpr(EW_OPS["abs"].code)
_EW_RELU = tl.constexpr(EW_OPS["relu"].code)
_EW_SIGMOID = tl.constexpr(EW_OPS["sigmoid"].code)
_EW_TANH = tl.constexpr(EW_OPS["tanh"].code)
_EW_EXP = tl.constexpr(EW_OPS["exp"].code)
_EW_LOG = tl.constexpr(EW_OPS["log"].code)
_EW_SQRT = tl.constexpr(EW_OPS["sqrt"].code)
_EW_RSQRT = tl.constexpr(EW_OPS["rsqrt"].code)
_EW_RECIPROCAL = tl.constexpr(EW_OPS["reciprocal"].code)
_EW_GELU = tl.constexpr(EW_OPS["gelu"].code)
_EW_GELU_TANH = tl.constexpr(EW_OPS["gelu_tanh"].code)
_EW_SILU = tl.constexpr(EW_OPS["silu"].code)
_EW_MISH = tl.constexpr(EW_OPS["mish"].code)
_EW_HARDSIGMOID = tl.constexpr(EW_OPS["hardsigmoid"].code)
_EW_HARDSWISH = tl.constexpr(EW_OPS["hardswish"].code)
_EW_LOG1P = tl.constexpr(EW_OPS["log1p"].code)
_EW_EXPM1 = tl.constexpr(EW_OPS["expm1"].code)
_EW_ERF = tl.constexpr(EW_OPS["erf"].code)
_EW_SIN = tl.constexpr(EW_OPS["sin"].code)
_EW_COS = tl.constexpr(EW_OPS["cos"].code)
_EW_FLOOR = tl.constexpr(EW_OPS["floor"].code)
_EW_CEIL = tl.constexpr(EW_OPS["ceil"].code)
_EW_SIGN = tl.constexpr(EW_OPS["sign"].code)
_EW_ROUND_BF16 = tl.constexpr(EW_OPS["round_bf16"].code)
_EW_ROUND_FP16 = tl.constexpr(EW_OPS["round_fp16"].code)
_EW_COPY = tl.constexpr(EW_OPS["copy"].code)
_EW_SQUARE = tl.constexpr(EW_OPS["square"].code)
_EW_LOGSIGMOID = tl.constexpr(EW_OPS["logsigmoid"].code)
_EW_LEAKY_RELU = tl.constexpr(EW_OPS["leaky_relu"].code)
_EW_SOFTPLUS = tl.constexpr(EW_OPS["softplus"].code)
_EW_ELU = tl.constexpr(EW_OPS["elu"].code)
_EW_HARDTANH = tl.constexpr(EW_OPS["hardtanh"].code)
_EW_ADD = tl.constexpr(EW_OPS["add"].code)
_EW_SUB = tl.constexpr(EW_OPS["sub"].code)
_EW_MUL = tl.constexpr(EW_OPS["mul"].code)
_EW_DIV = tl.constexpr(EW_OPS["div"].code)
_EW_MAXIMUM = tl.constexpr(EW_OPS["maximum"].code)
_EW_MINIMUM = tl.constexpr(EW_OPS["minimum"].code)
_EW_POW = tl.constexpr(EW_OPS["pow"].code)
_EW_GT = tl.constexpr(EW_OPS["gt"].code)
_EW_GE = tl.constexpr(EW_OPS["ge"].code)
_EW_LT = tl.constexpr(EW_OPS["lt"].code)
_EW_LE = tl.constexpr(EW_OPS["le"].code)
_EW_EQ = tl.constexpr(EW_OPS["eq"].code)
_EW_NE = tl.constexpr(EW_OPS["ne"].code)
_EW_SELECT_NZ = tl.constexpr(EW_OPS["select_nz"].code)
_EW_FILL_NAN = tl.constexpr(EW_OPS["fill_nan"].code)


@triton.jit
def ew_offsets(idx, L: tl.constexpr, NUMEL: tl.constexpr):
    """Offsets of a broadcast operand's elements for flat output indexes ``idx``."""
    off = idx * 0
    for g in tl.static_range(3):
        if g < L[0]:
            q = idx
            if L[3 + 3 * g] != 1:
                q = q // L[3 + 3 * g]
            if L[1 + 3 * g] * L[3 + 3 * g] != NUMEL:
                q = q % L[1 + 3 * g]
            off += q * L[2 + 3 * g]
    return off


@triton.jit
def ew_load(ptr, idx, mask, L: tl.constexpr, NUMEL: tl.constexpr, DT: tl.constexpr):
    """A broadcast operand's values at flat output indexes ``idx``, as ``DT``."""
    return tl.load(ptr + ew_offsets(idx, L, NUMEL), mask=mask, other=0).to(DT)


@triton.jit
def ew_tanh(a):
    """tanh from one exponential (exact to a few float32 ulps of 1: the result's scale)."""
    t = tl.exp(-2.0 * tl.abs(a))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(a < 0, -r, r)


@triton.jit
def ew_softplus(a):
    """log(1 + exp(a)) without overflow: max(a, 0) + log(1 + exp(-|a|))."""
    return tl.maximum(a, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(a)))


@triton.jit
def ew_log1p(a):
    """log(1 + a) to float32's relative accuracy near 0, where 1 + a drops a's low bits: the
    rounding of ``u = 1 + a`` is undone by the factor a / (u - 1) (exact where u is 1)."""
    u = 1.0 + a
    v = tl.where(u == 1.0, a, tl.log(u) * (a / (u - 1.0)))
    return tl.where(u == float("inf"), u, v)


@triton.jit
def ew_expm1(a):
    """exp(a) - 1 to float32's relative accuracy near 0, where the subtraction cancels: the
    rounding of ``u = exp(a)`` is undone by the factor a / log(u) (exact where u is 1)."""
    u = tl.exp(a)
    um1 = u - 1.0
    v = tl.where(u == 1.0, a, um1 * (a / tl.log(u)))
    v = tl.where(um1 == -1.0, -1.0, v)
    return tl.where(u == float("inf"), u, v)


@triton.jit
def ew_pow(a, b):
    """``a ** b`` as torch computes it for real a and b (negative bases with integral exponents)."""
    mag = tl.exp(b * tl.log(tl.abs(a)))
    integral = b == tl.floor(b)
    odd = integral & (tl.abs(b - 2.0 * tl.floor(b * 0.5)) == 1.0)
    neg = tl.where(integral, tl.where(odd, -mag, mag), float("nan"))
    zero = tl.where(b == 0, 1.0, tl.where(b > 0, 0.0, float("inf")))
    return tl.where(a > 0, mag, tl.where(a < 0, neg, tl.where(a == 0, zero, a)))


@triton.jit
def ew_round_bf16(a):
    """float32 ``a`` rounded to the nearest bfloat16 (ties to even), as float32: done on the bits,
    because Triton's CPU interpreter truncates when it casts to bfloat16. A NaN stays itself (the
    GPU's canonical 0x7FFFFFFF would carry into the sign and become -0)."""
    bits = a.to(tl.uint32, bitcast=True)
    bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
    return tl.where(a != a, a, bits.to(tl.float32, bitcast=True))


@triton.jit
def ew_stored(y, DT: tl.constexpr):
    """``y`` as the dtype ``DT`` a kernel stores, a bfloat16 one rounded to the nearest (ties to
    even) first: Triton's CPU interpreter truncates a float32 cast to bfloat16 where the GPU rounds,
    and the reference's rounded value, widened by a later operator (``.float()``, autocast's
    float32 result), was then a bfloat16 ulp off at float32's tolerance."""
    if DT == tl.bfloat16:
        y = ew_round_bf16(y.to(tl.float32))
    return y.to(DT)


@triton.jit
def _ew_ref(REF: tl.constexpr, r0, r1, r2, r3, a0, a1, a2, a3, SCALARS: tl.constexpr):
    if REF == 0:
        v = r0
    elif REF == 1:
        v = r1
    elif REF == 2:
        v = r2
    elif REF == 3:
        v = r3
    elif REF == 4:
        v = a0
    elif REF == 5:
        v = a1
    elif REF == 6:
        v = a2
    elif REF == 7:
        v = a3
    else:
        v = tl.zeros_like(r0) + SCALARS[REF - 8]
    return v


@triton.jit
def _ew_unary(OP: tl.constexpr, a):
    if OP == _EW_NEG:
        v = -a
    elif OP == _EW_ABS:
        v = tl.abs(a)
    elif OP == _EW_RELU:
        v = tl.where(a > 0, a, tl.where(a == a, 0.0, a))
    elif OP == _EW_SIGMOID:
        v = 1.0 / (1.0 + tl.exp(-a))
    elif OP == _EW_TANH:
        v = ew_tanh(a)
    elif OP == _EW_EXP:
        v = tl.exp(a)
    elif OP == _EW_LOG:
        v = tl.log(a)
    elif OP == _EW_SQRT:
        v = tl.sqrt(a)
    elif OP == _EW_RSQRT:
        v = 1.0 / tl.sqrt(a)
    elif OP == _EW_RECIPROCAL:
        v = 1.0 / a
    elif OP == _EW_GELU:
        v = 0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476))
    elif OP == _EW_GELU_TANH:
        v = 0.5 * a * (1.0 + ew_tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
    elif OP == _EW_SILU:
        v = a / (1.0 + tl.exp(-a))
    elif OP == _EW_MISH:
        v = a * ew_tanh(ew_softplus(a))
    elif OP == _EW_HARDSIGMOID:
        v = tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0
    elif OP == _EW_HARDSWISH:
        v = a * tl.minimum(tl.maximum(a + 3.0, 0.0), 6.0) / 6.0
    elif OP == _EW_LOG1P:
        v = ew_log1p(a)
    elif OP == _EW_EXPM1:
        v = ew_expm1(a)
    elif OP == _EW_ERF:
        v = tl.erf(a)
    elif OP == _EW_SIN:
        v = tl.sin(a)
    elif OP == _EW_COS:
        v = tl.cos(a)
    elif OP == _EW_FLOOR:
        v = tl.floor(a)
    elif OP == _EW_CEIL:
        v = tl.ceil(a)
    elif OP == _EW_SIGN:
        v = tl.where(a > 0, 1.0, tl.where(a < 0, -1.0, 0.0 * a))
    elif OP == _EW_ROUND_BF16:
        v = ew_round_bf16(a)
    elif OP == _EW_ROUND_FP16:
        v = a.to(tl.float16).to(a.dtype)
    elif OP == _EW_COPY:
        v = a
    elif OP == _EW_SQUARE:
        v = a * a
    else:
        tl.static_assert(OP == _EW_LOGSIGMOID, "unknown elementwise op code")
        v = -ew_softplus(-a)
    return v


@triton.jit
def _ew_param(OP: tl.constexpr, a, P: tl.constexpr, SCALARS: tl.constexpr):
    if OP == _EW_LEAKY_RELU:
        v = tl.where(a > 0, a, a * SCALARS[P])
    elif OP == _EW_SOFTPLUS:
        z = a * SCALARS[P]
        v = tl.where(z > SCALARS[P + 1], a, ew_softplus(z) / SCALARS[P])
    elif OP == _EW_ELU:
        v = SCALARS[P + 1] * tl.where(a > 0, a, SCALARS[P] * (tl.exp(a * SCALARS[P + 2]) - 1.0))
    else:
        tl.static_assert(OP == _EW_HARDTANH, "unknown elementwise op code")
        v = tl.minimum(tl.maximum(a, SCALARS[P]), SCALARS[P + 1])
    return v


@triton.jit
def _ew_binary(OP: tl.constexpr, a, b):
    if OP == _EW_ADD:
        v = a + b
    elif OP == _EW_SUB:
        v = a - b
    elif OP == _EW_MUL:
        v = a * b
    elif OP == _EW_DIV:
        v = a / b
    elif OP == _EW_MAXIMUM:
        v = tl.where((a > b) | (a != a), a, b)
    elif OP == _EW_MINIMUM:
        v = tl.where((a < b) | (a != a), a, b)
    elif OP == _EW_POW:
        v = ew_pow(a, b)
    elif OP == _EW_GT:
        v = (a > b).to(a.dtype)
    elif OP == _EW_GE:
        v = (a >= b).to(a.dtype)
    elif OP == _EW_LT:
        v = (a < b).to(a.dtype)
    elif OP == _EW_LE:
        v = (a <= b).to(a.dtype)
    elif OP == _EW_EQ:
        v = (a == b).to(a.dtype)
    elif OP == _EW_NE:
        v = (a != b).to(a.dtype)
    elif OP == _EW_SELECT_NZ:
        v = tl.where(a != 0, b, float("nan"))
    else:
        tl.static_assert(OP == _EW_FILL_NAN, "unknown elementwise op code")
        v = tl.where(a != a, b, a)
    return v


@triton.jit
def ew_run(x, a0, a1, a2, a3, PROG: tl.constexpr, SCALARS: tl.constexpr):
    """``PROG`` applied to the tile ``x`` with the loaded operand tiles ``a0..a3`` (all of one
    float dtype and shape); returns register 0."""
    r0 = x
    r1 = x
    r2 = x
    r3 = x
    for i in tl.static_range(len(PROG) // 4):
        a = _ew_ref(PROG[4 * i + 2], r0, r1, r2, r3, a0, a1, a2, a3, SCALARS)
        if PROG[4 * i] >= _EW_ADD:
            v = _ew_binary(PROG[4 * i], a, _ew_ref(PROG[4 * i + 3], r0, r1, r2, r3, a0, a1, a2, a3, SCALARS))
        elif PROG[4 * i] >= _EW_LEAKY_RELU:
            v = _ew_param(PROG[4 * i], a, PROG[4 * i + 3] - 8, SCALARS)
        else:
            v = _ew_unary(PROG[4 * i], a)
        if PROG[4 * i + 1] == 0:
            r0 = v
        elif PROG[4 * i + 1] == 1:
            r1 = v
        elif PROG[4 * i + 1] == 2:
            r2 = v
        else:
            r3 = v
    return r0


@triton.jit
def ew_epilogue(y, idx, mask, p0, p1, p2, p3, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr,
                N_OPS: tl.constexpr, NUMEL: tl.constexpr, PROG: tl.constexpr, SCALARS: tl.constexpr):  # fmt: skip
    """``PROG`` applied to a kernel's result tile ``y`` (float32) at flat output indexes ``idx``,
    loading its ``N_OPS`` operands; ``y`` itself when the program is empty."""
    a0 = y
    a1 = y
    a2 = y
    a3 = y
    if N_OPS > 0:
        a0 = ew_load(p0, idx, mask, L0, NUMEL, tl.float32)
    if N_OPS > 1:
        a1 = ew_load(p1, idx, mask, L1, NUMEL, tl.float32)
    if N_OPS > 2:
        a2 = ew_load(p2, idx, mask, L2, NUMEL, tl.float32)
    if N_OPS > 3:
        a3 = ew_load(p3, idx, mask, L3, NUMEL, tl.float32)
    return ew_run(y, a0, a1, a2, a3, PROG, SCALARS)
