"""How a staged block's calls travel (``staged.py``): stacked per position where the calls agree,
as they are where not, and what arrives checked."""

from __future__ import annotations

import pytest
import torch

from services.worker.evaluator import staged


def test_alike_calls_travel_as_one_tensor_per_position_and_come_back_as_they_were():
    calls = [[torch.full((3, 2), float(i)), i, "x"] for i in range(5)]
    packed = staged.stack(calls)
    assert isinstance(packed["stacked_calls"][0]["tensor"], torch.Tensor) and packed["stacked_calls"][0]["tensor"].shape == (5, 3, 2)
    back = staged.unstack(packed, 5)
    assert [c[1:] for c in back] == [c[1:] for c in calls]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(back, calls))


def test_calls_that_differ_travel_as_they_are():
    calls = [[torch.zeros(2)], [torch.zeros(3)], [torch.zeros(2, dtype=torch.float64)]]
    back = staged.unstack(staged.stack(calls), 3)
    assert [c[0].shape for c in back] == [(2,), (3,), (2,)] and back[2][0].dtype == torch.float64
    ragged = [[torch.zeros(1)], []]
    assert staged.unstack(staged.stack(ragged), 2) == ragged


@pytest.mark.parametrize("packed", [
    None, [], {"stacked_calls": [{"tensor": torch.zeros(4, 2)}], "count": 5},  # 4 rows for 5 calls
    {"stacked_calls": [{"values": [1, 2]}], "count": 3}, {"stacked_calls": "x", "count": 1},
    {"stacked_calls": None, "calls": [[1]], "count": 2}, {"stacked_calls": [{"tensor": 3}], "count": 1},
])
def test_a_malformed_form_is_refused(packed):
    with pytest.raises(ValueError):
        staged.unstack(packed)


def test_the_count_must_be_the_block_s():
    packed = staged.stack([[torch.zeros(2)]] * 4)
    assert len(staged.unstack(packed, 4)) == 4
    with pytest.raises(ValueError, match="4 calls where the block ran 5"):
        staged.unstack(packed, 5)
