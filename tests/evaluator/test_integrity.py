"""The run-time snapshot notices patched functions and changed numerics, and ignores torch's own
lazy patches."""

from __future__ import annotations

import time

import torch

from services.worker.evaluator.integrity import Snapshot


def test_patched_timer_is_noticed_and_numerics_restored():
    snap = Snapshot()
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        found = snap.violations()
        assert any("time.perf_counter" in v for v in found)
    finally:
        time.perf_counter = original
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium" if before != "medium" else "high")
    found = snap.violations()
    assert any("float32_matmul_precision" in v for v in found)
    assert torch.get_float32_matmul_precision() == before
    assert snap.violations() == []


def test_torch_compile_is_not_tampering():
    snap = Snapshot()
    fn = torch.compile(lambda x: (x * 2).sin() + 1)
    fn(torch.randn(8))
    assert snap.violations() == []


def test_a_method_set_on_a_watched_class_is_noticed():
    # torch.Tensor's own dict has no "add" (the C base class holds it): setting one shadows the
    # method for every tensor, and the old check, which compared only the names it had recorded,
    # let it pass.
    snap = Snapshot()
    try:
        torch.Tensor.add = lambda self, other: self
        found = snap.violations()
        assert any("torch.Tensor.add" in v for v in found)
    finally:
        del torch.Tensor.add
    assert snap.violations() == []
    torch.Tensor.shape_note = 3  # a plain value is no callable: not what the check follows
    try:
        assert snap.violations() == []
    finally:
        del torch.Tensor.shape_note
