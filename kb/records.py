"""A kept kernel as every reader of the knowledge base sees it: ``kloom kb search``/``show``, an
export's ``kernel.json`` and the REST API (``services/api/routes/kb.py`` returns these records as
they are). Built from the database row in one place; only ``to_json`` and the API turn one into
plain values."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from .models import KBKernel


@dataclass(frozen=True, kw_only=True)
class KernelSummary:
    """What a listing shows of a kernel: where it came from and what the judge measured."""

    id: str  # the public id, k<N>
    workload_name: str
    workload_sha256: str
    family: str
    world_size: int
    device: str
    gpu: str
    interconnect: str
    strategy: str
    params: dict[str, Any]
    speedup: float
    candidate_ms: float
    reference_ms: float
    fraction_of_floor: float | None
    job_id: str
    step_index: int
    evaluator_version: str  # the evaluator that judged it ("1": the one whose candidates shared the reference's process)
    verified_at: dt.datetime | None  # when ``kloom kb verify`` last judged it again and it still passed
    score: float | None = None  # relevance to a text search, when there was one

    @classmethod
    def of(cls, kernel: KBKernel, **extra: Any):
        """The record of a database row (``extra``: fields the row does not hold, as ``score``)."""
        values = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(cls) if f.name not in ("id", "score") and f.name not in extra}
        return cls(id=kernel.public_id, **values, **extra)

    @property
    def hardware(self) -> str:
        return self.gpu or self.device

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in out.items()}


@dataclass(frozen=True, kw_only=True)
class KernelDetail(KernelSummary):
    """A kernel whole: its code, the judge's record, the workload's signature and how it was planned."""

    code: str
    code_sha256: str
    signature: dict[str, Any]
    evaluation: dict[str, Any]
    plan_source: str
    rationale: str
    model: str
    created_at: dt.datetime
    tuned: list[dict[str, Any]]  # what Triton's autotuner chose when the judge timed it (``kloom.tuning``)
