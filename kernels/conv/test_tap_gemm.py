"""Tests of the tap-outer implicit-GEMM convolution (``tap_gemm.py``) against torch's, on the CPU
under the Triton interpreter (on a GPU when there is one), and of its compilation for an H100.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/conv/test_tap_gemm.py``.
"""

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.conv.tap_gemm import conv_taps  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402
from kernels.testing import close32, compiled_for_h100, rand  # noqa: E402

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}



@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, dilation, groups",
    [
        ((2, 5, 9, 11), (6, 5, 3, 3), 1, 1, 1, 1),  # odd sizes, padding: partial tiles and border taps
        ((2, 20, 10, 10), (7, 20, 3, 2), 2, (1, 0), 1, 1),  # more channels than one step, stride 2, a 3x2 filter
        ((1, 4, 12, 12), (4, 2, 3, 3), 1, 2, 2, 2),  # dilation 2, two groups
        ((3, 6, 17), (5, 6, 4), 3, 2, 1, 1),  # 1-D
        ((1, 3, 5, 6, 7), (4, 3, 2, 3, 2), 1, 1, 1, 1),  # 3-D
    ],
)
def test_convolutions_of_every_rank_match_torch(x_shape, w_shape, stride, padding, dilation, groups, channels_last, precision):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    with signed_divisions() as seen:
        got = conv_taps(x, w, b, stride, padding, dilation, False, 0, groups, precision=precision, channels_last=channels_last)
    assert seen.count > 0 and seen.negative() == {}  # no lane depends on how signed division rounds
    close32(got, CONV[len(x_shape) - 2](x, w, b, stride, padding, dilation, groups))
    assert got.is_contiguous()


TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, output_padding, dilation, groups",
    [
        ((2, 5, 6, 7), (5, 4, 3, 3), 1, 1, 0, 1, 1),  # stride 1: one phase, every tap
        ((2, 6, 5, 6), (6, 3, 4, 4), 2, 1, 0, 1, 1),  # the 4x4, stride 2 upsampling class: four phases of four taps
        ((1, 4, 5, 5), (4, 2, 3, 3), 2, 1, 1, 1, 2),  # odd kernel, output padding, two groups: phases of 4, 2, 2, 1 taps
        ((1, 3, 4, 5), (3, 2, 3, 2), (3, 2), (2, 0), (1, 0), (2, 1), 1),  # stride 3 with dilation 2: phases no tap reaches
        ((2, 4, 9), (4, 3, 5), 3, 2, 2, 1, 1),  # 1-D
        ((1, 3, 3, 4, 3), (3, 2, 3, 2, 3), 2, 1, 1, 1, 1),  # 3-D: eight phases
    ],
)
def test_transposed_convolutions_split_by_output_phase_match_torch(x_shape, w_shape, stride, padding, output_padding, dilation, groups, channels_last):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[1] * groups)
    with signed_divisions() as seen:
        got = conv_taps(x, w, b, stride, padding, dilation, True, output_padding, groups, channels_last=channels_last)
    assert seen.count > 0 and seen.negative() == {}
    close32(got, TRANSPOSE[len(x_shape) - 2](x, w, b, stride, padding, output_padding, groups, dilation))


def test_the_tap_table_of_a_strided_transposed_convolution_holds_only_the_taps_that_reach_each_phase():
    from kernels.conv.tap_gemm import conv_tap_table

    phases, taps, max_taps = conv_tap_table((1, 4, 4), (1, 2, 2), (0, 1, 1), (1, 1, 1), True)
    assert [p[0] for p in phases] == [4, 4, 4, 4] and max_taps == 4  # a quarter of the 16 taps each: no product on zeros
    phases, taps, max_taps = conv_tap_table((1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), False)
    assert phases == [(9, 0, 0, 0)] and taps[0][4] == (4, 0, 0, 0)  # the centre tap reads the output's own position


def test_an_input_already_channels_last_and_an_epilogue_with_an_operand():
    x, w, b = rand(2, 8, 7, 7).to(memory_format=torch.channels_last), rand(16, 8, 3, 3), rand(16)
    extra = rand(16, 1, 1)
    post = ([extra], *gemm_chain("relu", ("add", ("operand", 0)), ("mul", 0.5)))
    want = (torch.relu(F.conv2d(x, w, b, 1, 1)) + extra) * 0.5
    close32(conv_taps(x, w, b, 1, 1, post=post), want)
    close32(conv_taps(x, w, b, 1, 1, post=post, channels_last=True), want)


def test_bfloat16_accumulates_in_float32_and_rounds_once():
    x, w = rand(2, 16, 8, 8, dtype=torch.bfloat16), rand(8, 16, 3, 3, dtype=torch.bfloat16)
    truth = F.conv2d(x.double(), w.double(), None, 1, 1)
    got = conv_taps(x, w, None, 1, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), truth, atol=0, rtol=2.0**-8)


def test_bad_input_gets_a_clear_error():
    x, w = rand(1, 4, 6, 6), rand(4, 4, 3, 3)
    with pytest.raises(ValueError, match="unknown precision 'tf32'"):
        conv_taps(x, w, precision="tf32")  # plain TF32 is not offered
    with pytest.raises(ValueError, match="does not cover.*string padding"):
        conv_taps(x, w, None, 1, "same")
    with pytest.raises(ValueError, match="does not cover"):
        conv_taps(rand(2, 5), rand(2, 5))


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.conv.tap_gemm import conv_taps_kernel
from kernels.gemm.epilogue import gemm_chain

out = []
none = (0,) + (1, 0, 1) * 3
for dt, f32x3 in json.loads(sys.argv[1]):
    program, scalars = gemm_chain(("add", ("operand", 0)), "relu")
    spec = dict(HAS_BIAS=True, UPCAST=False, F32X3=f32x3, BLOCK_M=128, BLOCK_N=64, BLOCK_K=32 if dt == "fp32" else 64, GROUP_M=8,
                E0=(1, 64, 1, 1) + (1, 0, 1) * 2, E1=none, E2=none, E3=none, N_OPS=1, ONUMEL=64 * 64 * 8, POST=program, POST_SCALARS=scalars)
    def kind(n):
        if n in spec:
            return "constexpr"
        if n in ("taps_ptr", "phase_ptr"):
            return "*i32"
        return "*" + dt if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else "i32"
    sig = {n: kind(n) for n in conv_taps_kernel.arg_names}
    ptx = triton.compile(ASTSource(conv_taps_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 4}).asm["ptx"]
    out.append({"wgmma": "wgmma" in ptx, "mma": "mma" in ptx, "fma": "fma.rn.f32" in ptx, "tf32_round": "cvt.rna.tf32.f32" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_full_float32_on_cuda_cores_and_three_way_tf32_on_tensor_cores():
    specs = [("fp32", False), ("fp32", True), ("bf16", False)]
    ieee, x3, bf16 = compiled_for_h100(_COMPILE, specs)
    assert ieee["fma"] and not ieee["mma"]
    assert x3["wgmma"] and x3["tf32_round"]  # Hopper's TF32 tensor-core products of hi/lo-split operands
    assert bf16["mma"]
