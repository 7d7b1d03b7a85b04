"""The row-chunk runtime: row bounds cover every row once, outputs concatenate leaf by leaf, and
the pipelined step (on a GPU: one stream per slice) equals the step on all rows; the plan's
constants reach the candidate's text."""

import pytest
import torch

from agents.strategist.embed import runtime_source
from agents.strategist.row_chunks import runtime as rt


@pytest.mark.parametrize("n, chunks", [(10, 3), (9, 3), (1, 4), (7, 7), (5, 1)])
def test_bounds_cover_every_row_once(n, chunks):
    bounds = rt._kloom_bounds(n, chunks)
    assert [i for a, b in bounds for i in range(a, b)] == list(range(n)) and len(bounds) <= chunks


def test_outputs_concatenate_leaf_by_leaf_along_the_rows():
    parts = [(torch.ones(2, 3), {"s": torch.zeros(2)}), (2 * torch.ones(1, 3), {"s": torch.ones(1)})]
    out, extra = rt._kloom_cat(parts)
    assert torch.equal(out, torch.tensor([[1.0] * 3, [1.0] * 3, [2.0] * 3])) and torch.equal(extra["s"], torch.tensor([0.0, 0.0, 1.0]))


def test_the_plans_constants_reach_the_candidate():
    text = runtime_source("agents.strategist.row_chunks.runtime", _KLOOM_CHUNK_ARGS=(0, 2), _KLOOM_CHUNKS=4, _KLOOM_STREAMS=3)
    assert "_KLOOM_CHUNK_ARGS = (0, 2)\n" in text and "_KLOOM_CHUNKS = 4\n" in text and "_KLOOM_STREAMS = 3\n" in text
    space: dict = {}
    exec(compile(text, "<candidate>", "exec"), space)
    assert space["_KLOOM_CHUNK_ARGS"] == (0, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_pipelined_step_equals_the_step_on_all_rows(monkeypatch):
    monkeypatch.setattr(rt, "_KLOOM_CHUNK_ARGS", (0,))
    monkeypatch.setattr(rt, "_KLOOM_CHUNKS", 3)
    w = torch.randn(16, 8, device="cuda")
    x = torch.randn(50, 16, device="cuda")
    streams = [torch.cuda.Stream() for _ in range(2)]
    got = rt._kloom_pipelined(lambda a, b: torch.tanh(a @ b), [x, w], streams)
    torch.testing.assert_close(got, torch.tanh(x @ w))
