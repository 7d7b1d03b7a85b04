"""Tests of the GEMM kernel against torch, on the CPU under the Triton interpreter (and on a GPU
when there is one), and of its compilation for an H100 (sm_90), which needs no GPU.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/gemm/test_gemm.py`` (this module sets the
variable itself when no GPU is present, if nothing imported the kernels before it).
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

from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.gemm.matmul import gemm  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[2]


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def close32(got, want):
    """Equal within float32 reordering: the error of summing K products in another order."""
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize(
    "a_of, b_of",
    [
        (lambda: rand(37, 29), lambda: rand(29, 45)),  # odd sizes: partial tiles everywhere
        (lambda: rand(29, 37).t(), lambda: rand(29, 45)),  # A transposed (column-major view)
        (lambda: rand(37, 29), lambda: rand(45, 29).t()),  # B transposed, as x @ w.T
        (lambda: rand(37, 58)[:, ::2], lambda: rand(29, 90)[:, 1::2]),  # strided slices
        (lambda: rand(5, 3), lambda: rand(3, 70)),  # tiny K, one tile of rows
    ],
)
def test_products_of_any_layout_match_torch_in_float32(a_of, b_of):
    a, b = a_of(), b_of()
    close32(gemm(a, b), a @ b)


@pytest.mark.parametrize(
    "a_of, b_of",
    [
        (lambda: rand(29, 37).t(), lambda: rand(29, 45)),  # A column-major: copied K-major
        (lambda: rand(37, 29), lambda: rand(45, 29).t()),  # B as x @ w.T: already K-major
        (lambda: rand(37, 58)[:, ::2], lambda: rand(29, 90)[:, 1::2]),  # strided slices: both copied
        (lambda: rand(3, 20, 16), lambda: rand(16, 24).expand(3, 16, 24)),  # a broadcast B copied once
    ],
)
def test_three_way_tf32_products_of_any_layout_match_torch(a_of, b_of):
    a, b = a_of(), b_of()
    close32(gemm(a, b, precision="tf32x3"), a @ b)


def test_three_way_tf32_products_keep_their_row_epilogues():
    a, b = rand(21, 40), rand(40, 50)
    close32(gemm(a, b, row="softmax", precision="tf32x3"), torch.softmax(a @ b, dim=-1))
    close32(gemm(a, b, reduce="logsumexp", precision="tf32x3"), torch.logsumexp(a @ b, dim=-1))
    close32(gemm(a, b, tril=0, precision="tf32x3"), torch.tril(a @ b))


def test_batched_products_broadcast_like_matmul():
    a, b = rand(3, 20, 16), rand(3, 16, 24)
    close32(gemm(a, b), torch.bmm(a, b))
    a4, w = rand(2, 3, 20, 16), rand(16, 24)  # a shared B: the batches become rows of one product
    close32(gemm(a4, w), a4 @ w)
    a, b = rand(2, 1, 20, 16), rand(3, 16, 24)
    close32(gemm(a, b), torch.matmul(a, b))


def test_an_elementwise_epilogue_with_operands_broadcast_per_column_row_scalar_and_whole():
    a, b = rand(2, 33, 24), rand(24, 40)
    x = a @ b
    bias, row, scalar, full = rand(40), rand(33, 1), rand(()), rand(2, 33, 40)
    program, scalars = gemm_chain(
        ("add", ("operand", 0)), "gelu", ("mul", ("operand", 1)), ("sub", ("operand", 2)), ("maximum", ("operand", 3)),
        ("hardtanh", (-1.0, 2.0)), ("sub", ("left", 0.5)), ("leaky_relu", (0.1,)), "tanh",
    )
    got = gemm(a, b, ([bias, row, scalar, full], program, scalars))
    want = torch.tanh(F.leaky_relu(0.5 - F.hardtanh(torch.maximum(F.gelu(x + bias) * row - scalar, full), -1.0, 2.0), 0.1))
    close32(got, want)


def test_a_linear_layer_with_its_activation_chain():
    # x @ W.T + b, then swish, divide, clamp, tanh, clamp: one kernel.
    x, w, bias = rand(30, 50), rand(70, 50), rand(70)
    post = ([bias], *gemm_chain(("add", ("operand", 0)), "silu", ("div", 2.0), ("hardtanh", (-1.0, 1.0)), "tanh"))
    want = torch.tanh(torch.clamp(F.silu(F.linear(x, w, bias)) / 2.0, -1.0, 1.0))
    close32(gemm(x, w.t(), post), want)


def test_row_softmax_and_log_softmax_when_the_row_fits_one_tile():
    a, b = rand(40, 24), rand(24, 100)
    x = a @ b
    close32(gemm(a, b, ([], *gemm_chain("gelu")), row="softmax"), torch.softmax(F.gelu(x), dim=1))
    close32(gemm(a, b, row="log_softmax"), torch.log_softmax(x, dim=1))
    with pytest.raises(ValueError, match="row in one tile"):
        gemm(rand(4, 8), rand(8, 2000), row="softmax")


@pytest.mark.parametrize("reduce, fn", [
    ("sum", lambda x: x.sum(-1)), ("mean", lambda x: x.mean(-1)), ("max", lambda x: x.amax(-1)),
    ("min", lambda x: x.amin(-1)), ("logsumexp", lambda x: torch.logsumexp(x, -1)),
])
def test_row_reductions_split_over_tiles(reduce, fn):
    a, b = rand(2, 37, 20), rand(20, 101)  # four column tiles per row
    bias = rand(101)
    x = torch.sigmoid(a @ b + bias)
    close32(gemm(a, b, ([bias], *gemm_chain(("add", ("operand", 0)), "sigmoid")), reduce=reduce), fn(x))


def test_lower_triangular_product_skips_work_and_stays_exact():
    L1, L2 = rand(100, 100).tril(), rand(100, 100).tril()
    close32(gemm(L1, L2, tril=0, triangular_inputs=True), torch.tril(L1 @ L2))
    U1, U2 = rand(70, 70).triu(), rand(70, 70).triu()
    close32(gemm(U1, U2, triu=0, triangular_inputs=True), torch.triu(U1 @ U2))


def test_triangular_inputs_that_are_not_triangular_still_give_tril_of_the_product():
    # The device check finds the nonzero above the diagonal and every tile reads all of K.
    A, L = rand(100, 100), rand(100, 100).tril()
    L_bad = L.clone()
    L_bad[3, 90] = 1.0
    close32(gemm(A, L, tril=0, triangular_inputs=True), torch.tril(A @ L))
    close32(gemm(L, L_bad, tril=0, triangular_inputs=True), torch.tril(L @ L_bad))
    close32(gemm(A, L, triu=1), torch.triu(A @ L, 1))
    close32(gemm(A, L, tril=-2, triangular_inputs=True), torch.tril(A @ L, -2))


def test_bfloat16_products_accumulate_in_float32():
    a, b = rand(40, 64, dtype=torch.bfloat16), rand(64, 48, dtype=torch.bfloat16)
    bias = rand(48, dtype=torch.bfloat16)
    got = gemm(a, b, ([bias], *gemm_chain(("add", ("operand", 0)), "gelu")))
    assert got.dtype == torch.bfloat16
    want = F.gelu(a.float() @ b.float() + bias.float())
    torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=1.6e-2)


def test_bfloat16_with_a_bias_is_rounded_once_from_the_exact_result():
    """The product and its bias stay in float32 and are rounded to bfloat16 once: within half a
    unit in the last place of the exact value, also where the bias cancels the product."""
    a, b = rand(40, 64, dtype=torch.bfloat16), rand(64, 48, dtype=torch.bfloat16)
    product = a.double() @ b.double()
    bias = (-product[7]).to(torch.bfloat16)  # nearly cancels row 7
    got = gemm(a, b, ([bias], *gemm_chain(("add", ("operand", 0)))))
    truth = product + bias.double()
    half_ulp = torch.exp2(torch.floor(torch.log2(truth.abs().clamp_min(2.0**-60))) - 8)
    worst = ((got.double() - truth).abs() - half_ulp * (1 + 2.0**-10)).max()
    assert worst <= 2.0**-14, float(worst)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="records the CPU interpreter's operations")
def test_no_integer_division_sees_a_negative_value():
    """Tile ordering and the triangle's K ranges divide only non-negative values, also below a
    negative diagonal (``kernels/int_division.py``)."""
    A, L = rand(70, 50), rand(50, 50).tril()
    with signed_divisions() as seen:
        close32(gemm(A, L, tril=-2), torch.tril(A @ L, -2))
        close32(gemm(L, L, tril=0, triangular_inputs=True), torch.tril(L @ L))
        close32(gemm(L.t(), L, triu=3), torch.triu(L.t() @ L, 3))
    assert seen.count > 0 and seen.negative() == {}


def test_a_matrix_spanning_32_bit_offsets_is_rejected_by_name():
    a, b = torch.empty(4, 2**16, device="meta"), torch.empty(2**16, 2**16, device="meta")  # shapes only, nothing allocated
    with pytest.raises(ValueError, match=r"B \(65536, 65536\).*past 32 bits"):
        gemm(a, b)


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="unknown precision 'tf32'"):
        gemm(rand(4, 4), rand(4, 4), precision="tf32")  # plain TF32 is not offered
    with pytest.raises(TypeError, match="one dtype"):
        gemm(rand(4, 4), rand(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(rand(4, 5), rand(4, 4))
    with pytest.raises(ValueError, match="unknown elementwise op"):
        gemm_chain("frobnicate")
    with pytest.raises(ValueError, match="parameter"):
        gemm_chain(("hardtanh", (1.0,)))
    with pytest.raises(ValueError, match="row reduction"):
        gemm(rand(4, 4), rand(4, 4), reduce="median")


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.gemm.matmul import gemm_kernel

specs = json.loads(sys.argv[1])
out = []
for spec in specs:
    dt = spec.pop("dtype")
    warps, stages = spec.pop("num_warps"), spec.pop("num_stages")
    sig = {}
    for name in gemm_kernel.arg_names:
        if name in spec:
            sig[name] = "constexpr"
        elif name.endswith("_ptr") or name in ("q0", "q1", "q2", "q3"):
            sig[name] = "*i32" if name == "bad_ptr" else ("*fp32" if name in ("v_ptr", "s_ptr") else "*" + dt)
        else:
            sig[name] = "i32"
    constexprs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec.items()}
    kernel = triton.compile(ASTSource(gemm_kernel, sig, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": warps, "num_stages": stages})
    ptx = kernel.asm["ptx"]
    out.append({"wgmma": "wgmma" in ptx, "mma": "mma.sync" in ptx or "wgmma" in ptx, "fma": "fma.rn.f32" in ptx,
                "tf32": ".tf32" in ptx, "tf32_round": "cvt.rna.tf32.f32" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100_and_float32_never_uses_tensor_cores_unless_split_three_ways():
    """Compiles (no GPU needed) the specialisations the strategist uses; float32 must lower to
    CUDA-core FMAs (no TF32 tensor-core instruction), bfloat16 to Hopper's wgmma, and float32 with
    ``precision="tf32x3"`` to TF32 wgmma on operands split by a round-to-nearest TF32 conversion
    (the hi/lo split: without it the product would be plain TF32)."""
    program, scalars = gemm_chain(("add", ("operand", 0)), "gelu", ("mul", ("operand", 1)), ("hardtanh", (-1.0, 1.0)), "tanh")
    none = (0,) + (1, 0, 1) * 3
    column, per_row = (1, 128, 1, 1) + (1, 0, 1) * 2, (1, 256, 1, 128) + (1, 0, 1) * 2
    post = dict(E0=column, E1=per_row, E2=none, E3=none, N_OPS=2, ONUMEL=256 * 128, POST=program, POST_SCALARS=scalars)
    bare = dict(E0=none, E1=none, E2=none, E3=none, N_OPS=0, ONUMEL=256 * 128, POST=(), POST_SCALARS=())
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, ROW=0, REDUCE=0, TRI=0, DIAG=0, TRI_K=False, EVEN_K=True, UPCAST=False,
                F32X3=False, num_warps=8, num_stages=3)
    specs = [
        dict(base, **post, dtype="fp32"),
        dict(base, **post, dtype="bf16", BLOCK_K=64),
        dict(base, **bare, dtype="fp32", ROW=1, GROUP_M=1),
        dict(base, **post, dtype="fp32", REDUCE=5, EVEN_K=False),
        dict(base, **bare, dtype="fp32", TRI=1, TRI_K=True),
        dict(base, **post, dtype="fp32", F32X3=True, BLOCK_N=64, num_warps=4, num_stages=4),
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _COMPILE, json.dumps(specs)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    fp32 = [r for r, s in zip(results, specs) if s["dtype"] == "fp32" and not s["F32X3"]]
    assert all(r["fma"] and not r["mma"] and not r["tf32"] for r in fp32), results
    assert results[1]["wgmma"], results
    assert results[-1]["wgmma"] and results[-1]["tf32"] and results[-1]["tf32_round"], results

