"""The service's tables. Every change here goes with a change to migration ``0001`` (until it is
released), and ``tests/services/test_migrations.py`` checks that they agree."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from agents.records import FINISHED_STATES, JOB_STATES
from kloom.clock import utcnow
from kloom.db import Base, JSONType, UTCDateTime



def new_id() -> str:
    return uuid.uuid4().hex


class ApiKey(Base):
    """An API key, stored as the SHA-256 of the key (keys are 256-bit random, so a fast hash is enough)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    #: The first characters of the key, shown in listings so that a person can tell keys apart.
    prefix: Mapped[str] = mapped_column(String(16))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class Batch(Base):
    """A suite run: one job per workload; its progress is derived from its jobs."""

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"), index=True)
    suite: Mapped[str] = mapped_column(String(200))
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    jobs: Mapped[list["Job"]] = relationship(back_populates="batch", order_by="Job.workload_name")


class Job(Base):
    """One optimization job; the state machine is queued -> running -> succeeded|failed|cancelled|stopped
    (running -> queued again when its worker dies)."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(f"state IN {JOB_STATES!r}", name="state"),
        UniqueConstraint("owner_key_id", "idempotency_key"),
        Index("ix_jobs_owner_created", "owner_key_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    batch_id: Mapped[str | None] = mapped_column(ForeignKey("batches.id"), index=True)
    #: The client's ``Idempotency-Key``: a retried submission returns the job it made the first time.
    idempotency_key: Mapped[str | None] = mapped_column(String(200))

    workload_name: Mapped[str] = mapped_column(String(200))
    workload_family: Mapped[str] = mapped_column(String(64), default="")
    workload_source: Mapped[str] = mapped_column(Text)
    workload_sha256: Mapped[str] = mapped_column(String(64))
    world_size: Mapped[int] = mapped_column(Integer)
    #: The queue that runs it: ``cpu`` or ``cuda-<gpu>x<count>``.
    device_kind: Mapped[str] = mapped_column(String(64))
    shapes: Mapped[str | None] = mapped_column(String(32))
    #: ``offline`` or an LLM model name.
    strategist: Mapped[str] = mapped_column(String(200), default="offline")
    limits: Mapped[dict[str, Any]] = mapped_column(JSONType)
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)

    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    stop_reason: Mapped[str] = mapped_column(Text, default="")
    #: How many times a worker claimed it (the fencing token of the current run).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(200), index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)

    # Denormalised from the steps for listing; the steps are the truth.
    num_steps: Mapped[int] = mapped_column(Integer, default=0)
    best_step_index: Mapped[int | None] = mapped_column(Integer)
    best_speedup: Mapped[float | None] = mapped_column(Float)
    best_fraction_of_floor: Mapped[float | None] = mapped_column(Float)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    #: The trajectory without its steps (baseline, analysis, state), for resuming.
    trajectory: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    #: The last event's sequence number (events are numbered 1, 2, ... per job).
    event_seq: Mapped[int] = mapped_column(Integer, default=0)

    @property
    def outcome(self) -> str:
        """What the job found (``Trajectory.outcome``, stored with the trajectory; "" before its
        first step)."""
        return str((self.trajectory or {}).get("outcome") or "")

    @property
    def result_speedup(self) -> float | None:
        """The job's result over the reference: the best kernel's speedup when it is a measurable
        win, 1.0 when the reference stands, None without a correct kernel."""
        value = (self.trajectory or {}).get("result_speedup")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def use_kb(self) -> bool:
        """Whether the knowledge base advises the job's planner (a submission option)."""
        return bool((self.options or {}).get("use_kb", True))

    @property
    def profile(self) -> str:
        """Which correct candidates get a hardware profile (a submission option; jobs stored
        before it existed: the default)."""
        return str((self.options or {}).get("profile", "new_best"))

    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    batch: Mapped[Batch | None] = relationship(back_populates="jobs")

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


class StepRecord(Base):
    """One step of a job, as ``agents.records.Step.to_dict()``. The unique (job, index) makes a
    redelivered task unable to record a step twice."""

    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("job_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32))
    speedup: Mapped[float | None] = mapped_column(Float)
    data: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class JobEvent(Base):
    """What a job's event stream sends: a step recorded or a state changed, numbered per job."""

    __tablename__ = "job_events"
    __table_args__ = (UniqueConstraint("job_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Worker(Base):
    """A worker process (its Celery node name), what it serves and has, and when it last said so."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[list[str]] = mapped_column(JSONType)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    profile: Mapped[str] = mapped_column(String(64), default="")
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    stopped_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
