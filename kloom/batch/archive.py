"""A committed batch's trajectories, kept as one compressed archive instead of a folder per job.

A batch directory written by the runner holds ``jobs/<workload>/trajectory.json`` and
``best_kernel.py`` (a copy of the best step's code, which the trajectory also holds). Once the
batch is finished and committed under ``results/``, ``archive_batch`` packs every trajectory
into ``trajectories.jsonl.xz`` (one JSON trajectory a line, sorted by workload) and leaves in each
job's folder a small ``manifest.json``: the workload's hash, the best step's strategy and
parameters, its speedup, the hardware and the commit that holds the results. The report, its
plots and the command stay as they are; ``load_trajectories`` reads either layout, so
``kloom bench report`` writes the same report from the archive.
"""

from __future__ import annotations

import json
import lzma
import subprocess
from pathlib import Path
from typing import Any

from agents.records import Trajectory

ARCHIVE = "trajectories.jsonl.xz"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
#: What the runner writes per job and the archive replaces.
_JOB_FILES = ("trajectory.json", "best_kernel.py")


class ArchiveError(ValueError):
    """A batch that cannot be archived (or read back); the message says why."""


def _job_files(out: Path) -> list[Path]:
    return sorted(out.glob("jobs/*/trajectory.json"))


def _archived(out: Path) -> list[dict[str, Any]]:
    path = out / ARCHIVE
    if not path.is_file():
        return []
    try:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (lzma.LZMAError, EOFError, ValueError) as exc:
        raise ArchiveError(f"{path} is not a readable trajectory archive: {exc}") from exc


def trajectory_dicts(out: str | Path) -> list[dict[str, Any]]:
    """The batch's saved trajectories as stored, sorted by workload: each job folder's
    ``trajectory.json`` where there is one, else the archive's line for that workload."""
    out = Path(out)
    found = {path.parent.name: json.loads(path.read_text()) for path in _job_files(out)}
    for record in _archived(out):
        found.setdefault(str(record.get("workload_name")), record)
    return [found[name] for name in sorted(found)]


def load_trajectories(out: str | Path) -> list[Trajectory]:
    """The batch's trajectories (live job folders or the archive of a committed batch)."""
    return [Trajectory.from_dict(d) for d in trajectory_dicts(out)]


def best_kernel(out: str | Path, workload: str) -> str | None:
    """The best candidate's code of a workload's job in the batch, or None if it has none."""
    path = Path(out, "jobs", workload, "best_kernel.py")
    if path.is_file():
        return path.read_text()
    for record in trajectory_dicts(out):
        if record.get("workload_name") == workload:
            best = Trajectory.from_dict(record).best_step
            return best.candidate_code if best is not None and best.candidate_code else None
    return None


def manifest(traj: Trajectory, commit: str | None) -> dict[str, Any]:
    """What a job's folder keeps once its trajectory is archived."""
    best = traj.best_step
    environment = traj.baseline.environment if traj.baseline else {}
    hardware = {k: environment[k] for k in ("gpu", "gpu_memory_gib", "sm_count", "cuda", "torch", "triton", "python", "backend") if k in environment}
    return {
        "version": MANIFEST_VERSION,
        "workload": traj.workload_name,
        "family": traj.workload_family,
        "workload_sha256": traj.workload_sha256,
        "world_size": traj.job.world_size,
        "device": traj.job.device,
        "state": traj.state,
        "steps": len(traj.steps),
        "strategy": best.plan.strategy if best else None,
        "params": best.plan.params if best else None,
        "candidate_sha256": best.candidate_sha256 if best else None,
        "speedup": traj.best_speedup,
        "hardware": hardware,
        "commit": commit,
        "archive": ARCHIVE,
    }


def results_commit(out: Path) -> str | None:
    """The last commit that changed the batch directory (the one that committed its results), or
    None outside a git checkout or for files never committed."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%H", "--", "."], cwd=out, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None


def archive_batch(out: str | Path, commit: str | None = None) -> dict[str, Any]:
    """Packs the batch's job trajectories into ``ARCHIVE`` and writes each job's manifest, then
    removes the per-job ``trajectory.json`` and ``best_kernel.py`` (only after the archive reads
    back to the same trajectories). ``commit``: the commit recorded in the manifests (default: the
    last one that changed the directory). Returns what it did."""
    out = Path(out)
    if not (out / "batch.json").is_file():
        raise ArchiveError(f"{out} is not a batch directory (no batch.json)")
    live = {path.parent.name: json.loads(path.read_text()) for path in _job_files(out)}
    if not live:
        raise ArchiveError(f"{out} has no job trajectories to archive (jobs/*/trajectory.json)")
    for name, record in live.items():
        if record.get("workload_name") != name:
            raise ArchiveError(f"{out}/jobs/{name} holds the trajectory of {record.get('workload_name')!r}")
        if record.get("state") not in ("succeeded", "failed", "cancelled", "stopped"):
            raise ArchiveError(f"the job of {name} has not finished (state {record.get('state')!r}): archive a finished batch")
    merged = {str(r.get("workload_name")): r for r in _archived(out)} | live
    commit = commit or results_commit(out)
    lines = [json.dumps(merged[name], separators=(",", ":")) + "\n" for name in sorted(merged)]
    tmp = out / (ARCHIVE + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as f:
        f.writelines(lines)
    tmp.replace(out / ARCHIVE)
    if {str(r.get("workload_name")): r for r in _archived(out)} != merged:
        raise ArchiveError(f"{out / ARCHIVE} does not read back to the trajectories it was written from")
    for name, record in live.items():
        folder = out / "jobs" / name
        (folder / MANIFEST).write_text(json.dumps(manifest(Trajectory.from_dict(record), commit), indent=1) + "\n")
        for file in _JOB_FILES:
            (folder / file).unlink(missing_ok=True)
    return {"archive": str(out / ARCHIVE), "jobs": sorted(live), "commit": commit}
