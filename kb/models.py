"""The knowledge base's tables (SQLAlchemy 2 typed models on kloom's shared ``Base``).

The schema is created and changed only by Alembic (``migrations/versions/0002_knowledge_base.py``).

- ``KBJob``: one finished job that was ingested, with its workload's signature (the unit of
  idempotency: a job is ingested once).
- ``KBWorkload``: a workload's source by content hash, so that a kernel can be exported with it.
- ``KBKernel``: the code of a correct candidate that beat its baseline, with its provenance.
- ``KBStrategy`` and ``KBEvidence``: a strategy in words and in structured form (family, dominant
  roofline term, hardware, the sizes and world sizes where it won), and one evidence row per job
  where it was tried. Confidence is derived from the evidence, never stored as a claim.
- ``KBFailure``: what was tried on which signature and why it failed, with a count.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from kloom.clock import utcnow
from kloom.db import Base, JSONType, UTCDateTime

from .confidence import wilson_lower_bound


class KBWorkload(Base):
    __tablename__ = "kb_workloads"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(64), default="")
    source: Mapped[str | None] = mapped_column(Text, nullable=True)  # None when the file was not readable at ingest
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class KBJob(Base):
    __tablename__ = "kb_jobs"

    job_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    workload_sha256: Mapped[str] = mapped_column(String(64), index=True)
    workload_name: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(64), index=True, default="")
    world_size: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(100), default="")
    interconnect: Mapped[str] = mapped_column(String(100), default="")
    signature: Mapped[dict[str, Any]] = mapped_column(JSONType)
    state: Mapped[str] = mapped_column(String(16))
    stop_reason: Mapped[str] = mapped_column(Text, default="")
    strategist: Mapped[str] = mapped_column(String(200), default="")
    steps: Mapped[int] = mapped_column(Integer, default=0)
    reference_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    best_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[str] = mapped_column(String(40), default="")  # the trajectory's own timestamp
    ingested_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class KBKernel(Base):
    __tablename__ = "kb_kernels"
    __table_args__ = (UniqueConstraint("job_id", "step_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("kb_jobs.job_id", ondelete="CASCADE"), index=True)
    step_index: Mapped[int] = mapped_column(Integer)
    code: Mapped[str] = mapped_column(Text)
    code_sha256: Mapped[str] = mapped_column(String(64), index=True)
    workload_sha256: Mapped[str] = mapped_column(String(64), index=True)
    workload_name: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(64), index=True, default="")
    # Space-delimited (" all_reduce all_gather ") so that a portable LIKE finds one collective.
    collectives: Mapped[str] = mapped_column(Text, default=" ")
    world_size: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(100), default="")
    interconnect: Mapped[str] = mapped_column(String(100), default="")
    signature: Mapped[dict[str, Any]] = mapped_column(JSONType)
    speedup: Mapped[float] = mapped_column(Float)
    candidate_ms: Mapped[float] = mapped_column(Float)
    reference_ms: Mapped[float] = mapped_column(Float)
    fraction_of_floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    evaluation: Mapped[dict[str, Any]] = mapped_column(JSONType)
    strategy: Mapped[str] = mapped_column(String(100), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    plan_source: Mapped[str] = mapped_column(String(16), default="")
    rationale: Mapped[str] = mapped_column(Text, default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: The evaluator version that judged it (``EvalResult.evaluator_version``; "1" before it had one).
    evaluator_version: Mapped[str] = mapped_column(String(32), default="1", server_default="1")
    #: When ``kloom kb verify`` last judged it again and it still passed.
    verified_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: What Triton's autotuner chose when the judge timed it (``kloom.tuning.TunedConfig`` records).
    tuned: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list, server_default=text("'[]'"))

    job: Mapped[KBJob] = relationship(lazy="joined")

    @property
    def public_id(self) -> str:
        return f"k{self.id}"


class KBStrategy(Base):
    __tablename__ = "kb_strategies"
    __table_args__ = (UniqueConstraint("name", "family", "dominant", "hardware"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), index=True)
    # When it applies (structured form): the family, the roofline term that dominates and the
    # hardware are its scope; the size and world-size ranges grow with every win.
    family: Mapped[str] = mapped_column(String(64), default="")
    dominant: Mapped[str] = mapped_column(String(16), default="")
    hardware: Mapped[str] = mapped_column(String(100), default="")
    min_input_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_input_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    min_world_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_world_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # In words: the rationale of its best win (or of its first try, until it wins).
    description: Mapped[str] = mapped_column(Text, default="")
    best_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    best_params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    wins: Mapped[int] = mapped_column(Integer, default=0)
    losses: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    evidence: Mapped[list["KBEvidence"]] = relationship(
        back_populates="strategy", order_by="KBEvidence.id", cascade="all, delete-orphan"
    )

    @property
    def public_id(self) -> str:
        return f"s{self.id}"

    @property
    def confidence(self) -> float:
        """Wilson lower bound of the win rate over all of its evidence (unweighted)."""
        return wilson_lower_bound(self.wins, self.wins + self.losses)

    @property
    def applies_to(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "dominant": self.dominant,
            "hardware": self.hardware,
            "input_bytes": [self.min_input_bytes, self.max_input_bytes],
            "world_sizes": [self.min_world_size, self.max_world_size],
        }


class KBEvidence(Base):
    __tablename__ = "kb_evidence"
    __table_args__ = (UniqueConstraint("strategy_id", "job_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    strategy_id: Mapped[int] = mapped_column(ForeignKey("kb_strategies.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("kb_jobs.job_id", ondelete="CASCADE"), index=True)
    step_index: Mapped[int] = mapped_column(Integer)  # its best step in that job
    tries: Mapped[int] = mapped_column(Integer, default=1)  # steps of this strategy in that job
    won: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(32))
    speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    candidate_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    reference_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    fraction_of_floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    profile_summary: Mapped[str] = mapped_column(Text, default="")
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    strategy: Mapped[KBStrategy] = relationship(back_populates="evidence")
    job: Mapped[KBJob] = relationship(lazy="joined")


class KBFailure(Base):
    __tablename__ = "kb_failures"
    __table_args__ = (
        UniqueConstraint("strategy", "params_key", "signature_key", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    strategy: Mapped[str] = mapped_column(String(100), index=True)
    params_key: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    signature_key: Mapped[str] = mapped_column(String(32), index=True)
    signature: Mapped[dict[str, Any]] = mapped_column(JSONType)
    family: Mapped[str] = mapped_column(String(64), default="")
    workload_name: Mapped[str] = mapped_column(String(200), default="")
    status: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    count: Mapped[int] = mapped_column(Integer, default=1)
    first_job_id: Mapped[str] = mapped_column(String(100))
    last_job_id: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
