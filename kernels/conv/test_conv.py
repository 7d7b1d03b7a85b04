"""Tests of the implicit-GEMM convolution against torch's, on the CPU under the Triton
interpreter (on a GPU when there is one), and of its compilation for an H100 (sm_90).

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/conv/test_conv.py``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.conv.implicit_gemm import conv_forward, conv_supported  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[2]


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def close32(got, want):
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, (1, 0), 1, 2), (1, 1, 1, 4)])
def test_conv2d_matches_torch(stride, padding, dilation, groups):
    x, w, b = rand(2, 8, 11, 9), rand(12, 8 // groups, 3, 3), rand(12)
    close32(conv_forward(x, w, b, stride, padding, dilation, False, 0, groups), F.conv2d(x, w, b, stride, padding, dilation, groups))


def test_conv1d_and_conv3d_and_a_channels_last_input():
    x, w = rand(2, 6, 17), rand(5, 6, 4)
    close32(conv_forward(x, w, None, 2, 1, 1, False, 0, 1), F.conv1d(x, w, None, 2, 1))
    x, w = rand(1, 4, 5, 6, 7), rand(6, 4, 3, 2, 3)
    close32(conv_forward(x, w, None, (1, 2, 1), 1, 1, False, 0, 1), F.conv3d(x, w, None, (1, 2, 1), 1))
    x, w = rand(2, 8, 10, 10).contiguous(memory_format=torch.channels_last), rand(4, 8, 3, 3)
    close32(conv_forward(x, w, None, 1, 1, 1, False, 0, 1), F.conv2d(x, w, None, 1, 1))


@pytest.mark.parametrize("stride, padding, output_padding, dilation, groups", [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 0, 2, 2)])
def test_transposed_convolution_matches_torch(stride, padding, output_padding, dilation, groups):
    x, w, b = rand(2, 4, 6, 5), rand(4, 6 // groups * 1 if groups == 1 else 3, 3, 3), rand(6 if groups == 1 else 6)
    want = F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
    close32(conv_forward(x, w, b, stride, padding, dilation, True, output_padding, groups), want)


def test_transposed_conv3d_with_an_epilogue():
    x, w, b = rand(1, 3, 4, 5, 4), rand(3, 5, 3, 3, 3), rand(5)
    scale = rand(1, 5, 1, 1, 1)
    got = conv_forward(x, w, b, 2, 1, 1, True, 1, 1, ([scale], *gemm_chain(("mul", ("operand", 0)), "gelu")))
    close32(got, F.gelu(F.conv_transpose3d(x, w, b, 2, 1, 1) * scale))


def test_epilogue_with_a_residual_and_a_per_channel_bias():
    x, w, b = rand(2, 6, 9, 9), rand(8, 6, 3, 3), rand(8)
    resid = rand(2, 8, 7, 7)
    got = conv_forward(x, w, b, 1, 0, 1, False, 0, 1, ([resid], *gemm_chain("relu", ("add", ("operand", 0)), "hardswish")))
    close32(got, F.hardswish(torch.relu(F.conv2d(x, w, b)) + resid))


def test_bfloat16_accumulates_in_float32():
    x, w = rand(2, 16, 8, 8, dtype=torch.bfloat16), rand(16, 16, 3, 3, dtype=torch.bfloat16)
    got = conv_forward(x, w, None, 1, 1, 1, False, 0, 1)
    torch.testing.assert_close(got.float(), F.conv2d(x.float(), w.float(), None, 1, 1), atol=1e-2, rtol=1.6e-2)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="records the CPU interpreter's operations")
@pytest.mark.parametrize("transposed, stride, padding, dilation, output_padding", [(True, 2, 1, 1, 0), (True, 3, 2, 2, 1), (False, 2, 2, 2, 0)])
def test_no_integer_division_sees_a_negative_index(transposed, stride, padding, dilation, output_padding):
    """A transposed convolution's input index ``(o + padding - k * dilation) / stride`` is
    negative for many lanes: they must be masked and clamped before the division, so that no
    lane depends on how signed division rounds (``kernels/int_division.py``)."""
    x = rand(1, 4, 7, 6)
    w = rand(4, 3, 4, 3) if transposed else rand(3, 4, 4, 3)
    with signed_divisions() as seen:
        got = conv_forward(x, w, None, stride, padding, dilation, transposed, output_padding, 1)
    assert seen.count > 0 and seen.negative() == {}
    if transposed:
        close32(got, F.conv_transpose2d(x, w, None, stride, padding, output_padding, 1, dilation))
    else:
        close32(got, F.conv2d(x, w, None, stride, padding, dilation))


def test_strided_transposed_4x4_matches_the_exact_result():
    """The class the GPU benchmark times (4x4 kernel, stride 2, padding 1) against float64."""
    x, w = rand(2, 16, 12, 12), rand(16, 8, 4, 4)
    truth = F.conv_transpose2d(x.double(), w.double(), None, 2, 1)
    torch.testing.assert_close(conv_forward(x, w, None, 2, 1, 1, True, 0, 1).double(), truth, atol=1e-5, rtol=1e-5)


def test_bfloat16_with_a_bias_is_rounded_once_from_the_exact_result():
    """The accumulator, the bias and the epilogue stay in float32 and the result is rounded to
    bfloat16 once: within half a unit in the last place of the exact value, also where the
    bias cancels the convolution. (Eager PyTorch rounds the convolution to bfloat16 before it
    adds the bias; there it is off by half a unit of the convolution's magnitude.)"""
    bf16 = torch.bfloat16
    x, w = rand(2, 16, 8, 8, dtype=bf16), rand(8, 16, 3, 3, dtype=bf16)
    conv = F.conv2d(x.double(), w.double(), None, 1, 1)
    b = (-conv[0, :, 3, 3]).to(bf16)  # nearly cancels the convolution at one position per channel
    got = conv_forward(x, w, b, 1, 1, 1, False, 0, 1, ([], *gemm_chain("relu")))
    truth = torch.relu(conv + b.double().view(1, -1, 1, 1))
    half_ulp = torch.exp2(torch.floor(torch.log2(truth.abs().clamp_min(2.0**-60))) - 8)
    worst = ((got.double() - truth).abs() - half_ulp * (1 + 2.0**-10)).max()
    assert worst <= 2.0**-14, float(worst)


def test_index_ranges_past_32_bits_are_named_and_rejected():
    x = torch.ones(1, 1, 1, 1, device=DEVICE).expand(2**16, 1, 2**8, 2**8)  # 2**32 output rows, nothing allocated
    assert "output rows" in conv_supported(x, torch.ones(1, 1, 1, 1, device=DEVICE))
    assert "empty output" in conv_supported(rand(1, 2, 2, 2), rand(2, 2, 3, 3))


def test_three_way_tf32_precision_computes_the_convolution_and_plain_tf32_is_refused():
    x, w, b = rand(2, 4, 9, 9), rand(6, 4, 3, 3), rand(6)
    torch.testing.assert_close(conv_forward(x, w, b, 1, 1, 1, False, 0, 1, precision="tf32x3"), F.conv2d(x, w, b, 1, 1), atol=2e-5, rtol=2e-5)
    with pytest.raises(ValueError, match="unknown precision"):
        conv_forward(x, w, b, 1, 1, 1, False, 0, 1, precision="tf32")


def test_uncovered_calls_are_named_and_rejected():
    assert "string padding" in conv_supported(rand(1, 2, 5, 5), rand(2, 2, 3, 3), None, 1, "same")
    assert "one of" in conv_supported(rand(1, 2, 5, 5), rand(2, 2, 3, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="does not cover"):
        conv_forward(rand(2, 5), rand(2, 5))


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.conv.implicit_gemm import conv_kernel
from kernels.gemm.epilogue import gemm_chain

out = []
none = (0,) + (1, 0, 1) * 3
for dt, transposed, f32x3 in json.loads(sys.argv[1]):
    program, scalars = gemm_chain(("add", ("operand", 0)), "relu")
    spec = dict(TRANSPOSED=transposed, HAS_BIAS=True, UPCAST=False, F32X3=f32x3, BLOCK_M=128, BLOCK_N=64, BLOCK_K=32 if dt == "fp32" else 64,
                E0=(1, 64, 1, 1) + (1, 0, 1) * 2, E1=none, E2=none, E3=none, N_OPS=1, ONUMEL=64 * 64 * 8, POST=program, POST_SCALARS=scalars)
    sig = {n: ("constexpr" if n in spec else ("*" + dt if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else "i32")) for n in conv_kernel.arg_names}
    ptx = triton.compile(ASTSource(conv_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3}).asm["ptx"]
    out.append({"mma": "mma" in ptx, "fma": "fma.rn.f32" in ptx, "tf32_round": "cvt.rna.tf32.f32" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_and_float32_never_uses_tensor_cores_unless_split_three_ways():
    specs = [("fp32", False, False), ("fp32", True, False), ("bf16", False, False), ("fp32", False, True)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _COMPILE, json.dumps(specs)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    fp32a, fp32t, bf16, x3 = json.loads(done.stdout.strip().splitlines()[-1])
    assert fp32a["fma"] and not fp32a["mma"] and fp32t["fma"] and not fp32t["mma"]
    assert bf16["mma"]
    assert x3["mma"] and x3["tf32_round"]  # TF32 tensor-core products of hi/lo-split operands
