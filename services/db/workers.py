"""Which workers live and which device kinds they serve: for ``/health``, for refusing a job no
worker could ever run, for telling a queued job's owner that it waits for a worker, and for
``kloom up`` to say at once that the worker it saw die is gone."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from kloom.clock import utcnow

from .models import Job, Worker


def alive_workers(session: Session, dead_after_s: float, now: dt.datetime | None = None) -> list[Worker]:
    """Workers that heartbeat within ``dead_after_s`` and have not said they stopped."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=dead_after_s)
    return list(session.scalars(select(Worker).where(Worker.last_heartbeat >= cutoff, Worker.stopped_at.is_(None))))


def live_kinds(session: Session, dead_after_s: float) -> set[str]:
    return {q for w in alive_workers(session, dead_after_s) for q in w.queues}


def served_kinds(session: Session) -> set[str]:
    """Device kinds any worker registered here has ever served (alive or not)."""
    return {q for queues in session.scalars(select(Worker.queues)) for q in queues or []}


def unserved_queues(session: Session, dead_after_s: float) -> dict[str, int]:
    """Device kinds with queued or running jobs and no live worker to run them: jobs per kind."""
    live = live_kinds(session, dead_after_s)
    rows = session.execute(
        select(Job.device_kind, func.count()).where(Job.state.in_(("queued", "running"))).group_by(Job.device_kind)
    ).all()
    return {kind: count for kind, count in rows if kind not in live}


def waiting_notice(kind: str, live: set[str]) -> str:
    """What a queued job's owner reads while no live worker serves its device kind ("" if one does)."""
    if kind in live:
        return ""
    return f"no worker that serves {kind} is running: the job waits until one starts"


def mark_stopped(session: Session, hostname: str, pid: int) -> int:
    """The worker process ``pid`` on ``hostname`` is known to be dead (its supervisor saw it die):
    mark it stopped, so that the sweep hands its job on at its next pass. Returns rows changed."""
    return session.execute(
        update(Worker)
        .where(Worker.hostname == hostname, Worker.pid == pid, Worker.stopped_at.is_(None))
        .values(stopped_at=utcnow())
    ).rowcount
