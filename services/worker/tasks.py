"""The task that runs a job: thin, and idempotent by the job's state.

A delivery claims the job (``services.db.jobs.claim``): a finished job, or one running on a live
worker, makes it return at once; a queued job, or one whose worker died, is run (resumed from its
recorded steps). The task writes the workload's source to a private temporary file and calls
``agents.loop.run_job`` with a ``DBSink``. Workload and candidate code run only in the
evaluator's rank processes, never in this process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
from pathlib import Path

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from agents.records import FINISHED_STATES, Trajectory
from kloom.db import create_db_engine, session_factory
from kloom.settings import Settings
from services.db import jobs as job_ops
from services.db.models import Job, StepRecord
from services.db.sink import DBSink, LeaseLost, waiting_for_database

from .broker import RUN_JOB, dispatch
from .watch import JobWatch, WatchedEvaluator, WatchedSink

log = logging.getLogger(__name__)


def register(app: Celery) -> None:
    @app.task(name=RUN_JOB, bind=True, acks_late=True, ignore_result=True)
    def run_job_task(self, job_id: str) -> str:
        return execute_job(app, job_id, worker_id=self.request.hostname or "unknown")


def sessions_for(app: Celery) -> sessionmaker[Session]:
    """This process's session factory (made after the fork: pooled connections do not cross it)."""
    cached = getattr(app, "kloom_sessions", None)
    if cached is None or cached[0] != os.getpid():
        engine = create_db_engine(app.kloom_settings.db_url)
        cached = app.kloom_sessions = (os.getpid(), session_factory(engine))
    return cached[1]


def execute_job(app: Celery, job_id: str, *, worker_id: str) -> str:
    """Claim and run one job; returns what happened, in words (for the worker's log)."""
    settings: Settings = app.kloom_settings
    sessions = sessions_for(app)

    def take() -> job_ops.Claim:
        with sessions() as session, session.begin():
            return job_ops.claim(
                session, job_id, worker_id, max_attempts=settings.max_attempts, dead_after_s=settings.worker_dead_after_s
            )

    claim = waiting_for_database(f"job {job_id}")(take)
    if claim.action != "run":
        log.info("job %s: nothing to do (%s)", job_id, claim.reason)
        return claim.reason
    log.info("job %s: %s as attempt %d on %s", job_id, claim.reason, claim.attempt, worker_id)
    sink = DBSink(sessions, job_id, claim.attempt)
    try:
        trajectory = _run(sessions, job_id, sink, settings)
    except LeaseLost as exc:
        log.warning("job %s: %s; stopping this run", job_id, exc)
        return "lease lost"
    except SoftTimeLimitExceeded:
        sink.finish("stopped", f"the job's time limit ({settings.job_soft_time_limit_s} s) was reached")
        return "time limit"
    except Exception as exc:  # noqa: BLE001 - any failure of the run fails the job, with its reason
        from services.worker.evaluator import EvaluatorUnavailable  # lazy: keeps torch out of the API and the worker's main process

        if isinstance(exc, EvaluatorUnavailable):
            return _requeue_after_machine_fault(app, sessions, job_id, claim.attempt, str(exc))
        log.exception("job %s failed", job_id)
        sink.finish("failed", f"{type(exc).__name__}: {exc}"[:2000])
        return "failed"
    if trajectory.state not in FINISHED_STATES:
        sink.finish("failed", f"the loop returned in state {trajectory.state!r}")
    return trajectory.state


def _run(sessions: sessionmaker[Session], job_id: str, sink: DBSink, settings: Settings):
    # The loop and the evaluator import torch: only the process that runs a job loads them (the
    # worker's main process and the API, which import this module, stay without it).
    from agents.loop import run_job  # lazy: keeps torch out of the API and the worker's main process
    from services.worker.evaluator import Evaluator  # lazy: keeps torch out of the API and the worker's main process
    from services.worker.profiler import job_profiler  # lazy: keeps torch out of the API and the worker's main process

    def load() -> tuple[Job, list[dict]]:
        with sessions() as session:
            job = session.get(Job, job_id)
            return job, [s.data for s in session.scalars(select(StepRecord).where(StepRecord.job_id == job_id).order_by(StepRecord.index))]

    job, steps = waiting_for_database(f"job {job_id}")(load)
    # The workload runs in the rank processes; here it is only written to a file they can read.
    with tempfile.TemporaryDirectory(prefix="kloom-job-") as tmp:
        path = Path(tmp) / f"{_file_stem(job.workload_name)}.py"
        path.write_text(job.workload_source, encoding="utf-8")
        path.chmod(0o600)
        spec = job_ops.job_spec(job, str(path))
        eval_settings = rank_settings(spec.device, settings, job.owner_key_id, tmp)
        resume = None
        if job.trajectory is not None or steps:
            data = dict(job.trajectory or {})
            data.update(job=dataclasses.asdict(spec), steps=steps)
            resume = Trajectory.from_dict(data)
        with Evaluator(spec.device, eval_settings) as evaluator:
            watched = WatchedEvaluator(evaluator)
            with JobWatch(sessions, job_id, sink.attempt, watched, spec.limits.max_wall_s) as watch:
                kb = open_kb(sessions) if spec.use_kb else None
                profiler = job_profiler(spec.profile, spec.device, spec.shapes, evaluator.devices, evaluator.settings)
                return run_job(spec, WatchedSink(sink, watch), evaluator=watched, resume=resume, kb=kb, profiler=profiler)


def rank_settings(device: str, settings: Settings, owner: str, job_dir: str):
    """The evaluator's settings for one job: ``KLOOM_EVAL_*``, and the service's sandbox: ranks
    as an unprivileged user (a root worker), the service's data hidden, the temporary directories
    covered but for the job's own (its workload, handed to the rank user), compiler caches of
    the job owner's own."""
    from services.worker.evaluator import EvalSettings, sandbox  # lazy: keeps torch out of the API and the worker's main process

    base = EvalSettings.from_env(device)
    eval_settings = sandbox.for_service(
        dataclasses.replace(
            base,
            hidden_paths=[*base.hidden_paths, *settings.private_paths()],
            private_tmp=True,
            readable_paths=[*base.readable_paths, job_dir],
            cache_scope=f"key-{owner}",
        )
    )
    sandbox.share_with_ranks([job_dir, *(str(p) for p in Path(job_dir).iterdir())], eval_settings)
    return eval_settings


def _file_stem(name: str) -> str:
    # The evaluator names a workload after its file when the file sets no NAME.
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:100] or "workload"


def _requeue_after_machine_fault(app: Celery, sessions, job_id: str, attempt: int, why: str) -> str:
    """The rank processes could not start: the machine's fault, not the job's. Give the job back."""
    log.error("job %s: the evaluator could not start (%s); requeuing", job_id, why)
    with sessions() as session, session.begin():
        job = session.get(Job, job_id)
        if job is None or job.state != "running" or job.attempts != attempt:
            return "lease lost"
        settings: Settings = app.kloom_settings
        if job.attempts >= settings.max_attempts:
            job_ops.fail(session, job, f"the evaluator could not start after {job.attempts} attempts: {why}"[:2000])
            return "failed"
        job_ops.requeue(session, job, f"the evaluator could not start on {job.worker_id}: {why}"[:2000])
        queue = job.device_kind
    dispatch(app, job_id, queue)
    return "requeued"


def open_kb(sessions: sessionmaker[Session]):
    """The loop's knowledge base over this service's database, where the ``kb`` package is
    installed (its tables come with the migrations); else the loop runs without one."""
    try:
        from kb.adapter import KnowledgeBaseAdapter  # optional: the kb package may not be installed
    except ImportError:
        return None
    return KnowledgeBaseAdapter(sessions)
