"""A committed batch keeps one trajectory archive and a manifest per job, not a copy of each job's
code: archiving a batch leaves its report as it was, and `kloom bench report` reads the archive."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kloom.batch.archive import ARCHIVE, ArchiveError, archive_batch, best_kernel, trajectory_dicts
from kloom.batch.report import build_report
from kloom.batch.plan import BatchSettings
from kloom.batch.runner import _check_same_batch
from kloom.cli import app

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "results" / "gpu" / "h200x4-ws4-r2"


@pytest.fixture
def live(tmp_path) -> Path:
    """The committed batch as the runner leaves it: a folder per job with its trajectory.json and
    best_kernel.py (rebuilt from the archive)."""
    out = tmp_path / "batch"
    shutil.copytree(BATCH, out, ignore=shutil.ignore_patterns("*.png", ARCHIVE, "manifest.json"))
    for record in trajectory_dicts(BATCH):
        folder = out / "jobs" / record["workload_name"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trajectory.json").write_text(json.dumps(record, indent=1))
        code = best_kernel(BATCH, record["workload_name"])
        if code:
            (folder / "best_kernel.py").write_text(code)
    return out


def test_the_committed_batches_keep_archives_and_manifests_only():
    for archive in sorted((ROOT / "results").rglob(ARCHIVE)):
        batch = archive.parent
        assert not list(batch.glob("jobs/*/trajectory.json")) and not list(batch.glob("jobs/*/best_kernel.py"))
        names = {p.parent.name for p in batch.glob("jobs/*/manifest.json")}
        assert names == {r["workload_name"] for r in trajectory_dicts(batch)}
    assert (BATCH / ARCHIVE).is_file()


def test_archiving_leaves_the_report_as_it_was(live):
    before = build_report(live)
    done = archive_batch(live, commit="a" * 40)
    assert len(done["jobs"]) == 36 and not list(live.glob("jobs/*/trajectory.json")) and not list(live.glob("jobs/*/best_kernel.py"))
    assert build_report(live) == before
    manifest = json.loads((live / "jobs" / "tp_gemm_allreduce" / "manifest.json").read_text())
    row = next(r for r in before.rows if r.workload == "tp_gemm_allreduce")
    assert manifest["speedup"] == row.speedup and manifest["strategy"] == row.strategy and manifest["commit"] == "a" * 40
    assert len(manifest["workload_sha256"]) == 64 and manifest["hardware"]["gpu"] == "NVIDIA H200" and manifest["world_size"] == 4 and isinstance(manifest["params"], dict)


def test_the_report_command_reads_the_archive(live):
    # Today's report of the job folders (the committed report.json predates how results read
    # since issue 21: measurable fast_p, intervals), then the same from the archive alone.
    before = build_report(live)
    archive_batch(live, commit="b" * 40)
    result = CliRunner().invoke(app, ["bench", "report", str(live), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["aggregate"] == before.aggregate.to_dict() and before.aggregate.workloads == 36


def test_an_archived_batch_does_not_resume_and_unfinished_or_broken_ones_are_refused(live, tmp_path):
    settings = BatchSettings(**{k: v for k, v in json.loads((live / "batch.json").read_text()).items()})
    record = json.loads((live / "jobs" / "all_gather" / "trajectory.json").read_text())
    (live / "jobs" / "all_gather" / "trajectory.json").write_text(json.dumps({**record, "state": "running"}))
    with pytest.raises(ArchiveError, match="has not finished"):
        archive_batch(live)
    (live / "jobs" / "all_gather" / "trajectory.json").write_text(json.dumps(record))
    archive_batch(live)
    with pytest.raises(ValueError, match="archived batch"):
        _check_same_batch(live, settings)
    (live / ARCHIVE).write_bytes(lzma.compress(b"{not json\n"))
    with pytest.raises(ArchiveError, match="not a readable trajectory archive"):
        build_report(live)
    with pytest.raises(ArchiveError, match="no batch.json"):
        archive_batch(tmp_path)
