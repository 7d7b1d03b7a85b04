"""Request and response bodies, split by direction: ``XCreate`` comes in, ``XPublic`` goes out,
``XsPublic{data, count}`` is a page of a list."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.records import JobState, Limits

#: ``cpu``, or ``cuda`` with an optional GPU model and count: ``cuda-h200x4``, ``cuda-h100x1``.
DEVICE_KIND_PATTERN = r"^(cpu|cuda(-[a-z0-9]+x[0-9]+)?)$"
#: The largest integer any field, query parameter or id takes: what every database's INTEGER holds.
MAX_INT = 2**31 - 1
#: A job's limits are ``agents.records.Limits`` (the responses' ``limits`` too); the submission's
#: fields below take their names and defaults from it, and add the bounds a request must keep.
_LIMITS = Limits()


class JobSettings(BaseModel):
    """What a job or a batch runs with (everything but the workload)."""

    world_size: int = Field(ge=1, le=MAX_INT, description="Number of ranks.")
    device_kind: str = Field("cpu", pattern=DEVICE_KIND_PATTERN, description="The queue that runs it: cpu or cuda-<gpu>x<count>.")
    strategist: str = Field("offline", min_length=1, max_length=200, description='"offline", or an LLM model name that litellm knows.')
    shapes: Literal["ci", "gpu"] | None = Field(None, description="Shape profile (default: ci on cpu, gpu on cuda).")
    max_iters: int = Field(_LIMITS.max_iters, ge=1, le=MAX_INT, description="Steps at most.")
    max_wall_s: float | None = Field(_LIMITS.max_wall_s, gt=0, allow_inf_nan=False, description="Wall time at most, in seconds (finite).")
    max_tokens: int | None = Field(_LIMITS.max_tokens, gt=0, le=2**63 - 1, description="Model tokens at most.")
    budget_usd: float | None = Field(_LIMITS.budget_usd, ge=0, allow_inf_nan=False, description="Model cost at most, in US dollars (finite).")
    use_kb: bool = Field(True, description="Let the knowledge base advise the planner.")
    profile: Literal["none", "new_best", "every_correct"] = Field(
        "new_best", description="Which correct candidates get a hardware profile (Nsight Compute and the kernel timeline on a GPU): none, each new best, or every correct one.")

    def limits(self) -> dict[str, Any]:
        """The job's ``Limits`` as its row stores them."""
        return dataclasses.asdict(Limits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Limits)}))


class JobCreate(JobSettings):
    """A job submission (multipart form): a workload file in ``workload_file``, or ``workload``."""

    workload: str | None = Field(None, max_length=200, description="Name of a workload of the built-in suite (instead of a file).")


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    state: JobState
    stop_reason: str
    workload_name: str
    workload_family: str
    workload_sha256: str
    world_size: int
    device_kind: str
    shapes: str | None
    strategist: str
    limits: Limits
    use_kb: bool
    profile: str
    batch_id: str | None
    attempts: int
    worker_id: str | None
    cancel_requested: bool
    waiting: str = Field("", description="Why a queued job is not running yet (no worker serves its device kind).")
    num_steps: int
    best_step_index: int | None
    best_speedup: float | None
    outcome: str = Field("", description="What the job found: 'faster kernel found', 'no faster kernel found' (the reference stands at 1.00x) or 'no correct kernel'; empty before its first step.")
    result_speedup: float | None = Field(None, description="The result over the reference: best_speedup when it is a measurable win, 1.0 when the reference stands.")
    best_fraction_of_floor: float | None
    cost_usd: float | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    updated_at: dt.datetime


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int = Field(description="Jobs matching the filter, over all pages.")


class StepPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    status: str
    speedup: float | None
    created_at: dt.datetime
    data: dict[str, Any] = Field(description="The step record (agents.records.Step).")


class StepsPublic(BaseModel):
    data: list[StepPublic]
    count: int = Field(description="Steps recorded for the job in all.")


class BestKernel(BaseModel):
    job_id: str
    step_index: int
    strategy: str
    speedup: float | None
    candidate_ms: float | None
    fraction_of_floor: float | None
    candidate_sha256: str
    code: str


class WorkloadSource(BaseModel):
    name: str
    sha256: str
    source: str


class BatchCreate(JobSettings):
    # A misspelt or unsupported field must not silently start a whole suite with the defaults.
    model_config = ConfigDict(extra="forbid")

    suite: str = Field("kloom", max_length=200, description="Suite name: kloom (built in) or an imported suite.")
    workloads: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, max_length=1000, description="Only these workloads of the suite (by name); all of them when left out."
    )


class BatchWorkload(BaseModel):
    """One workload of a batch: its job and how far it got."""

    model_config = ConfigDict(from_attributes=True)

    job_id: str
    workload_name: str
    workload_family: str
    state: JobState
    stop_reason: str
    num_steps: int
    best_speedup: float | None
    best_fraction_of_floor: float | None
    cost_usd: float | None


class BatchSummary(BaseModel):
    """Aggregates over the batch's jobs so far (the full report comes from ``kloom.batch``)."""

    total: int
    finished: int
    by_state: dict[str, int]
    correct: int = Field(description="Jobs with a correct kernel.")
    fast_1: float | None = Field(description="Share of all workloads whose job found a faster kernel: a measurable win, beyond the "
                                 "95% interval of its interleaved timing (as `kloom bench report` counts it).")
    fast_1_any: float | None = Field(default=None, description="Share of all workloads with a correct kernel measured faster than "
                                     "the reference at all, noise included (fast_1 as the literature counts it).")
    faster_kernel_found: int = Field(default=0, description="Jobs whose outcome is 'faster kernel found'.")
    geomean_speedup: float | None = Field(description="Geometric mean of the jobs' result speedups over workloads with a correct kernel "
                                          "(1.0 where no faster kernel was found: the reference stands).")
    median_fraction_of_floor: float | None
    cost_usd: float


class BatchPublic(BaseModel):
    id: str
    suite: str
    settings: dict[str, Any]
    created_at: dt.datetime
    summary: BatchSummary
    workloads: list[BatchWorkload] | None = Field(None, description="Per-workload progress (on GET of one batch).")


class BatchesPublic(BaseModel):
    data: list[BatchPublic]
    count: int


class WorkerPublic(BaseModel):
    id: str
    hostname: str
    queues: list[str]
    gpus: list[dict[str, Any]]
    profile: str
    started_at: dt.datetime
    last_heartbeat: dt.datetime
    stopped_at: dt.datetime | None
    alive: bool


class WorkersPublic(BaseModel):
    data: list[WorkerPublic]
    count: int


class ApiKeyCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="Who the key is for.")
    admin: bool = Field(False, description="Whether it may manage keys.")


class ApiKeyPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    prefix: str
    is_admin: bool
    created_at: dt.datetime
    revoked_at: dt.datetime | None


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(description="The key itself: shown this once, stored only as a hash.")


class ApiKeysPublic(BaseModel):
    data: list[ApiKeyPublic]
    count: int


class Check(BaseModel):
    ok: bool
    error: str = ""


class Health(BaseModel):
    status: Literal["ok", "degraded", "unavailable"]
    database: Check
    broker: Check
    workers_alive: int
    unserved_queues: dict[str, int] = Field(
        default_factory=dict, description="Device kinds with queued or running jobs and no live worker: jobs per kind."
    )
    detail: str = Field(default="", description="Why the service is not ok, in words (empty when ok).")


class Message(BaseModel):
    detail: str
