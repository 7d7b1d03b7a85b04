"""Tests of the folded transposed convolution (``folded_transposed.py``) against torch's, on the
CPU under the Triton interpreter (on a GPU when there is one), and of its compilation for an H100.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/conv/test_folded_transposed.py``.
"""

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.conv.folded_transposed import conv_transposed_folded, conv_transposed_folded_configs, reduction_table  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402
from kernels.testing import close32, compiled_for_h100, rand  # noqa: E402

TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def _torch(x, w, b, stride, padding, dilation, output_padding, groups):
    return TRANSPOSE[x.dim() - 2](x, w, b, stride, padding, output_padding, groups, dilation)


@pytest.mark.parametrize("precision", ["ieee", "tf32x3"])
@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, dilation, output_padding, groups",
    [
        ((2, 3, 5, 6), (3, 16, 3, 3), 1, 1, 1, 0, 1),  # stride 1: one phase, every tap
        ((2, 3, 4, 5), (3, 6, 3, 3), 2, 1, 1, 1, 1),  # stride 2, output padding: phases of 4, 2, 2, 1 taps
        ((1, 8, 4, 6), (8, 4, 3, 5), (2, 3), (1, 2), (2, 1), 0, 4),  # dilation 2 at stride 2: phases no tap reaches
        ((3, 5, 7), (5, 4, 4), 3, 2, 1, 2, 1),  # 1-D
        ((1, 3, 3, 4, 3), (3, 5, 3, 3, 3), 2, 1, 1, 1, 1),  # 3-D, eight phases of 1-8 taps
        ((1, 6, 3, 3, 4), (6, 3, 2, 3, 2), (1, 2, 2), (0, 1, 0), (1, 1, 2), 0, 2),  # 3-D, mixed, two groups
    ],
)
def test_transposed_convolutions_of_every_rank_match_torch(x_shape, w_shape, stride, padding, dilation, output_padding, groups, precision):
    x, w = rand(*x_shape), rand(*w_shape)
    b = rand(w_shape[1] * groups)
    with signed_divisions() as seen:
        got = conv_transposed_folded(x, w, b, stride, padding, dilation, output_padding, groups, precision=precision)
    assert seen.count > 0 and seen.negative() == {}  # no lane depends on how signed division rounds
    close32(got, _torch(x, w, b, stride, padding, dilation, output_padding, groups))
    assert got.is_contiguous()


def test_a_phase_no_tap_reaches_holds_the_bias_and_the_epilogue_alone():
    # Dilation 2 at stride 2 with no padding: odd outputs get no tap.
    x, w, b = rand(1, 3, 4, 4), rand(3, 16, 3, 3), rand(16)
    phases, _, _ = reduction_table(3, (1, 3, 3), (1, 2, 2), (0, 0, 0), (1, 2, 2))
    assert sorted(p[0] for p in phases) == [0, 0, 0, 27]
    post = ([], *gemm_chain("sigmoid"))
    got = conv_transposed_folded(x, w, b, 2, 0, 2, 0, 1, post=post)
    close32(got, torch.sigmoid(F.conv_transpose2d(x, w, b, 2, 0, 0, 1, 2)))
    close32(got[:, :, 1::2, :], torch.sigmoid(b).view(1, 16, 1, 1).expand(1, 16, 5, 11))


def test_the_table_lists_each_phases_channels_and_taps_with_their_input_offsets():
    phases, entries, k_max = reduction_table(2, (1, 1, 3), (1, 1, 2), (0, 0, 1), (1, 1, 1))
    # Output w = 2q + r takes tap k where r + 1 - k is even, from input q + (r + 1 - k) / 2.
    assert phases == [(2, 0, 0, 0), (4, 0, 0, 1)] and k_max == 4
    assert entries[0] == [(0, 1, 0, 0, 0), (1, 4, 0, 0, 0)]
    assert entries[1] == [(0, 0, 0, 0, 1), (0, 2, 0, 0, 0), (1, 3, 0, 0, 1), (1, 5, 0, 0, 0)]


def test_strided_views_and_an_epilogue_with_an_operand():
    base = rand(2, 3, 10, 14)
    x = base[:, :, 1:7, ::2]  # neither contiguous nor starting at the storage's first element
    w, b = rand(3, 16, 4, 4), rand(16)
    extra = rand(16, 1, 1)
    post = ([extra], *gemm_chain("relu", ("add", ("operand", 0)), ("mul", 0.5)))
    want = (torch.relu(F.conv_transpose2d(x, w, b, 2, 1)) + extra) * 0.5
    close32(conv_transposed_folded(x, w, b, 2, 1, post=post), want)
    close32(conv_transposed_folded(x.contiguous(memory_format=torch.channels_last), w, b, 2, 1, post=post), want)


def test_a_filter_that_is_not_contiguous_is_read_as_its_values():
    x, weight = rand(2, 4, 5, 5), rand(4, 6, 3, 3).transpose(2, 3)
    assert not weight.is_contiguous()
    close32(conv_transposed_folded(x, weight, None, 2, 1), F.conv_transpose2d(x, weight, None, 2, 1))


def test_bfloat16_accumulates_in_float32_and_rounds_once():
    x, w = rand(2, 8, 5, 5, dtype=torch.bfloat16), rand(8, 8, 3, 3, dtype=torch.bfloat16)
    truth = F.conv_transpose2d(x.double(), w.double(), None, 2, 1)
    got = conv_transposed_folded(x, w, None, 2, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), truth, atol=0, rtol=2.0**-8)


def test_the_tile_configurations_cover_a_phase_and_no_more_columns_than_needed():
    configs = conv_transposed_folded_configs(torch.float32, 16, 24)
    assert {c.kwargs["BLOCK_K"] for c in configs} == {32} and max(c.kwargs["BLOCK_N"] for c in configs) == 16
    assert {c.kwargs["BLOCK_K"] for c in conv_transposed_folded_configs(torch.float32, 64, 9)} == {16}


def test_bad_input_gets_a_clear_error():
    x = rand(1, 4, 6, 6)
    with pytest.raises(ValueError, match="unknown precision 'tf32'"):
        conv_transposed_folded(x, rand(4, 4, 3, 3), precision="tf32")  # plain TF32 is not offered
    with pytest.raises(ValueError, match="does not cover"):
        conv_transposed_folded(x, rand(4, 4, 3, 3), None, 1, "same")


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.conv.folded_transposed import conv_transposed_folded_kernel
from kernels.gemm.epilogue import gemm_chain

out = []
none = (0,) + (1, 0, 1) * 3
for dt, f32x3 in json.loads(sys.argv[1]):
    program, scalars = gemm_chain(("add", ("operand", 0)), "relu")
    spec = dict(HAS_BIAS=True, UPCAST=False, F32X3=f32x3, C_IN_G=3, BLOCK_M=128, BLOCK_N=16, BLOCK_K=32, GROUP_M=8,
                E0=(1, 16, 1, 1) + (1, 0, 1) * 2, E1=none, E2=none, E3=none, N_OPS=1, ONUMEL=16 * 64 * 64, POST=program, POST_SCALARS=scalars)
    ints = ("table_ptr", "phase_ptr")
    sig = {n: "constexpr" if n in spec else ("*i32" if n in ints else "*" + dt if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else "i32")
           for n in conv_transposed_folded_kernel.arg_names}
    ptx = triton.compile(ASTSource(conv_transposed_folded_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2}).asm["ptx"]
    out.append({"wgmma": "wgmma" in ptx, "mma": "mma" in ptx, "fma": "fma.rn.f32" in ptx, "tf32_round": "cvt.rna.tf32.f32" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_full_float32_on_cuda_cores_and_three_way_tf32_on_tensor_cores():
    ieee, x3, bf16 = compiled_for_h100(_COMPILE, [("fp32", False), ("fp32", True), ("bf16", False)])
    assert ieee["fma"] and not ieee["mma"]
    assert x3["mma"] and x3["tf32_round"]  # TF32 tensor-core products of hi/lo-split operands
    assert bf16["mma"]
