"""The sweep: gives the jobs of dead workers to live ones, and fails what cannot go on.

- A running job whose worker stopped heartbeating is requeued (it resumes from its last recorded
  step), or failed with the reason once ``max_attempts`` workers have died running it.
- A running job with no step or state change for longer than the task's hard time limit is failed
  (its run was killed by the limit while its worker lives on).
- A queued job whose task was sent ``redispatch_after_s`` ago is sent again (a broker that lost
  it, e.g. a Redis restarted without persistence); duplicate tasks are harmless (``claim``).

Run periodically by a worker started with ``--sweep`` (``kloom up`` does), or by several: every
change is a compare-and-set, so that concurrent sweeps never both requeue a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from kloom.clock import utcnow
from kloom.settings import Settings
from services.db import jobs as job_ops

log = logging.getLogger(__name__)

#: How long past the hard time limit a silent job is left before it is failed.
STUCK_GRACE_S = 300.0


@dataclass
class SweepReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)


def sweep(sessions: sessionmaker[Session], settings: Settings, send: Callable[[str, str], None]) -> SweepReport:
    """One pass; ``send(job_id, queue)`` dispatches a task (called after the changes commit)."""
    report = SweepReport()
    to_send: list[tuple[str, str]] = []
    now = utcnow()
    with sessions() as session, session.begin():
        for job in job_ops.stale_running_jobs(session, settings.worker_dead_after_s, now):
            why = f"worker {job.worker_id} stopped heartbeating"
            if job.attempts >= settings.max_attempts:
                if job_ops.fail(session, job, f"{why}; gave up after {job.attempts} attempts"):
                    report.failed.append(job.id)
            elif job_ops.requeue(session, job, f"{why}; resuming from step {job.num_steps}"):
                report.requeued.append(job.id)
                to_send.append((job.id, job.device_kind))
        for job in job_ops.stuck_running_jobs(session, settings.job_time_limit_s + STUCK_GRACE_S, now):
            if job_ops.fail(session, job, f"no progress for {settings.job_time_limit_s} s: the job's time limit killed it"):
                report.failed.append(job.id)
        for job in job_ops.lost_queued_jobs(session, settings.redispatch_after_s, now):
            job.dispatched_at = now
            report.redispatched.append(job.id)
            to_send.append((job.id, job.device_kind))
    for job_id, queue in to_send:
        send(job_id, queue)
    if report.requeued or report.failed:
        log.warning("sweep: requeued %s, failed %s", report.requeued, report.failed)
    return report
