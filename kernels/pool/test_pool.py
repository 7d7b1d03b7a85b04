"""Tests of the pooling kernel (``kernel.py``) against PyTorch's, on the CPU under the Triton
interpreter (on a GPU when there is one), and of its compilation for an H100.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/pool/test_pool.py``.
"""

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import signed_divisions  # noqa: E402
from kernels.testing import compiled_for_h100, rand  # noqa: E402
import triton  # noqa: E402
from kernels.pool.kernel import POOL_MAX_TAPS, pool, pool_output_size  # noqa: E402

MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
#: A tile of 4 output rows by 8 columns (``window_positions``'s second form), beside the flat blocks.
ROWS = triton.Config({"BLOCK": 32, "BLOCK_W": 8}, num_warps=4)
AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}



@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize(
    "shape, k, s, p, d, ceil",
    [
        ((2, 3, 10, 12), (2, 2), (2, 2), 0, 1, False),  # the common 2x2 halving
        ((2, 3, 11, 13), (3, 3), (2, 2), 1, 1, True),  # padding and ceil_mode's partial last windows
        ((1, 2, 20), (4,), (2,), 2, 3, False),  # 1-D, dilated
        ((1, 2, 7, 8, 9), (3, 3, 3), (2, 2, 2), 1, 2, False),  # 3-D, dilated
        ((3, 9, 10), (3, 2), (1, 2), (1, 0), 1, True),  # no batch dimension: (C, H, W)
    ],
)
@pytest.mark.parametrize("tile", [None, ROWS], ids=["flat", "rows"])
def test_max_pooling_matches_torch(shape, k, s, p, d, ceil, tile):
    x = rand(*shape)
    with signed_divisions() as seen:
        got = pool(x, "max", k, s, p, d, ceil, config=tile)
    assert seen.count > 0 and seen.negative() == {}  # no lane depends on how signed division rounds
    torch.testing.assert_close(got, MAX[len(k)](x, k, s, p, d, ceil), atol=0, rtol=0)
    assert got.is_contiguous()


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize(
    "shape, k, s, p, ceil, override",
    [
        ((2, 3, 10, 12), (2, 2), None, 0, False, None),
        ((2, 3, 11, 13), (3, 3), (2, 2), 1, True, None),  # padding counted or not; clipped last windows
        ((1, 2, 21), (4,), (3,), 2, True, None),
        ((1, 2, 7, 8, 9), (3, 2, 3), (2, 2, 1), (1, 1, 0), False, None),
        ((2, 2, 9, 9), (3, 3), (3, 3), 1, False, 5),  # divisor_override
    ],
)
@pytest.mark.parametrize("tile", [None, ROWS], ids=["flat", "rows"])
def test_average_pooling_matches_torch(shape, k, s, p, ceil, override, count_include_pad, tile):
    x = rand(*shape)
    got = pool(x, "avg", k, s, p, 1, ceil, count_include_pad, override, config=tile)
    kwargs = {"divisor_override": override} if override else {}  # avg_pool1d has no divisor_override
    want = AVG[len(k)](x, k, s, p, ceil, count_include_pad, **kwargs)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_max_propagates_nan_and_an_epilogue_runs_on_the_pooled_values():
    x = rand(2, 3, 8, 8)
    x[0, 1, 3, 2] = float("nan")
    got = pool(x, "max", (2, 2), post=([], *gemm_chain("relu", ("mul", 2.0))))
    want = torch.relu(F.max_pool2d(x, 2)) * 2.0
    torch.testing.assert_close(got, want, equal_nan=True)
    assert torch.isnan(got[0, 1, 1, 1])
    strided = rand(2, 6, 9, 16)[:, ::2, :, ::2]
    torch.testing.assert_close(pool(strided, "avg", (3, 3), (2, 2), 1), F.avg_pool2d(strided, 3, 2, 1))


def test_bfloat16_rounds_once():
    x = rand(2, 4, 9, 9, dtype=torch.bfloat16)
    got = pool(x, "avg", (3, 3), (2, 2))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), F.avg_pool2d(x.double(), 3, 2), atol=0, rtol=2.0**-8)


def test_the_output_size_follows_torch_with_ceil_mode():
    for size, k, s, p, d in ((10, 3, 2, 1, 1), (11, 3, 2, 1, 1), (5, 2, 2, 0, 1), (9, 3, 3, 1, 2)):
        for ceil in (False, True):
            x = torch.zeros(1, 1, size)
            assert pool_output_size(size, k, s, p, d, ceil) == F.max_pool1d(x, k, s, p, d, ceil).shape[-1]


def test_bad_input_gets_a_clear_error():
    x = rand(1, 2, 8, 8)
    with pytest.raises(ValueError, match="pooling kind of max, avg"):
        pool(x, "min", (2, 2))
    with pytest.raises(ValueError, match="padding at most half"):
        pool(x, "max", (2, 2), 1, 2)
    with pytest.raises(ValueError, match=f"at most {POOL_MAX_TAPS} taps"):
        pool(rand(1, 1, 40, 40), "avg", (23, 23))
    with pytest.raises(ValueError, match="1-3 pooled dimensions"):
        pool(rand(4), "max", (2,))


_COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.pool.kernel import pool_kernel

out = []
none = (0,) + (1, 0, 1) * 3
for is_max, padded, block_w in json.loads(sys.argv[1]):
    spec = dict(IS_MAX=is_max, PADDED=padded, COUNT_PAD=True, OVERRIDE=False, KD=1, KH=3, KW=3, DD=1, DH=1, DW=1, BLOCK=1024, BLOCK_W=block_w,
                E0=none, E1=none, E2=none, E3=none, N_OPS=0, ONUMEL=1, POST=(), POST_SCALARS=())
    sig = {n: "constexpr" if n in spec else ("*fp32" if n.endswith("_ptr") or n in ("q0", "q1", "q2", "q3") else ("fp32" if n == "divisor" else "i32")) for n in pool_kernel.arg_names}
    ptx = triton.compile(ASTSource(pool_kernel, sig, constexprs=spec), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    out.append({"loads": ptx.count("ld.global"), "max": "max" in ptx})
print(json.dumps(out))
"""


def test_the_kernel_compiles_for_h100():
    found = compiled_for_h100(_COMPILE, [[True, False, 0], [True, True, 0], [False, True, 0], [True, True, 64], [False, True, 128]])
    assert all(c["loads"] >= 9 for c in found) and found[0]["max"]
