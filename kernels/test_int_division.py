"""Tests of the interpreter's integer division as kernel tests rely on it: it rounds toward zero
as compiled Triton does on the GPU, and ``signed_divisions`` sees every negative dividend.

Run: ``TRITON_INTERPRET=1 python -m pytest kernels/test_int_division.py``.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.int_division import C_BY_TWO, DIVIDENDS, divide_by, signed_divisions  # noqa: E402


def _run(values, d):
    return divide_by(values, d, "cpu")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="a check of the CPU interpreter")
def test_the_interpreter_rounds_signed_division_toward_zero_like_the_gpu():
    assert _run(list(DIVIDENDS), 2) == C_BY_TWO  # C's truncation, not Python's floor


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="records the CPU interpreter's operations")
def test_signed_divisions_reports_a_negative_dividend_and_stops_recording_after():
    with signed_divisions() as seen:
        _run([3, -5, 4, 0], 3)
    assert seen.count == 2 and seen.negative() == {"sdiv dividend": -5, "srem dividend": -5}
    with signed_divisions() as clean:
        _run([3, 5, 4, 0], 3)
    assert clean.count == 2 and clean.negative() == {}
    _run([-1, -2, -3, -4], 3)
    assert clean.count == 2
