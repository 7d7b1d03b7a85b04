"""The GPU projection (``projection_kernel.py``, one Triton kernel per piece) computes the numbers
the CPU's tensor code does: on the CPU through Triton's interpreter, on a GPU against the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

INTERPRETED = r'''
import torch
from services.worker.evaluator import projection as P
from services.worker.evaluator.projection_kernel import project_piece

g = torch.Generator().manual_seed(5)
for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn):
    if dtype == torch.bool:
        x = torch.rand(9000, generator=g) > 0.5
    elif not dtype.is_floating_point:
        x = torch.randint(-40, 40, (9000,), generator=g).to(dtype)
    else:
        x = (4 * torch.randn(9000, generator=g)).to(dtype)
    wide = x.to(torch.float32).to(torch.float64)
    a, x2 = wide.abs(), wide * wide
    sums = torch.stack([a.sum(), x2.sum(), torch.dot(a, x2), torch.dot(x2, x2)])
    for start in (0, 4095, (1 << 32) - 9000):
        for seed, leaf, call in ((1, 0, 0), (987654321, 3, 17)):
            got = project_piece(x, start, P._key(seed, leaf, 0, call))
            r = P.signs(seed, leaf, start, x.numel(), call=call)
            want = torch.cat([torch.stack([torch.dot(wide, r[0]), torch.dot(x2, r[1])]), sums])
            assert torch.allclose(got, want, rtol=1e-12, atol=1e-9), (dtype, start, seed, got.tolist(), want.tolist())
            for other in (P._key(seed + 1, leaf, 0, call), P._key(seed, leaf, 0, call + 1)):
                wrong = project_piece(x, start, other)
                assert float(want[2]) == 0.0 or (abs(float(wrong[0] - want[0])) > 1e-6 and abs(float(wrong[1] - want[1])) > 1e-6), \
                    "a key that changes nothing"
print("same")
'''


def test_the_kernel_hashes_and_sums_as_the_cpu_does_interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "same" in done.stdout, done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["kernel", "staged"])
@pytest.mark.parametrize("case", ["contiguous", "strided", "channels-last", "complex", "pieces", "fp8"])
def test_the_gpu_projection_equals_the_cpus(monkeypatch, case, path):
    """Each GPU path (the Triton kernel per call; leaves staged and projected per block) against
    the CPU's per-call tensor code."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from services.worker.evaluator import projection as P

    g = torch.Generator().manual_seed(11)
    x = torch.randn(300, 257, generator=g)
    if case == "strided":
        x = x.t()[:, ::2]
    elif case == "channels-last":
        x = torch.randn(6, 32, 40, 50, generator=g).contiguous(memory_format=torch.channels_last)
    elif case == "complex":
        x = torch.randn(300, 257, dtype=torch.complex64, generator=g).conj()
    elif case == "pieces":
        monkeypatch.setattr(P, "GPU_PIECE", 1000)
    elif case == "fp8":
        x = x.to(torch.float8_e4m3fn)
    table = {torch.float32: (1e-4, 1e-4), torch.complex64: (1e-4, 1e-4), torch.float8_e4m3fn: (0.1, 0.125)}

    def block(device: str) -> list:
        one = P.project([x.to(device), 3, x[:5].to(device)], seed=77, tolerance=table)
        projector = P.Projector(78, device, table, calls=3)
        for _ in range(3):
            projector.add([x.to(device)])
        return [one, projector.finish()]

    budget = P.STAGE_BYTES
    monkeypatch.setattr(P, "STAGE_BYTES", 0)  # the CPU: call by call
    cpu = block("cpu")
    monkeypatch.setattr(P, "STAGE_BYTES", budget)
    if path == "kernel":
        monkeypatch.setattr(P, "KERNEL_MIN_BYTES", 1)
    gpu = block("cuda")
    for name in ("p", "p2", "bound", "bound2", "total", "total2"):
        for a, b in zip(getattr(cpu[0], name), getattr(gpu[0], name)):
            assert a == pytest.approx(b, rel=1e-10, abs=1e-9), name
    for call in range(3):  # a block of calls: each call's signs, alike on both
        assert cpu[1].p[call] == pytest.approx(gpu[1].p[call], rel=1e-10) and cpu[1].p2[call] == pytest.approx(gpu[1].p2[call], rel=1e-10)
    assert cpu[1].p[0] != cpu[1].p[1]


DENSE = r'''
import torch
from services.worker.evaluator import projection as P
from services.worker.evaluator.projection_kernel import dense_layout, project_dense, project_piece

g = torch.Generator().manual_seed(9)
base = torch.randn(3, 5, 7, 4, generator=g)
cases = {
    "channels-last": base.contiguous(memory_format=torch.channels_last),
    "channels-last 3-D": torch.randn(2, 3, 4, 5, 6, generator=g).contiguous(memory_format=torch.channels_last_3d),
    "transpose": torch.randn(37, 53, generator=g).t(),
    "permutation": base.permute(2, 0, 3, 1),
    "size-one dims": torch.randn(4, 1, 6, 1, 5, generator=g).permute(4, 3, 0, 2, 1),
    "offset view": torch.randn(2, 40, 30, generator=g)[1].t(),
    "bf16": base.to(torch.bfloat16).permute(0, 2, 3, 1),
    "fp8": base.to(torch.float8_e4m3fn).permute(3, 1, 0, 2),
    "bool": (base > 0).permute(1, 0, 3, 2),
}
for name, t in cases.items():
    assert not t.is_contiguous(), name
    layout = dense_layout(t)
    assert layout is not None and len(layout[0]) == 4, (name, layout)
    for key in (1, P._key(987654321, 3, 0, 17), (1 << 32) - 5):
        got = project_dense(t, layout, key)
        want = project_piece(t.contiguous().reshape(-1), 0, key)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-9), (name, key, got.tolist(), want.tolist())
# Through the projector, as a rank calls it: the same numbers as the row-major reading.
x = base.contiguous(memory_format=torch.channels_last)
assert torch.allclose(P.Projector(5, "cpu").leaf(2, x, call=3), P.Projector(5, "cpu").leaf(2, x.contiguous(), call=3), rtol=1e-12)
# Not one dense span, or too many dimensions left after merging: read in row-major pieces.
assert dense_layout(torch.randn(6, 8)[:, ::2]) is None
assert dense_layout(torch.randn(5, 1).expand(5, 4)) is None
assert dense_layout(torch.randn(2, 3, 2, 3, 2).permute(4, 2, 0, 3, 1)) is None
assert dense_layout(torch.randn(0, 3).t()) is None
# Row-major pieces on the GPU path, small enough that a chunk ends in one strided row (which a
# reshape returns as a view, not a copy): the same numbers as the CPU's.
P.GPU_COPY = 12
for t in (base.contiguous(memory_format=torch.channels_last), torch.randn(6, 8, 10, generator=g)[:, ::2, 1:],
          torch.randn(2, 3, 2, 3, 2, generator=g).permute(4, 2, 0, 3, 1)):
    want = P.Projector(5, "cpu").leaf(1, t, call=2)
    assert torch.allclose(P.Projector(5, "cpu")._leaf_on_gpu(1, t, 2), want, rtol=1e-12, atol=1e-9), t.shape
    assert torch.allclose(P.Projector(5, "cpu")._leaf_on_gpu(1, t.contiguous(), 2), want, rtol=1e-12, atol=1e-9)
import services.worker.evaluator.projection_kernel as K
K.dense_layout = lambda t: None  # channels-last read in row-major pieces, as a leaf of 2**31 elements is
t = base.contiguous(memory_format=torch.channels_last)
assert torch.allclose(P.Projector(5, "cpu")._leaf_on_gpu(1, t, 2), P.Projector(5, "cpu").leaf(1, t, call=2), rtol=1e-12, atol=1e-9)
# Dimensions adjacent in both orders merge: channels-last (N, C, H, W) is N, (H W), C in memory.
sizes, strides = dense_layout(base.contiguous(memory_format=torch.channels_last))
assert sizes == [1, 3, 28, 5] and strides == [0, 140, 1, 28], (sizes, strides)
print("same")
'''


def test_a_leaf_stored_in_another_order_projects_as_its_row_major_copy_interpreted():
    """A candidate's output stored densely in another order of its dimensions (channels-last, a
    transpose) is read in memory order with each element's row-major index decoded, and gives the
    numbers of its contiguous copy; gaps, broadcasts and layouts of more than four merged
    dimensions are left to the row-major pieces, which give the CPU's numbers too (a piece that
    ended in one strided row was read as contiguous)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", DENSE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "same" in done.stdout, done.stderr[-3000:]
