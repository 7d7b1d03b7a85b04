"""What an evaluation found: the typed records the evaluator returns, one ``EvalResult`` per
candidate evaluation and one ``BaselineResult`` per reference timed alone.

They live in the core, beside the roofline's record they hold, because every layer reads them:
the evaluator writes them, a job's ``Step`` and ``Trajectory`` (``agents.records``) keep them,
the knowledge base, the reports and the service read them. Plain dataclasses importing the
standard library alone (no pydantic, no torch), so that the evaluator runs on images with torch
alone and ``agents.records`` stays importable anywhere.

Every record round-trips through ``to_dict`` / ``from_dict`` as JSON. ``from_dict`` reads the
records older versions wrote: a field a record gained since (``memory``, ``evaluator_version``,
the interleaved timing's fields) is absent there and reads as its default, which is what it
meant when it was written; written back, the record has it at that default.
"""

from __future__ import annotations

import dataclasses
import statistics
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from kloom.roofline.model import RooflineRecord
from kloom.tuning import TunedConfig

Status = Literal[
    "correct",
    "incorrect",
    "compile_error",
    "runtime_error",
    "crashed",
    "timeout",
    "rejected",
    "workload_error",
    # The evaluator's device-memory limit leaves no room for the reference, the candidate and
    # one copy of the outputs (the numbers in the error): not the workload's fault.
    "resource_limit",
    # Ended from outside (``Evaluator.abort``: a cancel or a job's wall-time limit).
    "stopped",
]
#: Statuses after which the rank processes cannot be trusted and are rebuilt.
POOL_KILLING = frozenset({"runtime_error", "crashed", "timeout", "rejected", "workload_error", "resource_limit", "stopped"})
RECORD_VERSION = 1
#: The judge that wrote a record: "1" ran the candidate in the reference's process; "2" keeps
#: them in separate pools, compares on the reference's side and checks the candidate's clock
#: against its own (``kb/admission`` stores it with every kept kernel).
EVALUATOR_VERSION = "2"


@dataclass
class TimeStats:
    """Per-rank timing of one function, in milliseconds."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float
    stdev_ms: float
    iters: int

    @classmethod
    def from_samples(cls, samples: list[float]) -> "TimeStats":
        ordered = sorted(samples)
        n = len(ordered)

        def q(frac: float) -> float:
            return ordered[min(n - 1, max(0, round(frac * (n - 1))))]

        return cls(
            median_ms=statistics.median(ordered),
            mean_ms=statistics.fmean(ordered),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            p10_ms=q(0.1),
            p90_ms=q(0.9),
            stdev_ms=statistics.pstdev(ordered) if n > 1 else 0.0,
            iters=n,
        )

    @property
    def spread(self) -> float:
        """Relative spread (p90 - p10) / median."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0


@dataclass
class OutputCheck:
    """How one rank's outputs in one trial compared with the reference's."""

    rank: int
    ok: bool
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    mismatched: int = 0
    numel: int = 0
    message: str = ""


@dataclass
class TrialRecord:
    trial: int
    seed: int
    phase: Literal["correctness", "post_timing", "timed"]  # timed: a timing round's last call (recorded when wrong)
    ok: bool
    ranks: list[OutputCheck] = field(default_factory=list)


@dataclass
class ErrorInfo:
    kind: str
    message: str
    rank: int | None = None
    phase: str = ""
    traceback: str = ""
    log_tail: str = ""


@dataclass
class TimingRecord:
    reference: list[TimeStats]
    candidate: list[TimeStats]
    reference_ms: float
    candidate_ms: float
    speedup: float
    reference_after: list[TimeStats] | None = None
    #: Interleaved timing: ``reference`` was timed call by call beside the candidate, and this is
    #: the reference timed alone before any candidate code was imported.
    reference_alone: list[TimeStats] | None = None
    interleaved: bool = False
    clock: Literal["cuda_events", "wall"] = "wall"
    #: 95% interval of ``speedup`` from the interleaved samples (``kloom.speedup.paired_interval``);
    #: None where it was not computed (reports then estimate one from the statistics above).
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    #: The candidate's own clock checked against the judge's (``None`` for the reference alone).
    clock_check: "ClockCheck | None" = None
    #: What ``reference_ms`` and ``candidate_ms`` are: each side's slowest rank's median call, or
    #: its mean where the candidate's calls were skewed past the reference's
    #: (``kloom.speedup.judged_times``).
    statistic: Literal["median", "mean"] = "median"


@dataclass
class ClockCheck:
    """Each side's timed blocks, measured from the judge process too: the wall time of a block
    minus the time the side's own clock reported is that side's overhead (input draws, flush,
    barrier, the round trip); the candidate's may exceed the reference's in the same round by at
    most ``allowed_ms`` (``excess_ms``: the upper median over the rounds)."""

    blocks: int
    calls_per_block: int
    reference_block_ms: float  # medians over the blocks, judge's wall clock
    candidate_block_ms: float
    reference_unaccounted_ms: float  # median (wall - reported) over the blocks
    candidate_unaccounted_ms: float
    allowed_ms: float
    ok: bool
    #: The candidate's unaccounted time less the reference's, block beside block: the upper
    #: median over the rounds (records written before this field compared the least of each side).
    excess_ms: float | None = None
    #: Whether the blocks were staged (inputs drawn by the reference's process and sent with
    #: each block, outputs sent back with its reply: only the calls lie inside the judged span
    #: besides the transfers), which allows a tighter bound; None in records before it existed.
    staged: bool | None = None


@dataclass
class MemoryRecord:
    """Peak device memory (bytes) per side, the largest over ranks: CUDA allocator peaks, or on
    the CPU the bytes of live tensors each rank accounted."""

    limit_bytes: int
    reference_peak_bytes: int
    candidate_peak_bytes: int
    output_bytes: int
    #: Reference + candidate: at most what the two processes of one rank held at once.
    evaluator_peak_bytes: int
    #: Each side's peak per command ("reference run_trial", "candidate time_block", ...): which
    #: step held the most (the candidate's own numbers are what its process says).
    peaks_by_command: dict[str, int] = field(default_factory=dict)


@dataclass
class EvalResult:
    """Everything the evaluator says about one candidate on one workload and world size."""

    status: Status
    workload: str
    world_size: int
    device: str
    candidate_sha256: str = ""
    workload_sha256: str = ""
    compiled: bool = False
    correct: bool = False
    seeds: list[int] = field(default_factory=list)
    trials: list[TrialRecord] = field(default_factory=list)
    error: ErrorInfo | None = None
    timing: TimingRecord | None = None
    roofline: RooflineRecord | None = None
    flags: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    memory: MemoryRecord | None = None
    #: What Triton's autotuner chose in the candidate, as its rank reported it after timing
    #: (``kloom.tuning``): a hint the knowledge base keeps for the next candidate, never evidence.
    tuned: list[TunedConfig] = field(default_factory=list)
    #: Which judge wrote the record; a record read back without one was written by version "1"
    #: (the evaluator sets ``EVALUATOR_VERSION`` on every record it makes).
    evaluator_version: str = "1"
    version: int = RECORD_VERSION

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        return dataclass_from_dict(cls, data)

    def summary(self) -> str:
        """One line a person or an agent can read."""
        if self.status == "correct" and self.timing:
            means = " (mean calls)" if self.timing.statistic == "mean" else ""
            line = (
                f"correct on all {self.world_size} ranks; {self.timing.candidate_ms:.4g} ms vs "
                f"reference {self.timing.reference_ms:.4g} ms{means}: speedup {self.timing.speedup:.3g}x"
            )
            if self.roofline and self.roofline.fraction_of_floor is not None:
                line += f", {100 * self.roofline.fraction_of_floor:.1f}% of roofline floor"
        elif self.status == "incorrect":
            bad = [c for t in self.trials for c in t.ranks if not c.ok]
            detail = bad[0].message if bad else (self.error.message if self.error else "")
            line = f"incorrect: {detail}"
        else:
            where = ""
            if self.error and self.error.rank is not None:
                where = f" on rank {self.error.rank}"
            message = self.error.message if self.error else ""
            line = f"{self.status}{where}: {message}"
        if self.flags:
            line += f" [flags: {', '.join(self.flags)}]"
        return line


@dataclass
class BaselineResult:
    """The reference timed alone (``kloom baseline``)."""

    status: Status
    workload: str
    world_size: int
    device: str
    workload_sha256: str = ""
    times: list[TimeStats] = field(default_factory=list)
    reference_ms: float | None = None
    roofline: RooflineRecord | None = None
    error: ErrorInfo | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    version: int = RECORD_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BaselineResult":
        return dataclass_from_dict(cls, data)


T = TypeVar("T")


def dataclass_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """A dataclass ``cls`` rebuilt from its ``dataclasses.asdict`` output, nested dataclasses
    (also in lists and optional fields) included. Keys ``cls`` lacks are ignored; fields the data
    lacks take their defaults (how records read what older versions of them wrote)."""
    hints = typing.get_type_hints(cls)
    kwargs = {f.name: _convert(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data}
    return cls(**kwargs)


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is type(None):
                continue
            return _convert(arg, value)
    if origin is list and args:
        return [_convert(args[0], v) for v in value]
    if dataclasses.is_dataclass(tp):
        return dataclass_from_dict(tp, value)
    return value
