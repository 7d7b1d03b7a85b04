"""Workers: each registered worker with the queues it serves, its GPUs (from NVML) and its last heartbeat."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter
from sqlalchemy import select

from kloom.clock import utcnow
from services.db.models import Worker

from ..deps import CurrentKey, SessionDep, SettingsDep
from ..schemas import WorkerPublic, WorkersPublic

router = APIRouter(prefix="/workers", tags=["workers"])


@router.get("")
def list_workers(_key: CurrentKey, session: SessionDep, settings: SettingsDep) -> WorkersPublic:
    """Workers, most recently heard from first; ``alive`` means a heartbeat within the dead-worker threshold."""
    cutoff = utcnow() - dt.timedelta(seconds=settings.worker_dead_after_s)
    rows = session.scalars(select(Worker).order_by(Worker.last_heartbeat.desc())).all()
    fields = ("id", "hostname", "queues", "gpus", "profile", "started_at", "last_heartbeat", "stopped_at")
    data = [
        WorkerPublic(**{f: getattr(w, f) for f in fields}, alive=w.stopped_at is None and w.last_heartbeat >= cutoff)
        for w in rows
    ]
    return WorkersPublic(data=data, count=len(data))
