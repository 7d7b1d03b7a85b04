"""``/health`` (no key): the database, the broker and the live workers; 503 while either store is down."""

from __future__ import annotations

import datetime as dt

import anyio
from fastapi import APIRouter, Request, Response, status
from sqlalchemy import func, select, text

from kloom.db import utcnow
from services.db.models import Worker
from services.worker.celery_app import broker_status

from ..schemas import Check, Health

router = APIRouter(tags=["health"])


def _database(request: Request) -> tuple[Check, int]:
    settings = request.app.state.settings
    try:
        with request.app.state.sessions() as session:
            session.execute(text("SELECT 1"))
            cutoff = utcnow() - dt.timedelta(seconds=settings.worker_dead_after_s)
            alive = session.scalar(
                select(func.count()).select_from(Worker).where(Worker.last_heartbeat >= cutoff, Worker.stopped_at.is_(None))
            )
        return Check(ok=True), alive
    except Exception as exc:  # noqa: BLE001 - any failure means "down", with its kind
        return Check(ok=False, error=f"{type(exc).__name__}: the database does not answer"), 0


@router.get("/health", responses={503: {"model": Health}})
async def health(request: Request, response: Response) -> Health:
    """Whether the service can take jobs now."""
    database, alive = await anyio.to_thread.run_sync(_database, request)
    ok, error = await anyio.to_thread.run_sync(broker_status, request.app.state.celery)
    broker = Check(ok=ok, error=error)
    healthy = database.ok and broker.ok
    if not healthy:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(status="ok" if healthy else "unavailable", database=database, broker=broker, workers_alive=alive)
