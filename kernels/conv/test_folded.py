"""Tests of the folded-window convolution (``folded.py``) against torch's, on the CPU under the
Triton interpreter (on a GPU when there is one), and of its compilation for an H100.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/conv/test_folded.py``.
"""

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.conv.folded import FOLDED_MAX_K, conv_folded, conv_folded_configs  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402
from kernels.testing import close32, compiled_for_h100, rand  # noqa: E402

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}



@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, dilation, groups",
    [
        ((2, 3, 9, 11), (6, 3, 3, 3), 1, 0, 1, 1),  # an RGB image, no padding: the rows' mask alone
        ((2, 8, 10, 10), (7, 8, 3, 2), 2, (1, 0), 1, 1),  # 48 reduction indices (two steps and a part), stride 2, padding on one axis
        ((1, 4, 12, 12), (4, 2, 3, 3), 1, 2, 2, 2),  # dilation 2, two groups
        ((3, 6, 17), (5, 6, 4), 3, 2, 1, 1),  # 1-D
        ((1, 3, 5, 6, 7), (4, 3, 2, 3, 2), 1, 1, 1, 1),  # 3-D
        ((2, 3, 6, 7, 5), (5, 3, 3, 3, 3), (2, 1, 1), 0, (1, 2, 1), 1),  # 3-D, 81 indices, mixed stride and dilation
    ],
)
def test_convolutions_of_every_rank_match_torch(x_shape, w_shape, stride, padding, dilation, groups, precision):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    with signed_divisions() as seen:
        got = conv_folded(x, w, b, stride, padding, dilation, groups, precision=precision)
    assert seen.count > 0 and seen.negative() == {}  # no lane depends on how signed division rounds
    close32(got, CONV[len(x_shape) - 2](x, w, b, stride, padding, dilation, groups))
    assert got.is_contiguous()


def test_strided_views_and_an_epilogue_with_an_operand():
    base = rand(2, 3, 10, 14)
    x = base[:, :, 1:9, ::2]  # neither contiguous nor starting at the storage's first element
    w, b = rand(16, 3, 3, 3), rand(16)
    extra = rand(16, 1, 1)
    post = ([extra], *gemm_chain("relu", ("add", ("operand", 0)), ("mul", 0.5)))
    want = (torch.relu(F.conv2d(x, w, b)) + extra) * 0.5
    close32(conv_folded(x, w, b, post=post), want)
    close32(conv_folded(x.contiguous(memory_format=torch.channels_last), w, b, post=post), want)


def test_a_filter_that_is_not_contiguous_is_read_as_its_values():
    x, weight = rand(2, 4, 8, 8), rand(6, 4, 3, 3).transpose(2, 3)
    assert not weight.is_contiguous()
    close32(conv_folded(x, weight, None, 1, 1), F.conv2d(x, weight, None, 1, 1))


def test_bfloat16_accumulates_in_float32_and_rounds_once():
    x, w = rand(2, 8, 8, 8, dtype=torch.bfloat16), rand(8, 8, 3, 3, dtype=torch.bfloat16)
    truth = F.conv2d(x.double(), w.double(), None, 1, 1)
    got = conv_folded(x, w, None, 1, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), truth, atol=0, rtol=2.0**-8)


def test_the_tile_configurations_cover_the_window_and_no_more_columns_than_needed():
    configs = conv_folded_configs(torch.float32, 16, 27)
    assert {c.kwargs["BLOCK_K"] for c in configs} == {32} and max(c.kwargs["BLOCK_N"] for c in configs) == 16
    assert {c.kwargs["BLOCK_K"] for c in conv_folded_configs(torch.float32, 64, 9)} == {16}
    assert max(c.kwargs["BLOCK_N"] for c in conv_folded_configs(torch.bfloat16, 64, 216)) == 64


def test_bad_input_gets_a_clear_error():
    x = rand(1, 4, 6, 6)
    with pytest.raises(ValueError, match="unknown precision 'tf32'"):
        conv_folded(x, rand(4, 4, 3, 3), precision="tf32")  # plain TF32 is not offered
    with pytest.raises(ValueError, match="does not cover.*string padding"):
        conv_folded(x, rand(4, 4, 3, 3), None, 1, "same")
    with pytest.raises(ValueError, match=f"at most {FOLDED_MAX_K} reduction indices.*has 576"):
        conv_folded(rand(1, 64, 6, 6), rand(4, 64, 3, 3))


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.conv.folded import conv_folded_kernel
from kernels.gemm.epilogue import gemm_chain

out = []
none = (0,) + (1, 0, 1) * 3
for dt, f32x3, padded in json.loads(sys.argv[1]):
    program, scalars = gemm_chain(("add", ("operand", 0)), "relu")
    spec = dict(HAS_BIAS=True, UPCAST=False, F32X3=f32x3, PADDED=padded, C_IN_G=3, KD=1, KH=3, KW=3, DD=1, DH=1, DW=1,
                BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8,
                E0=(1, 64, 1, 1) + (1, 0, 1) * 2, E1=none, E2=none, E3=none, N_OPS=1, ONUMEL=64 * 64 * 8, POST=program, POST_SCALARS=scalars)
    sig = {n: "constexpr" if n in spec else ("*" + dt if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else "i32") for n in conv_folded_kernel.arg_names}
    ptx = triton.compile(ASTSource(conv_folded_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2}).asm["ptx"]
    out.append({"wgmma": "wgmma" in ptx, "mma": "mma" in ptx, "fma": "fma.rn.f32" in ptx, "tf32_round": "cvt.rna.tf32.f32" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_full_float32_on_cuda_cores_and_three_way_tf32_on_tensor_cores():
    specs = [("fp32", False, False), ("fp32", True, False), ("fp32", True, True), ("bf16", False, True)]
    ieee, x3, x3_padded, bf16 = compiled_for_h100(_COMPILE, specs)
    assert ieee["fma"] and not ieee["mma"]
    assert x3["wgmma"] and x3["tf32_round"] and x3_padded["wgmma"]  # Hopper's TF32 tensor-core products of hi/lo-split operands
    assert bf16["mma"]
