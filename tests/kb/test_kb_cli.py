"""``kloom kb`` on a knowledge base found through kloom's settings (KLOOM_DATABASE_URL)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kb import ingest as kb_ingest
from kloom.cli import app
from tests.kb.kb_trajectories import Tried, Workload, trajectory
from tests.kb.test_kb_export import WORKLOAD_SOURCE, ingest_real_kernel


def fill(sessions) -> None:
    moe = Workload(name="moe_dispatch", family="expert_parallel", collectives=("all_to_all_single",), ops=("aten::sort",))
    for traj in (
        trajectory("job-a", Workload(), [Tried("overlap_chunks", {"chunks": 4}, speedup=2.4, profile="AllGather 12% exposed"), Tried("symm_mem", status="crashed")]),
        trajectory("job-b", moe, [Tried("cuda_graph", speedup=1.3)]),
    ):
        with sessions() as s:
            kb_ingest.ingest(s, traj)


def test_search_show_and_export_through_settings(sqlite_db, tmp_path, monkeypatch):
    monkeypatch.setenv("KLOOM_DATABASE_URL", sqlite_db.url)
    fill(sqlite_db.sessions)
    exported_id = ingest_real_kernel(sqlite_db.sessions)
    runner = CliRunner(env={"COLUMNS": "200"})  # tables as wide as a terminal would show them

    result = runner.invoke(app, ["kb", "search", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["speedup"] for r in rows] == [2.4, 1.6, 1.3]

    result = runner.invoke(app, ["kb", "search", "moe", "--family", "expert_parallel", "--json"])
    [row] = json.loads(result.output)
    assert (row["workload_name"], row["strategy"]) == ("moe_dispatch", "cuda_graph") and row["score"] > 0

    result = runner.invoke(app, ["kb", "search", "overlap"])
    assert result.exit_code == 0 and "overlap_chunks" in result.output and "moe_dispatch" not in result.output
    assert "no kernel matches" in runner.invoke(app, ["kb", "search", "attention"]).output

    top = rows[0]["id"]
    result = runner.invoke(app, ["kb", "show", top, "--json"])
    shown = json.loads(result.output)
    assert shown["id"] == top and shown["code"].startswith("# overlap_chunks") and shown["evaluation"]["status"] == "correct"
    assert "2.40x" in runner.invoke(app, ["kb", "show", top]).output

    strategies = json.loads(runner.invoke(app, ["kb", "strategies", "--json"]).output)
    overlap = next(s for s in strategies if s["strategy"] == "overlap_chunks")
    result = runner.invoke(app, ["kb", "show", overlap["id"], "--json"])
    detail = json.loads(result.output)
    assert detail["wins"] == 1 and detail["evidence"][0]["profile"] == "AllGather 12% exposed"
    assert "evidence" in runner.invoke(app, ["kb", "show", overlap["id"]]).output

    assert runner.invoke(app, ["kb", "show", "k9999"]).exit_code == 1
    assert runner.invoke(app, ["kb", "show", "s9999"]).exit_code == 1

    out = tmp_path / "module"
    result = runner.invoke(app, ["kb", "export", exported_id, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "workload.py").read_text() == WORKLOAD_SOURCE and (out / "test_kernel.py").is_file()
    # A kernel whose workload source was never kept says so.
    result = runner.invoke(app, ["kb", "export", top, "--out", str(tmp_path / "other")])
    assert result.exit_code == 1 and "was not kept" in result.output
