"""The batch report built from a real batch (the committed 4xH200 world-size-4 run): its aggregates,
and the under-the-floor list naming what a profile of the best kernel says bounds it when such a
profile was taken after the batch (matched by candidate hash, never by name alone)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
from pathlib import Path

import pytest

from kloom.batch.archive import best_kernel
from kloom.batch.report import BatchReport, build_report, compare, to_markdown
from kloom.batch.rows import ReportRow

ROOT = Path(__file__).resolve().parents[2]
BATCH = ROOT / "results" / "gpu" / "h200x4-ws4-r2"
PROFILE = ROOT / "results" / "profiles" / "h200x4-ws4" / "causal_conv1d_cp.candidate.ranks-0.json"


@pytest.fixture
def batch(tmp_path) -> Path:
    copy = tmp_path / "batch"
    # Without the profiles taken after the batch: the tests put their own there.
    shutil.copytree(BATCH, copy, ignore=shutil.ignore_patterns("*.png", "*.log", "profiles"))
    return copy


def _row(report: BatchReport, name: str) -> ReportRow:
    return next(r for r in report.rows if r.workload == name)


def test_the_report_of_the_committed_batch_has_its_aggregates(batch):
    report = build_report(batch)
    committed = json.loads((BATCH / "report.json").read_text())
    a, c = report.to_dict()["aggregate"], committed["aggregate"]
    for key in ("workloads", "finished", "correct", "correctness_rate", "median_fraction_of_floor", "total_gpu_hours", "total_tokens"):
        assert a[key] == c[key], key
    # That report counted every speedup above p; fast_p now counts measurable wins only (issue 21),
    # and fast_1 counted the old way is given beside it.
    assert a["fast_1_any"] == c["fast_p"]["1.0"]
    assert all(a["fast_p"][p] <= c["fast_p"][p] for p in c["fast_p"])
    assert a["faster_kernel_found"] == round(a["fast_p"]["1.0"] * a["workloads"])
    assert len(report.rows) == 36 and report.aggregate.correctness_rate == 1.0


def test_a_job_planned_without_a_trace_is_named(batch):
    """In that batch the tracer could not follow cp_allgather_kv_attention's CausalBias (since
    fixed): the report says its job was planned without the structure, and names no other."""
    report = build_report(batch)
    assert [r.workload for r in report.rows if r.trace_error] == ["cp_allgather_kv_attention"]
    text = to_markdown(report)
    section = text.split("## Planned without a trace of the reference")[1]
    assert "**cp_allgather_kv_attention**" in section and "CausalBias" in section


def test_a_profile_of_the_best_kernel_names_the_bound(batch):
    before = _row(build_report(batch), "causal_conv1d_cp")
    assert before.bottleneck.startswith("no profile")
    (batch / "profiles").mkdir()
    shutil.copy(PROFILE, batch / "profiles" / PROFILE.name)
    row = _row(build_report(batch), "causal_conv1d_cp")
    assert row.bottleneck.startswith(f"profile of the best kernel (profiles/{PROFILE.name}): bound by its top kernel, triton_poi_fused")
    assert "communication 5% of GPU busy time" in row.bottleneck
    assert _row(build_report(batch), "distributed_sort").bottleneck.startswith("no profile")


def test_a_profile_of_another_kernel_is_not_taken_for_the_best(batch):
    record = json.loads(PROFILE.read_text())
    record["profile"]["candidate_sha256"] = "0" * 64
    (batch / "profiles").mkdir()
    (batch / "profiles" / "x.json").write_text(json.dumps(record))
    (batch / "profiles" / "broken.json").write_text("{not json")
    assert _row(build_report(batch), "causal_conv1d_cp").bottleneck.startswith("no profile")


@pytest.fixture
def profile_gpu():
    """benchmarks/profile_gpu.py as a module (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("profile_gpu", ROOT / "benchmarks" / "profile_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_gpu_picks_the_best_kernels_under_the_floor(batch, profile_gpu):
    module = profile_gpu
    args = module._args(["--best-under-floor", str(batch), "--out", str(batch / "profiles")])
    jobs = module._batch_jobs(args)
    report = json.loads((BATCH / "report.json").read_text())
    under = {r["workload"] for r in report["rows"] if r["correct"] and r["fraction_of_floor"] < 0.5}
    assert {name for name, _, _ in jobs} == under and len(under) == 17
    # The committed batch keeps its kernels in its archive: each is written out to be profiled.
    assert all(candidate == str(batch / "profiles" / "kernels" / name / "best_kernel.py") for name, _, candidate in jobs)
    assert all(Path(candidate).read_text() == best_kernel(batch, name) for name, _, candidate in jobs)
    assert args.world_size == 4, "the batch's world size"
    assert args.evaluate is None and {Path(k).parent.name for k in args.batch_rows} == under, "the batch's rows stand in for an evaluation"
    assert all(row["best_ms"] > 0 for row in args.batch_rows.values())


def test_profile_gpu_shards_split_the_list_and_a_summary_only_run_writes_the_whole_summary(batch, tmp_path, profile_gpu):
    module = profile_gpu
    out = tmp_path / "profiles"
    out.mkdir()
    command = ["--best-under-floor", str(batch), "--device", "cpu", "--out", str(out)]
    names = [name for name, _, _ in module._batch_jobs(module._args(command))]
    # Every job "profiled earlier" by one of two shards: the records that a GPU run would leave.
    record = json.loads(PROFILE.read_text())
    names, missing = names[:-1], names[-1]  # the last one never profiled: the summary goes without it
    for i, name in enumerate(names):
        (out / f"{name}.candidate.ranks-0.json").write_text(json.dumps({**record, "row": f"| {name} | shard {i % 2} |", "text": f"## {name}\n"}))
    handler = signal.getsignal(signal.SIGTERM)
    assert module.main(command + ["--shard", "1/2"]) == 0
    shard = (out / "summary.shard-1-of-2.md").read_text()
    assert all((f"| {name} |" in shard) == (i % 2 == 1) for i, name in enumerate(names))
    assert not (out / "summary.md").exists()
    assert module.main(command + ["--summary-only"]) == 0
    assert signal.getsignal(signal.SIGTERM) is handler, "the script's SIGTERM handler outlived its run"
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} |" in summary for name in names) and f"| {missing} |" not in summary
    assert sorted(p.name for p in out.glob("*.json")) == sorted(f"{name}.candidate.ranks-0.json" for name in names)


def test_profile_gpu_stopped_by_sigterm_leaves_no_rank_running(tmp_path):
    import subprocess
    import sys
    import time

    from kloom.processes import descendants

    cmd = [sys.executable, str(ROOT / "benchmarks" / "profile_gpu.py"), "--device", "cpu", "--world-size", "2",
           "--workloads", "tp_allgather_gemm,all_reduce_large", "--no-evaluate", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        ranks = [pid for pid in descendants(proc.pid) if "services.worker.profiler.rank" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
        if ranks:
            seen.update(descendants(proc.pid))
            break
        time.sleep(0.05)
    assert seen, "the rank processes of the first profile were never seen"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM

    def alive() -> list[int]:
        return [pid for pid in seen if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"]

    # The ranks run in the sandbox's pid namespace: killing its first process has the kernel kill
    # the rest, which takes a moment; a rank left behind would still be there after 10 s.
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), f"left running after SIGTERM: {alive()}"


def test_a_report_reads_back_as_it_was_written_and_an_older_one_as_it_counted(batch):
    report = build_report(batch)
    stored = json.loads(json.dumps(report.to_dict()))
    assert BatchReport.from_dict(stored).to_dict() == stored and "job_id" not in stored["rows"][0]
    # The committed report predates outcomes and intervals: its rows read as the wins it counted.
    committed = BatchReport.from_dict(json.loads((BATCH / "report.json").read_text()))
    old = _row(committed, "causal_conv1d_cp")
    assert old.outcome == "faster kernel found" and old.measured_speedup == old.speedup and committed.aggregate.fast_1_any is None
    diff = compare(committed, report)
    assert {w.workload for w in diff.workloads} == {r.workload for r in report.rows}
    assert diff.aggregate["correctness_rate"] == (1.0, 1.0)
