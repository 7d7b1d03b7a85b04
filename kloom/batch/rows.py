"""One workload's line of a batch report (``ReportRow``), built from its trajectory, and the
profiles kept beside a batch that tell what bounds its best kernel.

The row is the typed record that the report, the aggregates (``aggregate.py``), the API's batch
summary and the dashboard read; it becomes JSON only in ``report.json`` and the API's answers
(``to_dict``), and is typed again where a stored report is read (``from_dict``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.records import Trajectory
from kloom.profile import Profile
from kloom.profile_summary import summarise
from kloom.speedup import FASTER, measured

#: Where a batch directory keeps profiles taken after the batch (``benchmarks/profile_gpu.py
#: --best-under-floor DIR`` writes there), matched to a job's best step by candidate hash.
PROFILES_DIR = "profiles"
#: (workload, world size, candidate sha256) -> (file name, profile): what ``profile_records`` finds.
ProfileRecords = dict[tuple[str, int, str], tuple[str, Profile]]


@dataclass
class ReportRow:
    """One workload of a batch: its job's state, its best kernel's measurement and roofline share,
    and what it cost. The fields, in this order, are a row of ``report.json``."""

    workload: str
    family: str
    state: str
    stop_reason: str = ""
    steps: int = 0
    correct: bool = False
    #: What the job found (``Trajectory.outcome``); "" where a row does not know it.
    outcome: str = ""
    #: The reference timed alone, before any candidate (not the time the speedup divides).
    baseline_ms: float | None = None
    #: The two times the speedup divides, from the same (interleaved) measurement.
    reference_ms: float | None = None
    best_ms: float | None = None
    #: The job's result: the best kernel's speedup when it is a measurable win, else 1.0 (the
    #: reference stands); the best kernel's own measurement beside it.
    speedup: float | None = None
    measured_speedup: float | None = None
    speedup_ci: list[float] | None = None
    ci_from: str | None = None
    verdict: str | None = None
    #: The job's side bias (``Trajectory.self_bias``: the reference against its own copy), which
    #: the verdict allowed for; 0 where no copy was timed.
    self_bias: float = 0.0
    floor_ms: float | None = None
    dominant: str | None = None
    fraction_of_floor: float | None = None
    baseline_fraction_of_floor: float | None = None
    strategy: str | None = None
    cost_usd: float | None = None
    tokens: int = 0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    flags: list[str] = field(default_factory=list)
    bottleneck: str = ""
    #: Why the reference could not be traced: its job was planned without the structure.
    trace_error: str = ""
    #: The service's job (the API's rows); not part of a row that has none.
    job_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not self.job_id:
            del data["job_id"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ReportRow":
        """A stored row; rows of reports written before a field existed read it as those reports
        counted: the measured speedup as the speedup, the outcome as a win (before issue 21)."""
        known = {f.name for f in dataclasses.fields(cls)}
        raw = {k: v for k, v in data.items() if k in known}
        raw.setdefault("measured_speedup", data.get("speedup"))
        raw.setdefault("outcome", FASTER)
        return cls(**raw)


def report_row(traj: Trajectory, records: ProfileRecords | None = None) -> ReportRow:
    """One workload's line of a batch report (shared by ``kloom bench`` and the API)."""
    best = traj.best_step
    m = measured(best.timing, traj.self_bias) if best else None
    baseline = traj.baseline
    roofline = baseline.roofline if baseline else None
    ws = traj.job.world_size
    seconds = baseline.phase_seconds.get("total", 0.0) if baseline else 0.0
    seconds += sum(s.seconds.get("verify", 0.0) for s in traj.steps)
    return ReportRow(
        workload=traj.workload_name,
        family=traj.workload_family,
        state=traj.state,
        stop_reason=traj.stop_reason,
        steps=len(traj.steps),
        correct=best is not None,
        outcome=traj.outcome,
        baseline_ms=baseline.reference_ms if baseline else None,
        reference_ms=m.reference_ms if m else None,
        best_ms=m.candidate_ms if m else None,
        speedup=traj.result_speedup,
        measured_speedup=m.speedup if m else None,
        speedup_ci=[m.low, m.high] if m and m.low is not None else None,
        ci_from=m.interval_from if m else None,
        verdict=m.verdict if m else None,
        self_bias=traj.self_bias,
        floor_ms=roofline.floor_ms if roofline else None,
        dominant=roofline.dominant if roofline else None,
        fraction_of_floor=best.fraction_of_floor if best else None,
        baseline_fraction_of_floor=roofline.reference_fraction if roofline else None,
        strategy=best.plan.strategy if best else None,
        cost_usd=traj.usage.cost_usd,
        tokens=traj.usage.tokens,
        gpu_seconds=seconds * ws if traj.job.device == "cuda" else 0.0,
        wall_seconds=seconds,
        flags=sorted({f for s in traj.steps if s.correct and s.evaluation for f in s.evaluation.flags}),
        bottleneck=_bottleneck(traj, records),
        trace_error=traj.analysis.trace_error if traj.analysis else "",
    )


def profile_records(out: str | Path) -> ProfileRecords:
    """Profiles of candidates kept under ``out/profiles``: (workload, world size, candidate sha256)
    -> (file name, profile). A profile of every rank is preferred to one of rank 0; a file that
    holds no readable profile is skipped."""
    found: ProfileRecords = {}
    for path in sorted(Path(out, PROFILES_DIR).glob("*.json"), key=lambda p: "ranks-all" in p.name):
        try:
            stored = json.loads(path.read_text()).get("profile")
            profile = Profile.from_dict(stored) if stored else None
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        if profile is not None and profile.candidate_sha256 and profile.summary:
            name = Path(profile.workload).stem  # profiles name the workload by its file
            found[(name, profile.world_size, profile.candidate_sha256)] = (path.name, profile)
    return found


def _summary_line(profile: Profile) -> str:
    """A profile's summary on one line, written again by today's summariser (older profiles gain
    the verdict line) where it can read the record, else as stored."""
    try:
        summary = summarise(profile)
    except (TypeError, ValueError, KeyError, AttributeError):
        summary = profile.summary
    return ". ".join(summary.splitlines())


def _bottleneck(traj: Trajectory, records: ProfileRecords | None = None) -> str:
    """What the best (or last) step's profile says bounds the kernel, in a line; else a profile
    of the best kernel taken after the batch (``records``: ``profile_records``)."""
    best = traj.best_step
    for step in ([best] if best else []) + list(reversed(traj.steps)):
        if step.profile is not None and step.profile.summary:
            return _summary_line(step.profile)
    if best and records:
        hit = records.get((traj.workload_name, traj.job.world_size, best.candidate_sha256))
        if hit:
            return f"profile of the best kernel ({PROFILES_DIR}/{hit[0]}): {_summary_line(hit[1])}"
    if traj.analysis is not None and traj.analysis.dominant:
        return f"no profile; the roofline says {traj.analysis.dominant}-bound"
    return "no profile recorded"
