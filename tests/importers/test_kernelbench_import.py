"""``kloom suite import kernelbench``: a checkout's problems become a suite directory that
``kloom.suite.discover`` finds and the evaluator runs."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kloom.cli.import_cmd import register_import
from kloom.importers import ImporterError, import_kernelbench, read_index
from kloom.suite import discover
from kloom.workload import inspect_workload

CANDIDATES = Path(__file__).parent / "fixtures" / "candidates"


def _reasons(report) -> dict[str, str]:
    return {Path(r.origin).name: r.reason for r in report.rejected}


def test_every_level_is_imported_and_unusable_files_come_with_reasons(kernelbench_checkout, tmp_path):
    report = import_kernelbench(kernelbench_checkout, out_dir=tmp_path / "suite")
    assert sorted(w.name for w in report.imported) == ["level1_1_Square_matmul", "level1_2_Scaled_softmax", "level2_1_Gemm_ReLU"]
    reasons = _reasons(report)
    assert reasons["2_Scaled_softmax_OLD.py"] == "problem id 2 is also used by 2_Scaled_softmax.py; KernelBench loads one file per id"
    assert reasons["3_No_init_inputs.py"] == "no function get_init_inputs() defined at module level"
    assert reasons["4_Needs_absent_backend.py"] == "imports kloom_fixture_absent_backend, which is not installed here"
    assert reasons["notes_on_level1.py"].startswith("no problem id")

    found, problems = discover(tmp_path / "suite")
    assert problems == []
    assert sorted(w.name for w in found) == sorted(w.name for w in report.imported)
    for info in found:
        assert info.world_sizes == (1,) and info.family == "single_gpu"
        # The suite reads the checkout's own file: same content, same hash.
        origin = next(w.origin for w in report.imported if w.name == info.name)
        assert info.sha256 == inspect_workload(origin).sha256
    index = read_index(tmp_path / "suite")
    assert index["source"] == "kernelbench" and len(index["imported"]) == 3 and len(index["rejected"]) == 4


def test_one_level_goes_to_its_default_directory_and_reimports_replace_it(kernelbench_checkout, cache):
    report = import_kernelbench(kernelbench_checkout, level=2)
    out = cache / "suites" / "kernelbench-level2"
    assert Path(report.out_dir) == out.resolve()
    assert [w.name for w in report.imported] == ["level2_1_Gemm_ReLU"] and report.rejected == []

    (kernelbench_checkout / "KernelBench" / "level2" / "1_Gemm_ReLU.py").rename(kernelbench_checkout / "KernelBench" / "level2" / "2_Gemm_ReLU.py")
    again = import_kernelbench(kernelbench_checkout, level=2)
    assert [w.name for w in again.imported] == ["level2_2_Gemm_ReLU"]
    assert [w.name for w in discover(out)[0]] == ["level2_2_Gemm_ReLU"]  # the old link is gone

    with pytest.raises(ImporterError, match="has no level 7"):
        import_kernelbench(kernelbench_checkout, level=7)


def test_a_directory_of_other_workloads_is_not_overwritten(kernelbench_checkout, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my_workload.py").write_text("x = 1\n")
    with pytest.raises(ImporterError, match="no import wrote"):
        import_kernelbench(kernelbench_checkout, out_dir=mine)
    with pytest.raises(ImporterError, match="not a KernelBench checkout"):
        import_kernelbench(tmp_path, out_dir=tmp_path / "out")

    # A re-import removes only what the last import wrote inside its own directory.
    outside = tmp_path / "keep.py"
    outside.write_text("x = 1\n")
    suite = tmp_path / "suite"
    import_kernelbench(kernelbench_checkout, level=2, out_dir=suite)
    index = json.loads((suite / "kloom-import.json").read_text())
    index["imported"].append({"path": str(outside)})
    (suite / "kloom-import.json").write_text(json.dumps(index))
    import_kernelbench(kernelbench_checkout, level=2, out_dir=suite)
    assert outside.exists() and (kernelbench_checkout / "KernelBench" / "level2" / "1_Gemm_ReLU.py").exists()


def test_imported_problems_evaluate_through_the_evaluator(kernelbench_checkout, tmp_path, evaluator):
    report = import_kernelbench(kernelbench_checkout, level=1, out_dir=tmp_path / "suite")
    workload = next(w.path for w in report.imported if w.name == "level1_1_Square_matmul")
    result = evaluator.evaluate(workload, CANDIDATES / "kb_square_matmul.py", world_size=1)
    assert result.status == "correct", result.error
    assert result.timing.reference_ms > 0 and result.timing.candidate_ms > 0

    softmax = next(w.path for w in report.imported if w.name == "level1_2_Scaled_softmax")
    wrong = evaluator.evaluate(softmax, CANDIDATES / "kb_square_matmul.py", world_size=1)
    assert wrong.status != "correct"


def test_import_command_prints_both_lists_as_json(kernelbench_checkout, tmp_path):
    suite = typer.Typer()
    register_import(suite)
    result = CliRunner().invoke(suite, ["import", "kernelbench", str(kernelbench_checkout), "--level", "1", "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [w["name"] for w in data["imported"]] == ["level1_1_Square_matmul", "level1_2_Scaled_softmax"]
    assert len(data["rejected"]) == 4 and all(r["reason"] for r in data["rejected"])

    table = CliRunner().invoke(suite, ["import", "kernelbench", str(kernelbench_checkout), "--level", "1", "--out", str(tmp_path / "s")])
    assert table.exit_code == 0 and "2 imported, 4 rejected" in table.output

    bad = CliRunner().invoke(suite, ["import", "kernelbench", str(tmp_path / "nowhere"), "--out", str(tmp_path / "t")])
    assert bad.exit_code == 2 and "not a KernelBench checkout" in bad.output


def test_kloom_suite_import_is_part_of_the_kloom_command(kernelbench_checkout, tmp_path):
    pytest.importorskip("kloom.cli.suite_cmd")
    from kloom.cli import app

    result = CliRunner().invoke(app, ["suite", "import", "kernelbench", str(kernelbench_checkout), "--level", "2", "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    assert [w["name"] for w in json.loads(result.output)["imported"]] == ["level2_1_Gemm_ReLU"]
