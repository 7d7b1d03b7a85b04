"""``kloom suite import pkb``: ParallelKernelBench references become multi-rank workloads whose
inputs come from the checkout's own ``create_input_tensor``; problems kloom cannot run are
reported with the reason."""

import json
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from kloom.cli.import_cmd import register_import
from kloom.importers import ImporterError, import_pkb
from kloom.importers.pkb import family_of, input_problem_ids
from kloom.suite import discover
from kloom.workload import inspect_workload

CANDIDATES = Path(__file__).parent / "fixtures" / "candidates"


def _by_name(report) -> dict[str, str]:
    return {w.name: w.path for w in report.imported}


def test_runnable_problems_are_imported_and_the_rest_listed_with_reasons(pkb_checkout, tmp_path):
    report = import_pkb(pkb_checkout, out_dir=tmp_path / "suite")
    assert sorted(_by_name(report)) == ["pkb_1_allreduce", "pkb_2_allgather_gemm", "pkb_7_rank_offset", "pkb_9_global_sum"]
    reasons = {Path(r.origin).name: r.reason for r in report.rejected}
    assert set(reasons) == {
        "3_multimem_allgather_gemm.py", "4_scale_no_solution.py", "5_scale_fast_backend.py",
        "6_pairwise_distance.py", "8_broadcast_v1.py", "8_broadcast_v2.py", "README_notes.py",
    }
    assert "NVLink multicast" in reasons["3_multimem_allgather_gemm.py"]
    assert reasons["4_scale_no_solution.py"] == "defines no solution() at module level"
    assert reasons["5_scale_fast_backend.py"] == "imports kloom_fixture_absent_backend, which is not installed here"
    assert "no inputs for problem 6" in reasons["6_pairwise_distance.py"] and "takes 2 arguments" in reasons["6_pairwise_distance.py"]
    assert "shared by 8_broadcast_v1.py and 8_broadcast_v2.py" in reasons["8_broadcast_v1.py"]
    notes = {w.name: w.notes for w in report.imported}
    assert notes["pkb_7_rank_offset"] == ["gets create_input_tensor's default input (one tensor of the base shape)"]

    found, problems = discover(tmp_path / "suite")
    assert problems == [] and sorted(w.name for w in found) == sorted(_by_name(report))
    info = inspect_workload(_by_name(report)["pkb_1_allreduce"])
    assert info.world_sizes == (1, 2, 4, 8) and info.family == "collectives"
    assert info.shape_profiles == ("gpu", "ci")
    # The reference's math is in the workload itself, for the agents to read.
    assert "dist.all_reduce(out, op=dist.ReduceOp.SUM)" in Path(info.path).read_text()


def test_input_builder_branches_are_read_statically(pkb_checkout):
    ids, ranges = input_problem_ids(pkb_checkout / "utils" / "input_output_tensors.py")
    assert ids == {1, 2, 3, 9} and ranges == [(4, 5)]
    assert [family_of(s) for s in ("1_allreduce", "12_allgather_gemm", "28_moe_pre_all2all", "54_ring_attention", "73_vocab_parallel_cross_entropy_loss", "41_zero1_optimizer_shard", "85_distributed_sample_sort")] == [
        "collectives", "tensor_parallel", "expert_parallel", "context_parallel", "vocab_parallel", "data_parallel", "other",
    ]


@pytest.mark.parametrize("world_size", [1, 2])
def test_imported_problems_evaluate_on_every_rank(pkb_checkout, tmp_path, evaluator, world_size):
    workloads = _by_name(import_pkb(pkb_checkout, out_dir=tmp_path / "suite"))
    good = evaluator.evaluate(workloads["pkb_1_allreduce"], CANDIDATES / "pkb_allreduce.py", world_size=world_size)
    assert good.status == "correct", good.error
    assert len(good.timing.candidate) == world_size
    # Multiplying by the world size equals the sum only when every rank holds the same tensor.
    wrong = evaluator.evaluate(workloads["pkb_1_allreduce"], CANDIDATES / "pkb_allreduce_wrong.py", world_size=world_size)
    assert wrong.status == ("correct" if world_size == 1 else "incorrect")


def test_every_rank_builds_its_inputs_from_the_same_fresh_trial(pkb_checkout, tmp_path, evaluator):
    workloads = _by_name(import_pkb(pkb_checkout, out_dir=tmp_path / "suite"))
    path = workloads["pkb_9_global_sum"]
    first = evaluator.reference_io(path, world_size=2, seed=11)
    # Problem 9 slices one global batch drawn from rank 0's seed: the ranks agree on it only if
    # they passed create_input_tensor the same trial.
    totals = [rank["inputs"][1] for rank in first]
    torch.testing.assert_close(totals[0], totals[1])
    torch.testing.assert_close(first[0]["outputs"][0][0], totals[0], rtol=1e-4, atol=1e-3)
    assert not torch.equal(first[0]["inputs"][0], first[1]["inputs"][0])
    other = evaluator.reference_io(path, world_size=2, seed=12)
    assert not torch.equal(other[0]["inputs"][1], totals[0])  # a new seed, a new trial

    result = evaluator.evaluate(path, CANDIDATES / "pkb_global_sum.py", world_size=2)
    assert result.status == "correct", result.error


def test_a_changed_input_builder_stops_the_workload_until_reimported(pkb_checkout, tmp_path, evaluator):
    workloads = _by_name(import_pkb(pkb_checkout, out_dir=tmp_path / "suite"))
    builder = pkb_checkout / "utils" / "input_output_tensors.py"
    builder.write_text(builder.read_text() + "\n# edited after the import\n")
    result = evaluator.evaluate(workloads["pkb_1_allreduce"], CANDIDATES / "pkb_allreduce.py", world_size=1)
    assert result.status == "workload_error"
    assert "changed since it was imported" in result.error.message

    again = _by_name(import_pkb(pkb_checkout, out_dir=tmp_path / "suite"))
    assert evaluator.evaluate(again["pkb_1_allreduce"], CANDIDATES / "pkb_allreduce.py", world_size=1).status == "correct"


def test_import_command_options_and_json(pkb_checkout, tmp_path, cache):
    suite = typer.Typer()
    register_import(suite)
    runner = CliRunner()
    result = runner.invoke(suite, ["import", "pkb", str(pkb_checkout), "--world-sizes", "2,4", "--gpu-shape", "2048x512", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert Path(data["out_dir"]) == (cache / "suites" / "pkb").resolve()
    assert len(data["imported"]) == 4 and len(data["rejected"]) == 7
    text = Path(data["imported"][0]["path"]).read_text()
    assert "WORLD_SIZES = [2, 4]" in text and "'base_shape': (2048, 512)" in text

    bad = runner.invoke(suite, ["import", "pkb", str(tmp_path), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "not a ParallelKernelBench checkout" in bad.output
    with pytest.raises(ImporterError):
        import_pkb(tmp_path)
