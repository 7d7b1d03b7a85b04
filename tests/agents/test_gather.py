"""The list all-gather + cat rewrite: where it applies, that its cat skips the copy only when it
may, and that rewritten candidates are correct on every rank under the real evaluator."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from agent_helpers import fresh_runtime

from agents.strategist.codegen import NotApplicable, render, source_rewrites
from agents.strategist.gather import gather_into_tensor
from kloom.suite import find

DATA = Path(__file__).parents[1] / "kb" / "data"


def test_a_gathered_list_that_is_concatenated_is_rewritten():
    source = textwrap.dedent(
        """
        import torch as T
        from torch.distributed import all_gather as ag

        def f(x):
            parts = [T.empty_like(x) for _ in range(4)]
            ag(parts, x)
            other = [x, x]
            return T.cat(parts, dim=1), T.cat(other)
        """
    )
    assert source_rewrites(source) == {"gather_into_tensor": 1}
    out, n = gather_into_tensor(source)
    assert n == 1
    assert "_kloom_all_gather_list(parts, x)" in out
    assert "_kloom_cat_gathered(parts, dim=1)" in out
    assert "T.cat(other)" in out, "a list no all_gather fills keeps the plain cat"


def test_a_gather_whose_list_is_not_concatenated_is_left_alone():
    source = "import torch.distributed as dist\n\ndef f(x, parts):\n    dist.all_gather(parts, x)\n    return parts[0]\n"
    assert source_rewrites(source) == {}
    assert gather_into_tensor(source) == (source, 0)
    with pytest.raises(NotApplicable):
        render(source + "\nclass Model:\n    pass\n", {"wrapper": "none", "rewrites": ["gather_into_tensor"]}, mutated_inputs=[], label="t")


def _helpers() -> dict:
    scope = fresh_runtime("agents.strategist.gather.runtime")  # the module the candidate copies
    return scope


def test_the_cat_of_consecutive_blocks_is_the_buffer_itself():
    cat = _helpers()["_kloom_cat_gathered"]
    flat = torch.randn(8, 3)
    blocks = list(flat.chunk(4))
    joined = cat(blocks)
    assert joined.data_ptr() == flat.data_ptr() and torch.equal(joined, flat)


@pytest.mark.parametrize(
    "make",
    [
        lambda flat: list(flat.chunk(4))[::-1],  # out of order
        lambda flat: list(flat.chunk(4))[:3],  # not the whole buffer
        lambda flat: [b.clone() for b in flat.chunk(4)],  # not views
        lambda flat: list(flat.t().contiguous().t().chunk(4)),  # views of a non-contiguous base
    ],
)
def test_any_other_list_is_concatenated_by_copy(make):
    cat = _helpers()["_kloom_cat_gathered"]
    flat = torch.randn(8, 3)
    blocks = make(flat)
    joined = cat(blocks)
    assert torch.equal(joined, torch.cat(blocks))
    assert joined.data_ptr() != flat.data_ptr()


@pytest.mark.parametrize("dim", [0, 1])
def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path, dim):
    source = (DATA / "tp_gather_linear.py").read_text()
    if dim == 1:
        # The same layer with the shards gathered side by side (features instead of tokens).
        source = source.replace("x = torch.cat(parts).double()", "x = torch.cat(parts, dim=1).double().reshape(-1, x_shard.shape[1])")
    workload = tmp_path / "workload.py"
    workload.write_text(source)
    code = render(source, {"wrapper": "none", "rewrites": ["gather_into_tensor"]}, mutated_inputs=[], label="gather_into_tensor")
    assert "_kloom_all_gather_list(" in code and "_kloom_cat_gathered(" in code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    for world_size in (2, 4):
        result = evaluator.evaluate(workload, candidate, world_size=world_size)
        assert result.status == "correct", (world_size, result.error)


def test_suite_workloads_already_gathering_into_a_tensor_get_no_such_option():
    source = Path(find("tp_allgather_gemm").path).read_text()
    assert "gather_into_tensor" not in source_rewrites(source)
