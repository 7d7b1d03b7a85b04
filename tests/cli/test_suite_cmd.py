"""``kloom suite list`` and ``kloom suite show``, through the real command line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kloom.cli import app

runner = CliRunner()


def test_list_json_has_every_family_and_its_metadata():
    result = runner.invoke(app, ["suite", "list", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["problems"] == []
    by_name = {w["name"]: w for w in payload["workloads"]}
    ring = by_name["cp_ring_attention"]
    assert ring["family"] == "context_parallel"
    assert ring["world_sizes"] == [2, 4, 8]
    assert ring["has_roofline"] and ring["description"]
    for family in ("collectives", "tensor_parallel", "sequence_parallel", "context_parallel"):
        assert any(w["family"] == family for w in payload["workloads"]), family


def test_list_filters_by_family():
    result = runner.invoke(app, ["suite", "list", "--family", "sequence_parallel", "--json"])
    assert result.exit_code == 0, result.output
    families = {w["family"] for w in json.loads(result.stdout)["workloads"]}
    assert families == {"sequence_parallel"}


def test_list_table_names_the_workloads():
    result = runner.invoke(app, ["suite", "list", "-f", "collectives"])
    assert result.exit_code == 0, result.output
    assert "all_reduce_small" in result.stdout and "all_to_all" in result.stdout
    assert "cp_ring_attention" not in result.stdout


def test_list_rejects_an_unknown_family():
    result = runner.invoke(app, ["suite", "list", "--family", "warp_parallel"])
    assert result.exit_code != 0
    assert "not a family" in result.output


def test_list_of_a_missing_suite_directory_fails(tmp_path):
    result = runner.invoke(app, ["suite", "list", "--suite", str(tmp_path / "nowhere")])
    assert result.exit_code == 1


def test_show_prints_metadata_shapes_and_source():
    result = runner.invoke(app, ["suite", "show", "tp_allgather_gemm"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "tensor_parallel" in result.stdout
    assert "dict(tokens=8192, hidden=8192, ffn=28672, dtype=torch.bfloat16)" in result.stdout
    assert "dist.all_gather_into_tensor(x, x_shard)" in result.stdout


def test_show_json_carries_the_shape_profiles_and_code():
    result = runner.invoke(app, ["suite", "show", "cp_flash_decode", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["name"] == "cp_flash_decode"
    assert set(shown["shapes"]) == {"ci", "gpu"}
    assert "context=131072" in shown["shapes"]["gpu"]
    assert "class Model" in shown["code"]


def test_show_of_an_unknown_workload_fails_with_the_known_names():
    result = runner.invoke(app, ["suite", "show", "no_such_workload"])
    assert result.exit_code == 1
    assert "no workload named 'no_such_workload'" in result.output


def test_list_piped_is_plain_tab_separated_lines_with_whole_descriptions():
    # CliRunner's stdout is not a terminal, as a pipe is not.
    result = runner.invoke(app, ["suite", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "name\tfamily\tworld_sizes\tdescription"
    assert not any(ch in result.stdout for ch in "┃│━─┏┡└…")
    listed = json.loads(runner.invoke(app, ["suite", "list", "--json"]).stdout)["workloads"]
    assert len(lines) == 1 + len(listed)
    for line, w in zip(lines[1:], listed):
        name, family, sizes, description = line.split("\t")
        assert (name, family, sizes) == (w["name"], w["family"], ",".join(map(str, w["world_sizes"])))
        assert description == " ".join(w["description"].split())
