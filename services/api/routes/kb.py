"""The knowledge base over REST: search kernels, get one, export one as a zip, list strategies and
get one with its evidence. Any valid key reads it: the knowledge base is what every job teaches
kloom, shared by all of its users."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel

from kb import records, store
from kb.export import ExportError, export_zip
from kloom import suite
from services.db.models import Job

from ..deps import CurrentKey, SessionDep

router = APIRouter(prefix="/kb", tags=["knowledge base"])


class KernelsPublic(BaseModel):
    data: list[records.KernelSummary]  # the knowledge base's own records, as every reader gets them
    count: int


class EvidencePublic(BaseModel):
    job_id: str
    step_index: int
    tries: int
    won: bool
    status: str
    speedup: float | None
    candidate_ms: float | None
    reference_ms: float | None
    fraction_of_floor: float | None
    params: dict[str, Any]
    profile_summary: str
    workload_name: str
    world_size: int


class StrategyPublic(BaseModel):
    id: str
    name: str
    description: str
    applies_to: dict[str, Any]
    wins: int
    losses: int
    confidence: float
    best_speedup: float | None
    best_params: dict[str, Any]


class StrategyDetail(StrategyPublic):
    evidence: list[EvidencePublic]


class StrategiesPublic(BaseModel):
    data: list[StrategyPublic]
    count: int


def _fields(row, model: type[BaseModel]) -> dict[str, Any]:
    """The attributes of ``row`` that ``model`` has (its ids and derived fields are set by the caller)."""
    return {name: getattr(row, name) for name in model.model_fields if hasattr(row, name) and name != "id"}


def _summary(kernel, score: float | None = None) -> records.KernelSummary:
    return records.KernelSummary.of(kernel, score=score)


def _strategy(strategy) -> dict[str, Any]:
    return {
        "id": strategy.public_id,
        "name": strategy.name,
        "description": strategy.description,
        "applies_to": strategy.applies_to,
        "wins": strategy.wins,
        "losses": strategy.losses,
        "confidence": strategy.confidence,
        "best_speedup": strategy.best_speedup,
        "best_params": strategy.best_params,
    }


def _builtin(workload_sha256: str) -> bool:
    """Whether the workload is one of the built-in suite's (public source)."""
    return any(info.sha256 == workload_sha256 for info in suite.workloads(None))


def _kernel_or_404(session, kernel_id: str):
    kernel = store.get_kernel(session, kernel_id)
    if kernel is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no kernel {kernel_id!r} in the knowledge base")
    return kernel


@router.get("/kernels")
def search_kernels(
    _key: CurrentKey,
    session: SessionDep,
    q: Annotated[str | None, Query(max_length=500, description="Words to match; without them, fastest first.")] = None,
    family: Annotated[str | None, Query(max_length=64)] = None,
    collective: Annotated[str | None, Query(max_length=100, description="Only workloads that call this collective.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> KernelsPublic:
    """Kernels that beat their baseline, by relevance to ``q`` or fastest first."""
    matches = store.search(session, q, family=family, collective=collective, limit=limit)
    data = [_summary(m.kernel, m.score if q else None) for m in matches]
    return KernelsPublic(data=data, count=len(data))


@router.get("/kernels/{kernel_id}")
def get_kernel(kernel_id: str, _key: CurrentKey, session: SessionDep) -> records.KernelDetail:
    """One kernel: its code, evaluation record, workload signature and provenance."""
    kernel = _kernel_or_404(session, kernel_id)
    return records.KernelDetail.of(kernel)


@router.get(
    "/kernels/{kernel_id}/export",
    response_class=Response,
    responses={200: {"content": {"application/zip": {}}, "description": "kernel.py, workload.py, test_kernel.py, kernel.json, README.md"}},
)
def export_kernel(kernel_id: str, key: CurrentKey, session: SessionDep) -> Response:
    """The kernel as a standalone module (a zip) whose test runs with plain pytest, without kloom.
    The zip holds the workload it was found on: a workload another key uploaded is that key's
    to export (or an admin's); the built-in suite's are everyone's."""
    kernel = _kernel_or_404(session, kernel_id)
    job = session.get(Job, kernel.job_id)
    if job is not None and job.owner_key_id != key.id and not key.is_admin and not _builtin(kernel.workload_sha256):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"kernel {kernel_id} was found on a workload another key uploaded; only that key can export it with its workload",
        )
    try:
        name, data = export_zip(session, kernel.id)
    except ExportError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return Response(data, media_type="application/zip", headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/strategies")
def list_strategies(
    _key: CurrentKey,
    session: SessionDep,
    family: Annotated[str | None, Query(max_length=64)] = None,
    name: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> StrategiesPublic:
    """Strategies, most wins first, each with the confidence its evidence gives."""
    data = [StrategyPublic(**_strategy(s)) for s in store.list_strategies(session, family=family, name=name, limit=limit)]
    return StrategiesPublic(data=data, count=len(data))


@router.get("/strategies/{strategy_id}")
def get_strategy(strategy_id: str, _key: CurrentKey, session: SessionDep) -> StrategyDetail:
    """One strategy with its evidence: every job where it was tried, won or lost, and what the profiler said."""
    strategy = store.get_strategy(session, strategy_id)
    if strategy is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no strategy {strategy_id!r} in the knowledge base")
    evidence = [
        EvidencePublic(**_fields(e, EvidencePublic), workload_name=e.job.workload_name, world_size=e.job.world_size)
        for e in strategy.evidence
    ]
    return StrategyDetail(**_strategy(strategy), evidence=evidence)
