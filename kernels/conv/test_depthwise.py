"""Tests of the depthwise convolution (``depthwise.py``) against torch's, on the CPU under the
Triton interpreter (on a GPU when there is one), and of its compilation for an H100.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/conv/test_depthwise.py``.
"""

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.conv.depthwise import DEPTHWISE_MAX_TAPS, conv_depthwise, depthwise_supported  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402
from kernels.testing import compiled_for_h100, rand  # noqa: E402
import triton  # noqa: E402

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
#: A tile of 4 output rows by 8 columns (``window_positions``'s second form), beside the flat blocks.
ROWS = triton.Config({"BLOCK": 32, "BLOCK_W": 8}, num_warps=4)



@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, dilation",
    [
        ((2, 4, 9, 11), (4, 1, 3, 3), 1, 0, 1),  # no padding: the positions' mask alone
        ((2, 3, 10, 9), (3, 1, 3, 1), 1, 0, 1),  # an asymmetric filter
        ((1, 5, 12, 13), (5, 1, 5, 3), 2, (2, 1), 1),  # stride 2, padding on both axes
        ((2, 3, 11, 11), (6, 1, 3, 3), 1, 2, 2),  # a channel multiplier of 2, dilation 2
        ((3, 6, 40), (6, 1, 4), 1, 3, 1),  # 1-D, a causal-style left padding of k - 1 on both sides
        ((1, 2, 5, 6, 7), (2, 1, 2, 3, 2), 1, 1, 1),  # 3-D
    ],
)
@pytest.mark.parametrize("tile", [None, ROWS], ids=["flat", "rows"])
def test_depthwise_convolutions_of_every_rank_match_torch(x_shape, w_shape, stride, padding, dilation, tile):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    with signed_divisions() as seen:
        got = conv_depthwise(x, w, b, stride, padding, dilation, config=tile)
    assert seen.count > 0 and seen.negative() == {}  # no lane depends on how signed division rounds
    want = CONV[len(x_shape) - 2](x, w, b, stride, padding, dilation, x_shape[1])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got.is_contiguous()


def test_strided_views_and_an_epilogue_with_an_operand():
    x = rand(2, 6, 12, 20)[:, ::2, 1:11, ::2]  # three channels of six, a window, every other column
    w, extra = rand(3, 1, 3, 3), rand(3, 1, 1)
    post = ([extra], *gemm_chain("relu", ("add", ("operand", 0)), ("mul", 0.5)))
    want = (torch.relu(F.conv2d(x, w, None, 1, 1, 1, 3)) + extra) * 0.5
    torch.testing.assert_close(conv_depthwise(x, w, None, 1, 1, post=post), want, atol=1e-5, rtol=1e-5)
    cl = x.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(conv_depthwise(cl, w, None, 1, 1, post=post), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(conv_depthwise(cl, w, None, 1, 1, post=post, config=ROWS), want, atol=1e-5, rtol=1e-5)


def test_bfloat16_accumulates_in_float32_and_rounds_once():
    x, w = rand(2, 8, 9, 9, dtype=torch.bfloat16), rand(8, 1, 3, 3, dtype=torch.bfloat16)
    truth = F.conv2d(x.double(), w.double(), None, 1, 1, 1, 8)
    got = conv_depthwise(x, w, None, 1, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), truth, atol=0, rtol=2.0**-8)


def test_what_is_not_depthwise_gets_a_clear_error():
    x = rand(1, 4, 8, 8)
    assert "one input channel a group" in depthwise_supported(x, rand(4, 2, 3, 3), 2)
    assert depthwise_supported(x, rand(4, 1, 3, 3), 4, transposed=True) == "a transposed convolution"
    with pytest.raises(ValueError, match="depthwise kernel does not cover.*one input channel a group"):
        conv_depthwise(x, rand(8, 4, 3, 3), None, 1, 0, 1, 1)
    with pytest.raises(ValueError, match=f"at most {DEPTHWISE_MAX_TAPS} taps"):
        conv_depthwise(rand(1, 2, 40, 40), rand(2, 1, 17, 17))
    with pytest.raises(ValueError, match="does not cover.*string padding"):
        conv_depthwise(x, rand(4, 1, 3, 3), None, 1, "same")


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.conv.depthwise import conv_depthwise_kernel
from kernels.gemm.epilogue import gemm_chain

out = []
none = (0,) + (1, 0, 1) * 3
for padded, block_w in json.loads(sys.argv[1]):
    program, scalars = gemm_chain(("add", ("operand", 0)), "relu")
    spec = dict(HAS_BIAS=True, PADDED=padded, MULT=1, KD=1, KH=3, KW=7, DD=1, DH=1, DW=1, BLOCK=1024, BLOCK_W=block_w,
                E0=(1, 64, 1, 1) + (1, 0, 1) * 2, E1=none, E2=none, E3=none, N_OPS=1, ONUMEL=64 * 64 * 8, POST=program, POST_SCALARS=scalars)
    sig = {n: "constexpr" if n in spec else ("*fp32" if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else "i32") for n in conv_depthwise_kernel.arg_names}
    ptx = triton.compile(ASTSource(conv_depthwise_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    out.append({"fma": "fma.rn.f32" in ptx, "tf32": "tf32" in ptx, "loads": ptx.count("ld.global")})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_in_full_float32():
    for compiled in compiled_for_h100(_COMPILE, [[False, 0], [True, 0], [True, 128]]):
        assert compiled["fma"] and not compiled["tf32"] and compiled["loads"] >= 21  # every tap's load compiled in
