"""``/health`` (no key): the database, the broker and the live workers. 503 while either store is
down (``unavailable``), and while some device kind has jobs but no live worker to run them
(``degraded``: a worker died, and the jobs wait for it to come back)."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, Response, status
from sqlalchemy import text

from services.db import workers
from services.worker.broker import broker_status

from ..schemas import Check, Health

router = APIRouter(tags=["health"])


def _database(request: Request) -> tuple[Check, int, dict[str, int]]:
    settings = request.app.state.settings
    try:
        with request.app.state.sessions() as session:
            session.execute(text("SELECT 1"))
            alive = len(workers.alive_workers(session, settings.worker_dead_after_s))
            unserved = workers.unserved_queues(session, settings.worker_dead_after_s)
        return Check(ok=True), alive, unserved
    except Exception as exc:  # noqa: BLE001 - any failure means "down", with its kind
        return Check(ok=False, error=f"{type(exc).__name__}: the database does not answer"), 0, {}


@router.get("/health", responses={503: {"model": Health}})
async def health(request: Request, response: Response) -> Health:
    """Whether the service can take and run jobs now."""
    database, alive, unserved = await anyio.to_thread.run_sync(_database, request)
    ok, error = await anyio.to_thread.run_sync(broker_status, request.app.state.celery)
    broker = Check(ok=ok, error=error)
    state, detail = "ok", ""
    if not (database.ok and broker.ok):
        state = "unavailable"
        down = [f"{name}: {check.error}" for name, check in (("database", database), ("broker", broker)) if not check.ok]
        detail = "the service cannot take jobs now; " + "; ".join(down)
    elif unserved:
        state = "degraded"
        waiting = ", ".join(f"{kind} ({jobs} job{'s' if jobs != 1 else ''})" for kind, jobs in sorted(unserved.items()))
        detail = f"jobs wait with no live worker for their device kind: {waiting}"
    if state != "ok":
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(
        status=state, database=database, broker=broker, workers_alive=alive, unserved_queues=unserved, detail=detail
    )
