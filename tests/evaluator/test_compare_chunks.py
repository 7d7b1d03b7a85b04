"""The comparison works chunk by chunk (compare.CHUNK elements at a time): the verdict and every
number it reports are those of comparing the tensors whole, and its temporaries stay a few chunks
wide whatever the outputs' size."""

from __future__ import annotations

import pytest
import torch

from services.worker.evaluator import compare, precision, reference_rank
from services.worker.evaluator import tensors as T
from services.worker.evaluator.compare import DEFAULT_TOLERANCE, compare_leaf


def _pair(dtype: torch.dtype, bad: list[tuple[int, int]], seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.int32, torch.int64):
        want = torch.randint(-50, 50, (37, 211), generator=g, dtype=dtype)
    elif dtype == torch.bool:
        want = torch.rand(37, 211, generator=g) > 0.5
    else:
        want = torch.randn(37, 211, generator=g, dtype=torch.complex64 if dtype == torch.complex64 else torch.float32).to(dtype)
    got = want.clone()
    for i, j in bad:
        got[i, j] = ~got[i, j] if dtype == torch.bool else (got[i, j].to(torch.complex64 if dtype == torch.complex64 else torch.float64) + 7).to(dtype)
    return got, want


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.complex64, torch.int64, torch.bool])
@pytest.mark.parametrize("bad", [[], [(0, 0)], [(20, 5), (36, 210), (3, 100)]])
def test_chunks_report_what_the_whole_comparison_reports(monkeypatch, dtype, bad):
    got, want = _pair(dtype, bad)
    whole = compare_leaf(got, want, DEFAULT_TOLERANCE, "output 0")
    monkeypatch.setattr(compare, "CHUNK", 97)  # chunks that split rows, and a short last one
    chunked = compare_leaf(got, want, DEFAULT_TOLERANCE, "output 0")
    assert chunked == whole
    assert whole[0] == (not bad)
    if bad:
        first = min(bad)
        assert f"first at index {first}" in whole[1]["message"] or dtype in (torch.int64, torch.bool)
        assert whole[1]["mismatched"] == len(bad)


def test_a_nan_in_a_later_chunk_is_found(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 100)
    want = torch.randn(1000)
    got = want.clone()
    got[950] = float("nan")
    ok, details = compare_leaf(got, want, DEFAULT_TOLERANCE, "output 0")
    assert not ok and "1 NaN/Inf" in details["message"] and "(950,)" in details["message"]


def test_the_norm_check_in_chunks_matches_the_whole(monkeypatch):
    want = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    noisy = want + 1e-3 * torch.randn(5000, generator=torch.Generator().manual_seed(2))
    whole = precision.norm_problem(noisy, want, "fp32", "output 0")
    monkeypatch.setattr(compare, "CHUNK", 333)
    assert precision.norm_problem(noisy, want, "fp32", "output 0") == whole != ""
    assert precision.norm_problem(want + 1e-7, want, "fp32", "output 0") == ""


def test_the_norm_check_leaves_values_within_the_absolute_tolerance_to_the_elementwise_check():
    """Outputs that are rounding noise around zero (a mean of group-normalised values: exactly 0
    in exact arithmetic) differ between honest fp32 kernels by all of themselves; the norm-wise
    check looks at the elements above ``atol`` only, and still catches TF32's error on the rest."""
    torch.manual_seed(3)
    x = torch.randn(64, 4, 8, 16, 16)
    normed = torch.nn.functional.group_norm(x, 2)
    want = normed.mean(dim=(1, 2, 3, 4))
    got = normed.double().flip(-1).mean(dim=(1, 2, 3, 4)).float()  # another summation order, exactly
    assert want.abs().max() < 1e-6 and (got - want).norm() / want.norm() > 5e-5  # the old check: rejected
    assert precision.norm_problem(got, want, "fp32", "output 0", atol=1e-4) == ""
    # Where some values are large, the norm-wise check holds on them: TF32-sized errors caught.
    mixed = torch.cat([want, torch.randn(64)])
    off = mixed + 3e-4 * mixed * (mixed.abs() > 1e-4)
    assert "norm-wise error" in precision.norm_problem(off, mixed, "fp32", "output 0", atol=1e-4)


@pytest.mark.gpu
def test_comparing_a_gib_output_takes_a_few_chunks_of_the_device_not_gibs():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    want = torch.randn(1 << 28, device="cuda")  # 1 GiB
    got = want + 1e-6
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ok, _ = compare_leaf(got, want, DEFAULT_TOLERANCE, "output 0")
    assert precision.norm_problem(got, want, "fp32", "output 0") == ""
    extra = torch.cuda.max_memory_allocated() - base
    assert ok and extra <= 12 * compare.CHUNK * 8, f"{extra / 2**20:.0f} MiB above the inputs"


@pytest.mark.parametrize("dtype, numel", [(torch.float32, 1001), (torch.bfloat16, 999), (torch.uint8, 1003), (torch.float64, 64)])
def test_bitwise_equality_in_chunks_sees_every_byte(dtype, numel):
    """``tensors.bitwise_equal`` (the late-write check) compares words a chunk at a time: one bit
    changed anywhere, in the first, a middle or a short last chunk, is seen; NaN equals the same
    NaN and -0.0 differs from 0.0, as bytes do."""
    a = (torch.randn(numel) * 100).to(dtype)
    assert T.bitwise_equal(a, a.clone(), chunk=7)
    for where in (0, numel // 2, numel - 1):
        b = a.clone()
        b.view(torch.uint8)[where * a.element_size()] ^= 1
        assert not T.bitwise_equal(a, b, chunk=7), where
    if dtype.is_floating_point:
        assert T.bitwise_equal(torch.full((5,), float("nan"), dtype=dtype), torch.full((5,), float("nan"), dtype=dtype), chunk=2)
        assert not T.bitwise_equal(torch.zeros(5, dtype=dtype), -torch.zeros(5, dtype=dtype), chunk=2)
    assert not T.bitwise_equal(a, a.clone().reshape(1, -1))


def test_the_finite_check_in_chunks_finds_one_bad_value(monkeypatch):
    monkeypatch.setattr(reference_rank, "CHUNK", 10)
    x = torch.randn(95)
    assert reference_rank.finite(x) and reference_rank.finite(x.to(torch.float8_e4m3fn))
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[91] = bad
        assert not reference_rank.finite(y)
    y[91] = float("nan")  # float8_e4m3fn has no infinity
    assert not reference_rank.finite(y.to(torch.float8_e4m3fn))
    assert not reference_rank.finite(torch.complex(x, x.clone().index_fill_(0, torch.tensor([3]), float("nan"))))
