"""``DBSink``: the optimization loop's ``TrajectorySink`` for the service.

Each ``save`` is one transaction: the step row, its event, the job's denormalised best and cost,
and a state change with its event. Writes are fenced by the run's attempt number, so that a worker
the sweep gave up on (it was only slow) cannot write over the run that replaced it. While the
database is unreachable (a restart), each call waits for it and tries its whole transaction
again, so that a run outlives the outage with nothing half-written and nothing recorded twice.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from agents.records import FINISHED_STATES, Step, Trajectory

from . import jobs as job_ops
from .models import Job, StepRecord

log = logging.getLogger(__name__)

#: How long a run waits for an unreachable database before its job fails (a restart takes seconds).
OUTAGE_S = 300.0


class LeaseLost(RuntimeError):
    """This run no longer holds the job (the sweep requeued it, or it finished elsewhere)."""


def database_unreachable(exc: BaseException) -> bool:
    """A lost or refused connection, not a refused statement."""
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def waiting_for_database(what: str, outage_s: float = OUTAGE_S) -> Retrying:
    """Calls a function again while the database is unreachable, for up to ``outage_s``. Use it
    for whole transactions only: each try must start from nothing."""
    return Retrying(
        retry=retry_if_exception(database_unreachable),
        stop=stop_after_delay(outage_s),
        wait=wait_exponential(multiplier=0.2, max=5.0),
        before_sleep=lambda state: log.warning(
            "%s: the database is unreachable (%s); trying again", what, type(state.outcome.exception()).__name__
        ),
        reraise=True,
    )


class DBSink:
    """Saves a job's trajectory to the database after each step and state change."""

    def __init__(self, sessions: sessionmaker[Session], job_id: str, attempt: int, outage_s: float = OUTAGE_S):
        self.sessions = sessions
        self.job_id = job_id
        self.attempt = attempt
        self.outage_s = outage_s

    def _retrying(self) -> Retrying:
        # A save is one transaction and idempotent (a step index is recorded once), so trying
        # it again after a commit whose outcome was lost is safe.
        return waiting_for_database(f"job {self.job_id}", self.outage_s)

    def _held(self, job: Job | None) -> bool:
        return job is not None and job.state == "running" and job.attempts == self.attempt

    def save(self, trajectory: "Trajectory", step: "Step | None") -> None:
        """Record ``step`` (once, whatever happens) and the trajectory's state."""
        self._retrying()(self._save, trajectory, step)

    def _save(self, trajectory: "Trajectory", step: "Step | None") -> None:
        with self.sessions() as session, session.begin():
            job = session.get(Job, self.job_id, with_for_update=True)
            if not self._held(job):
                raise LeaseLost(f"job {self.job_id} is no longer held by attempt {self.attempt}")
            if step is not None:
                data = json_safe(step.to_dict())
                job_ops.record_step(session, self.job_id, data, json_safe(step.speedup))
            best = trajectory.best_step
            meta = trajectory.to_dict()
            meta.pop("steps", None)
            # Derived, for the job's record: what the job found, in the words of every report.
            meta["outcome"], meta["result_speedup"] = trajectory.outcome, trajectory.result_speedup
            job.trajectory = json_safe(meta)
            job.num_steps = session.scalar(select(func.count()).select_from(StepRecord).where(StepRecord.job_id == self.job_id))
            job.best_step_index = best.index if best else None
            job.best_speedup = json_safe(trajectory.best_speedup)
            job.best_fraction_of_floor = json_safe(best.fraction_of_floor) if best else None
            job.cost_usd = trajectory.usage.cost_usd
            job.updated_at = job_ops.utcnow()
            if trajectory.state in FINISHED_STATES:
                session.flush()
                job_ops.finish(session, self.job_id, self.attempt, trajectory.state, json_safe(trajectory.stop_reason))

    def cancel_requested(self) -> bool:
        """True once the user asked to cancel, or when this run lost the job (either way: stop)."""

        def read() -> bool:
            with self.sessions() as session:
                job = session.get(Job, self.job_id)
                return not self._held(job) or job.cancel_requested

        return self._retrying()(read)

    def finish(self, state: str, reason: str) -> bool:
        """End the run with ``state`` when the loop could not (it raised, or ran out of time)."""

        def write() -> bool:
            with self.sessions() as session, session.begin():
                return job_ops.finish(session, self.job_id, self.attempt, state, json_safe(reason)) is not None

        return self._retrying()(write)


def json_safe(value: Any) -> Any:
    """``value`` as PostgreSQL stores it: NaN and infinities as None (its JSON has no such
    numbers), and text without NUL characters or lone surrogates (its text has neither), which a
    candidate's code or a rank's log may well hold: they become U+FFFD."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
