"""Records of an optimization job: its spec, each step's plan, candidate, evaluation and profile,
and the whole trajectory (saved after every step, with a format version).

Plain dataclasses, JSON round-trippable, importable with the standard library alone: the CLI,
the service, the dashboard and the knowledge base all read these. A step's evaluation and the
job's baseline are the evaluator's typed records (``kloom.evaluation``), a step's profile the
profiler's (``kloom.profile``), the job's analysis the tracer's structure (``agents.analysis``);
they become JSON only where a trajectory or a step is saved or sent (``to_dict``), and typed
again where one is read (``from_dict``).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from kloom.clock import timestamp
from kloom.evaluation import BaselineResult, EvalResult, TimingRecord
from kloom.profile import Profile
from kloom.speedup import FASTER, NO_FASTER, REFERENCE_COPY, measured, reported_speedup, self_timing_bias

from .analysis import Analysis

TRAJECTORY_VERSION = 1

#: A job's state, everywhere (the loop, the job rows, the API): queued -> running -> a finished
#: state (running -> queued again when its worker dies).
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled", "stopped"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)
FINISHED_STATES: frozenset[JobState] = frozenset({"succeeded", "failed", "cancelled", "stopped"})
Device = Literal["cpu", "cuda"]
#: Step statuses: the evaluator's statuses, plus ``coder_failed`` (no candidate could be written:
#: unparseable model output, empty answer, a strategy that does not apply) and ``skipped`` (the
#: candidate is identical to one this job already evaluated, so it was not evaluated again).
StepStatus = str
#: Steps that evaluated no candidate.
NOT_EVALUATED = frozenset({"coder_failed", "skipped"})


def device_of(device_kind: str) -> Device:
    """The device a job runs on, from the queue's device kind (``cpu``, ``cuda``, ``cuda-h200x4``)."""
    return "cpu" if device_kind == "cpu" else "cuda"


@dataclass
class Limits:
    """Checked before every model call and every step."""

    max_iters: int = 8
    max_wall_s: float | None = None
    max_tokens: int | None = None
    budget_usd: float | None = None


@dataclass(frozen=True)
class JobRequest:
    """What a job runs with, everything but the workload: what a user asks for through the API
    (its row keeps these fields), ``kloom optimize`` or a batch. ``spec`` is the one way a
    ``JobSpec`` is made from them (``JobSpec.from_dict`` reads a saved one back)."""

    world_size: int
    device_kind: str = "cpu"  # the queue: ``cpu``, ``cuda``, ``cuda-h200x4``
    strategist: str = "offline"
    shapes: str | None = None
    limits: Limits = field(default_factory=Limits)
    use_kb: bool = True
    profile: Literal["none", "new_best", "every_correct"] = "new_best"
    options: dict[str, Any] = field(default_factory=dict)

    def spec(self, workload: str, job_id: str = "", shapes: str | None = None) -> "JobSpec":
        """The job of ``workload`` (a path; a name for a job not run yet); ``shapes``: the
        evaluator's, where the request names none."""
        return JobSpec(workload=workload, world_size=self.world_size, device=device_of(self.device_kind),
                       shapes=self.shapes or shapes, strategist=self.strategist, limits=dataclasses.replace(self.limits),
                       job_id=job_id, use_kb=self.use_kb, profile=self.profile, options=dict(self.options))


@dataclass
class JobSpec:
    workload: str  # a path to the workload file
    world_size: int
    device: Device = "cpu"
    shapes: str | None = None  # None: the evaluator's default for the device
    strategist: str = "offline"  # "offline" or an LLM model name that litellm understands
    limits: Limits = field(default_factory=Limits)
    job_id: str = ""
    use_kb: bool = True
    profile: Literal["none", "new_best", "every_correct"] = "new_best"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """What the planner chose, and why."""

    strategy: str  # e.g. "cuda_graph", "torch_compile", "overlap_chunks", "llm", "kb_reuse"
    params: dict[str, Any] = field(default_factory=dict)
    rationale: str = ""
    source: Literal["offline", "llm", "kb"] = "offline"
    base_step: int | None = None  # the step whose candidate this one builds on


@dataclass
class Usage:
    """Model usage of one step (or a sum of steps)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # None once any call's cost was unknown
    model: str = ""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: "Usage") -> "Usage":
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=cost,
            model=other.model or self.model,
        )


@dataclass
class Step:
    index: int
    plan: Plan
    status: StepStatus
    candidate_code: str | None = None
    candidate_sha256: str = ""
    evaluation: EvalResult | None = None
    profile: Profile | None = None  # the hardware's view of the candidate, with its summary for the agents
    feedback: str = ""  # the verifier's words for the next plan
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    seconds: dict[str, float] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def timing(self) -> TimingRecord | None:
        """The evaluation's timing, or None without one."""
        return self.evaluation.timing if self.evaluation else None

    @property
    def speedup(self) -> float | None:
        timing = self.timing
        return timing.speedup if self.correct and timing else None

    @property
    def reported_speedup(self) -> float | None:
        """The speedup as reported (job rows, batch reports, the dashboard, benchmarks): the
        reference run as a candidate (the fallback) measures noise, not an improvement, so its
        speedup is never reported above 1.0x (``kloom.speedup.reported_speedup``)."""
        return reported_speedup(self.speedup, self.plan.strategy)

    @property
    def candidate_ms(self) -> float | None:
        timing = self.timing
        return timing.candidate_ms if self.correct and timing else None

    @property
    def fraction_of_floor(self) -> float | None:
        roofline = self.evaluation.roofline if self.evaluation else None
        return roofline.fraction_of_floor if self.correct and roofline else None

    def to_dict(self) -> dict[str, Any]:
        """The step as it is stored (a job's step row, a line of its trajectory's ``steps``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Step":
        raw = dict(data)
        raw["plan"] = Plan(**raw["plan"])
        raw["usage"] = Usage(**raw.get("usage", {}))
        if raw.get("evaluation") is not None:
            raw["evaluation"] = EvalResult.from_dict(raw["evaluation"])
        if raw.get("profile") is not None:
            raw["profile"] = Profile.from_dict(raw["profile"])
        return cls(**raw)


def pooled_reference_ms(steps: list[Step]) -> float | None:
    """The median of the reference's own times over a job's correct, timed steps (None with fewer
    than two): what the reference takes across the job, not in one evaluation."""
    times = [s.timing.reference_ms for s in steps if s.reported_speedup is not None and s.timing is not None
             and s.timing.reference_ms > 0]
    return statistics.median(times) if len(times) >= 2 else None


def ranking_speedup(step: Step, pooled_ms: float | None) -> float:
    """What a correct step is ranked by among a job's steps: the lower of its speedup as reported
    (its own reference over its candidate, side by side) and the job's pooled reference time over
    its candidate's own time. A step's ratio cancels the drift both sides share, but not a
    reference that ran slow in that evaluation alone: a launch-bound reference swings with the
    host far more than a graph-launched candidate (causal_attention_block on one H100: 0.53-0.88 ms
    across five steps, the largest ratio 7.40x for a candidate slower than another step's at
    6.44x). Taking the lower of the two never credits a step for its reference's bad luck."""
    own = step.reported_speedup
    assert own is not None, "only correct steps are ranked"
    timing = step.timing
    if pooled_ms is None or timing is None or not timing.candidate_ms > 0:
        return own
    return min(own, pooled_ms / timing.candidate_ms)


def steps_self_bias(steps: list[Step]) -> float:
    """The side bias a job's timing showed (``kloom.speedup.self_timing_bias``): how far the
    reference's own copy, where a step ran it correctly, read from 1.0x (the furthest where
    several did)."""
    copies = [s.speedup for s in steps if s.plan.strategy == REFERENCE_COPY and s.speedup is not None]
    return max((self_timing_bias(x) for x in copies), default=0.0)


def is_win(step: Step, bias: float) -> bool:
    """Whether a step is a measurable win over the reference (never the reference's own copy)."""
    m = measured(step.timing, bias) if step.correct else None
    return step.plan.strategy != REFERENCE_COPY and m is not None and m.measurable_win


def best_of(steps: list[Step]) -> Step | None:
    """The job's best step: a measurable win before any step that is not one (a larger ratio
    inside the noise does not hide a kernel that is faster beyond it), then the highest
    ``ranking_speedup`` (ties: the earliest). What is reported for it is still its own speedup and
    interval, measured side by side in its evaluation (``Step.reported_speedup``); the ranking
    only keeps a reference's slow evaluation from choosing the step."""
    correct = [s for s in steps if s.reported_speedup is not None]
    pooled = pooled_reference_ms(correct)
    bias = steps_self_bias(correct)
    return max(correct, key=lambda s: (is_win(s, bias), ranking_speedup(s, pooled), -s.index)) if correct else None


@dataclass
class Trajectory:
    job: JobSpec
    workload_name: str = ""
    workload_sha256: str = ""
    workload_family: str = ""
    baseline: BaselineResult | None = None
    analysis: Analysis | None = None  # the structure found in the reference
    steps: list[Step] = field(default_factory=list)
    state: JobState = "queued"
    stop_reason: str = ""
    overhead_usage: Usage = field(default_factory=Usage)  # model calls that produced no step
    created_at: str = field(default_factory=timestamp)
    updated_at: str = field(default_factory=timestamp)
    version: int = TRAJECTORY_VERSION

    # Derived, never stored separately -----------------------------------------------------------
    @property
    def best_step(self) -> Step | None:
        """The job's best step (``best_of``)."""
        return best_of(self.steps)

    @property
    def best_speedup(self) -> float | None:
        """The best step's speedup as reported everywhere (``Step.reported_speedup``)."""
        best = self.best_step
        return best.reported_speedup if best else None

    @property
    def self_bias(self) -> float:
        """The side bias of this job's timing (``kloom.speedup.self_timing_bias``): how far the
        reference's own copy, when a step ran it correctly, read from 1.0x (the copy read
        furthest from 1.0 where several did)."""
        return steps_self_bias(self.steps)

    @property
    def outcome(self) -> str:
        """What the job found, in the words every report uses: ``faster kernel found`` (the best
        kernel beats the reference beyond the 95% interval of its timing), ``no faster kernel
        found`` (correct kernels only as fast as the reference, slower, or within the noise:
        the reference stands at 1.00x), or ``no correct kernel``."""
        best = self.best_step
        if best is None:
            return "no correct kernel"
        return FASTER if is_win(best, self.self_bias) else NO_FASTER

    @property
    def result_speedup(self) -> float | None:
        """The job's result as a speedup over the reference: the best kernel's when it is a
        measurable win, 1.0 when the reference stands, None without a correct kernel."""
        if self.best_step is None:
            return None
        return self.best_speedup if self.outcome == FASTER else 1.0

    @property
    def usage(self) -> Usage:
        total = self.overhead_usage
        for step in self.steps:
            total = total.add(step.usage)
        return total

    def to_dict(self) -> dict[str, Any]:
        """The trajectory as it is stored (its ``trajectory.json``, a job's row) and sent."""
        data = dataclasses.asdict(dataclasses.replace(self, analysis=None))
        data["analysis"] = self.analysis.to_dict() if self.analysis is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        version = data.get("version", 0)
        if version > TRAJECTORY_VERSION:
            raise ValueError(f"trajectory format version {version} is newer than this kloom reads ({TRAJECTORY_VERSION})")
        job = dict(data["job"])
        job["limits"] = Limits(**job.get("limits", {}))
        steps = [Step.from_dict(raw) for raw in data.get("steps", [])]
        fields = {f.name for f in dataclasses.fields(cls)} - {"job", "steps", "overhead_usage", "baseline", "analysis"}
        overhead = Usage(**data.get("overhead_usage", {}))
        baseline = BaselineResult.from_dict(data["baseline"]) if data.get("baseline") is not None else None
        analysis = Analysis.from_dict(data["analysis"]) if data.get("analysis") is not None else None
        return cls(
            job=JobSpec(**job),
            steps=steps,
            overhead_usage=overhead,
            baseline=baseline,
            analysis=analysis,
            **{k: v for k, v in data.items() if k in fields},
        )
