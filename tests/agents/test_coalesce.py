"""The all-reduce coalescing rewrite: which calls merge, which must not, and that a rewritten
candidate is correct on every rank when the real evaluator checks it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.strategist.coalesce import coalesce_allreduces
from agents.strategist.codegen import NotApplicable, render, source_rewrites
from kloom.suite import find


def _src(body: str) -> str:
    return "import torch\nimport torch.distributed as dist\n\n\ndef f(x, y):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def test_independent_sums_merge_at_the_last_call_and_keep_the_rest_of_the_file():
    source = _src(
        """
        a = x.sum(-1)  # a comment that must survive
        dist.all_reduce(a)
        b = y.exp().sum(-1)
        dist.all_reduce(b)
        return a, b
        """
    )
    out, removed = coalesce_allreduces(source)
    # The overlap rewrite would route the two all-reduces through its helper (a strategy of its own).
    assert removed == 1 and source_rewrites(source) == {"coalesce_allreduce": 1, "overlap": 2}
    assert "dist.all_reduce" not in out
    assert "_kloom_all_reduce_coalesced([a, b])" in out
    assert "# a comment that must survive" in out
    assert out.index("b = y.exp()") < out.index("_kloom_all_reduce_coalesced")


@pytest.mark.parametrize(
    "body, why",
    [
        ("a = x.sum(-1)\ndist.all_reduce(a)\nb = a * 2\ndist.all_reduce(b)\n", "the second reads the first's result"),
        ("a = x.sum(-1)\nv = a.view(-1)\ndist.all_reduce(a)\nb = v + y.sum(-1)\ndist.all_reduce(b)\n", "a view of the first is read"),
        ("a = x.max(-1).values\ndist.all_reduce(a, op=dist.ReduceOp.MAX)\nb = y.sum(-1)\ndist.all_reduce(b)\n", "different reductions"),
        ("a = x.sum(-1)\ndist.all_reduce(a)\ndist.all_gather_into_tensor(y, x)\nb = y.sum(-1)\ndist.all_reduce(b)\n", "another collective between"),
        ("a = x.sum(-1)\ndist.all_reduce(a)\nif x.numel():\n    b = y.sum(-1)\ndist.all_reduce(b)\n", "a branch between"),
        ("a = x.sum(-1)\nwork = dist.all_reduce(a, async_op=True)\nb = y.sum(-1)\ndist.all_reduce(b)\n", "an asynchronous call"),
        ("a = x.sum(-1)\ndist.all_reduce(a)\na += 1\nb = y.sum(-1)\ndist.all_reduce(b)\n", "the first is modified between"),
    ],
)
def test_calls_that_are_not_independent_stay_as_they_are(body, why):
    source = _src(body)
    out, removed = coalesce_allreduces(source)
    assert removed == 0 and out == source, why


def test_groups_are_found_in_nested_blocks_and_with_other_aliases():
    source = textwrap.dedent(
        """
        from torch.distributed import all_reduce as ar
        import torch.distributed as d

        class M:
            def forward(self, x):
                for i in range(2):
                    p = x.sum(0)
                    ar(p)
                    q = x.sum(1)
                    ar(q)
                    r = x.mean()
                    d.all_reduce(r)
                return p, q, r
        """
    )
    out, removed = coalesce_allreduces(source)
    assert removed == 2
    assert "_kloom_all_reduce_coalesced([p, q, r])" in out


def test_render_refuses_a_reference_with_nothing_to_merge():
    source = Path(find("all_reduce_small").path).read_text()
    with pytest.raises(NotApplicable):
        render(source, {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, mutated_inputs=[], label="t")


@pytest.mark.parametrize("name", ["vocab_parallel_cross_entropy", "lm_head_cross_entropy"])
def test_a_coalesced_candidate_is_correct_on_every_rank(evaluator, tmp_path, name):
    path = Path(find(name).path)
    code = render(path.read_text(), {"wrapper": "none", "rewrites": ["coalesce_allreduce"]}, mutated_inputs=[], label="coalesce_allreduce")
    assert "_kloom_all_reduce_coalesced(" in code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error
    assert len(result.trials) >= 5 and all(t.ok for t in result.trials)


def test_a_wrong_merge_would_be_caught(evaluator, tmp_path):
    """Control: merging calls that are not independent (the second reads the first's result)
    changes the answer, and the evaluator says so; the analysis above is what keeps it out."""
    path = Path(find("vocab_parallel_cross_entropy").path)
    source = path.read_text()
    # Merge the max all-reduce with the later sums by hand: the subtraction reads the unreduced max.
    broken = source.replace("dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)", "pass", 1).replace(
        "dist.all_reduce(sum_exp)", "dist.all_reduce(sum_exp)\n        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)", 1
    )
    assert broken != source
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken + "\n\nclass ModelNew(Model):\n    pass\n")
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "incorrect"


def test_the_loop_records_the_rewrite_and_the_catalog_offers_it():
    from agents.analysis import Analysis
    from agents.strategist.catalog import options_for

    found = source_rewrites(Path(find("vocab_parallel_cross_entropy").path).read_text())
    # (The overlap strategy would route its three all-reduces through its helper.)
    assert found == {"coalesce_allreduce": 1, "overlap": 3}
    base = dict(
        family="x", world_size=2, device="cpu", collectives=["allreduce"], collective_sizes={"allreduce": 64}, ops=[],
        n_kernels=12, n_elementwise=6, n_matmul=0, n_attention=0, host_syncs=0, host_sync_ops=[], patterns=[],
        input_shapes=[], dtypes=[], total_input_bytes=0, param_bytes=0, collective_bytes=64, mutated_inputs=[], output_shapes=[],
    )
    offered = {o.strategy for o in options_for(Analysis(**base, source_rewrites=found))}
    assert {"coalesce_allreduce", "coalesce_allreduce_compiled"} <= offered
    assert not {"coalesce_allreduce", "coalesce_allreduce_compiled"} & {o.strategy for o in options_for(Analysis(**base))}
    assert not {o.strategy for o in options_for(Analysis(**dict(base, world_size=1), source_rewrites=found))} & {"coalesce_allreduce"}
