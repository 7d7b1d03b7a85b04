"""The fused elementwise chain: every op of the program against torch, broadcast operands read
through their layouts (per channel, per row, scalar, transposed, bool), the result's dtype, and
the arguments it refuses."""

import pytest
import torch
import torch.nn.functional as F

from kernels.elementwise.kernel import KernelUnsupported, ew_chain, layout_of
from kernels.elementwise.opcodes import EW_OPS

C = {name: op.code for name, op in EW_OPS.items()}
X = torch.linspace(-4.0, 4.0, 97).reshape(97) + 0.013  # no exact zeros or integers

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp,
    "log": lambda x: torch.log(x.abs()), "sqrt": lambda x: torch.sqrt(x.abs()), "rsqrt": lambda x: torch.rsqrt(x.abs()),
    "reciprocal": torch.reciprocal, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "mish": F.mish, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "log1p": lambda x: torch.log1p(x.abs()),
    "expm1": torch.expm1, "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "floor": torch.floor, "ceil": torch.ceil,
    "sign": torch.sign, "round_bf16": lambda x: x.bfloat16().float(), "round_fp16": lambda x: x.half().float(),
    "copy": lambda x: x, "square": torch.square, "logsigmoid": F.logsigmoid,
}  # fmt: skip
#: Ops whose reference reads |x| (their domain); the program gets the same |x| first.
ABS_FIRST = {"log", "sqrt", "rsqrt", "log1p"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_every_unary_op_matches_torch(name):
    program = ((C["abs"], 0, 0, 0) if name in ABS_FIRST else ()) + (C[name], 0, 0, 0)
    got = ew_chain([X], program, (), X.shape, torch.float32)
    torch.testing.assert_close(got, UNARY[name](X), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize(
    "name, params, reference",
    [
        ("leaky_relu", (0.1,), lambda x: F.leaky_relu(x, 0.1)),
        ("softplus", (2.0, 3.0), lambda x: F.softplus(x, 2.0, 3.0)),
        ("elu", (1.6732632423543772, 1.0507009873554805, 1.0), F.selu),
        ("elu", (0.7, 1.0, 1 / 0.7), lambda x: F.celu(x, 0.7)),
        ("hardtanh", (-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0)),
    ],
)
def test_ops_with_parameters_match_torch(name, params, reference):
    got = ew_chain([X], (C[name], 0, 0, 8), params, X.shape, torch.float32)
    torch.testing.assert_close(got, reference(X), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize(
    "name, reference",
    [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div), ("maximum", torch.maximum),
     ("minimum", torch.minimum), ("gt", torch.gt), ("ge", torch.ge), ("lt", torch.lt), ("le", torch.le), ("eq", torch.eq), ("ne", torch.ne)],
)  # fmt: skip
def test_binary_ops_match_torch(name, reference):
    y = torch.flip(X, [0]).round()
    got = ew_chain([X, y], (C[name], 0, 0, 5), (), X.shape, torch.float32)
    torch.testing.assert_close(got, reference(X, y).float(), rtol=2e-6, atol=2e-6)


def test_pow_with_negative_bases_and_integral_exponents():
    base = torch.tensor([-2.0, -2.0, -0.5, 0.0, 0.0, 3.0, -3.0])
    exponent = torch.tensor([2.0, 3.0, -1.0, 0.0, 2.0, 0.5, 0.5])
    got = ew_chain([base, exponent], (C["pow"], 0, 0, 5), (), base.shape, torch.float32)
    torch.testing.assert_close(got, torch.pow(base, exponent), rtol=1e-6, atol=1e-6, equal_nan=True)


def test_broadcast_operands_are_read_through_their_layout():
    x = torch.randn(3, 4, 5, 6)
    per_channel = torch.randn(4, 1, 1)
    per_row = torch.randn(3, 1, 1, 6)
    scalar = torch.tensor(0.25)
    mask = torch.rand(3, 4, 5, 6) > 0.5
    program = (C["add"], 0, 0, 5, C["mul"], 0, 0, 6, C["sub"], 0, 0, 7, C["mul"], 0, 0, 4)
    got = ew_chain([mask, per_channel, per_row, scalar], program, (), x.shape, torch.float32)
    torch.testing.assert_close(got, (((mask + per_channel) * per_row) - scalar) * mask)
    program = (C["add"], 0, 4, 5, C["gelu"], 0, 0, 0)
    got = ew_chain([x, per_channel], program, (), x.shape, torch.float32)
    torch.testing.assert_close(got, F.gelu(x + per_channel))


def test_non_contiguous_inputs_and_output_dtypes():
    x = torch.randn(5, 7, 9).transpose(0, 2)  # strides the kernel must follow
    got = ew_chain([x], (C["tanh"], 0, 0, 0), (), x.shape, torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.is_contiguous()
    torch.testing.assert_close(got, torch.tanh(x).bfloat16(), rtol=1e-2, atol=1e-2)
    h = torch.randn(33, 65, dtype=torch.float16)[:, ::2]
    torch.testing.assert_close(ew_chain([h], (C["silu"], 0, 0, 0), (), h.shape, torch.float16), F.silu(h.float()).half(), rtol=1e-3, atol=1e-3)


def test_registers_hold_values_that_are_read_later():
    x = torch.randn(50)
    # x * sigmoid(x) + gelu(x) * tanh(x): four live values
    program = (C["sigmoid"], 1, 0, 0, C["mul"], 1, 0, 1, C["gelu"], 2, 0, 0, C["tanh"], 3, 0, 0, C["mul"], 2, 2, 3, C["add"], 0, 1, 2)
    got = ew_chain([x], program, (), x.shape, torch.float32)
    torch.testing.assert_close(got, x * torch.sigmoid(x) + F.gelu(x) * torch.tanh(x))


def test_layouts_fold_broadcast_dimensions():
    shape = (8, 16, 32, 32)
    assert layout_of(torch.empty(shape), shape) == (1, 8 * 16 * 32 * 32, 1, 1) + (1, 0, 1) * 2
    assert layout_of(torch.empty(16, 1, 1), shape) == (1, 16, 1, 32 * 32) + (1, 0, 1) * 2
    assert layout_of(torch.empty(()), shape) == (0,) + (1, 0, 1) * 3
    assert layout_of(torch.empty(shape).permute(0, 2, 3, 1), (8, 32, 32, 16))[0] == 3


@pytest.mark.parametrize(
    "inputs, shape, dtype, why",
    [
        ([], (4,), torch.float32, "1 to 4"),
        ([torch.randn(4)] * 5, (4,), torch.float32, "1 to 4"),
        ([torch.randn(4)], (4,), torch.int32, "cannot write"),
        ([torch.randn(3)], (4,), torch.float32, "does not broadcast"),
        ([torch.randn(4, dtype=torch.complex64)], (4,), torch.float32, "real dtype"),
    ],
)
def test_unsupported_arguments_raise(inputs, shape, dtype, why):
    with pytest.raises(KernelUnsupported, match=why):
        ew_chain(inputs, (C["relu"], 0, 0, 0), (), shape, dtype)


def test_log1p_and_expm1_keep_their_relative_accuracy_near_zero():
    """log(1 + x) and exp(x) - 1 as written lose every digit of a tiny x (1 + 1e-7 is 1.00000012 in
    float32: 19% off); the kernels' log1p and expm1 keep float32's relative accuracy there, and
    their edges (-1, inf, large negatives) as torch has them."""
    tiny = torch.tensor([1e-7, -1e-7, 3e-6, -2e-5, 1e-4, -4e-4, 0.0, 1e-30], dtype=torch.float32)
    edges = torch.tensor([-1.0, float("inf"), -100.0, 80.0, 0.5, -0.5, 3.0], dtype=torch.float32)
    for name, ref in (("log1p", torch.log1p), ("expm1", torch.expm1)):
        x = torch.cat([tiny, edges[1:] if name == "log1p" else edges])
        got = ew_chain([x], (EW_OPS[name].code, 0, 0, 0), (), tuple(x.shape), torch.float32)
        torch.testing.assert_close(got, ref(x), rtol=2e-6, atol=0.0, equal_nan=True)
    got = ew_chain([torch.tensor([-1.0])], (EW_OPS["log1p"].code, 0, 0, 0), (), (1,), torch.float32)
    assert got.item() == float("-inf")


def test_a_bfloat16_result_is_rounded_to_the_nearest_not_truncated():
    """Every kernel stores through ``ew_stored``: Triton's CPU interpreter truncates a float32 cast
    to bfloat16 where the GPU rounds to the nearest (ties to even), and a value the reference
    rounded, then widened (autocast's bfloat16 output made float32), was a bfloat16 ulp off at
    float32's tolerance. Ties both ways, just below a tie, a negative one, and a carry into the
    exponent, a NaN whose mantissa is all ones (the GPU's; the carry must not reach the sign),
    beside random values."""
    ties = torch.tensor([0x3F808000, 0x3F818000, 0x3F807FFF, 0xBF818000, 0x3FFF8000, 0x7FFFFFFF], dtype=torch.int64).to(torch.int32)
    x = torch.cat([ties.view(torch.float32), torch.randn(4096)])
    got = ew_chain([x], (C["copy"], 0, 0, 0), (), x.shape, torch.bfloat16)
    torch.testing.assert_close(got, x.bfloat16(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("value", [float("-inf"), -1e9, 0.0, 3.5, float("inf")])
def test_masked_fill_as_two_selects_is_exact_for_every_value_it_keeps(value):
    """``select_nz(m, v)`` then ``fill_nan(., x)``: ``v`` where the mask is set and ``x``
    elsewhere, bit for bit, whatever ``x`` holds (infinities and NaN kept, not arithmetic)."""
    x = torch.cat([X[:40], torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0] * 2)])
    mask = torch.rand(x.shape, generator=torch.Generator().manual_seed(3)) > 0.5
    program = (C["select_nz"], 1, 5, 8, C["fill_nan"], 0, 1, 4)
    got = ew_chain([x, mask], program, (value,), x.shape, torch.float32)
    torch.testing.assert_close(got, x.masked_fill(mask, value), rtol=0, atol=0, equal_nan=True)
