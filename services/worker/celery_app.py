"""The Celery application: built from ``Settings`` by ``create_celery_app`` (no app at import time).

One queue per device kind (``cpu``, ``cuda-h200x4``, ...). Jobs run for hours on GPUs that a
worker owns alone, so a worker takes one task at a time (prefetch 1, concurrency 1) and
acknowledges it only when it ends (``acks_late``); Redis's visibility timeout is longer than the
longest job so that it never hands a running task to a second worker. The job's state in the
database, not the broker, decides what a delivered task does (``services.db.jobs.claim``).
"""

from __future__ import annotations

import os

from celery import Celery, signals

from kloom.settings import Settings

from . import hardening, heartbeat, tasks


def create_celery_app(settings: Settings | None = None) -> Celery:
    """A Celery app for ``settings`` with kloom's task registered and its worker steps added."""
    settings = settings or Settings()
    app = Celery("kloom", broker=settings.broker, set_as_current=False)
    transport: dict = {"visibility_timeout": settings.visibility_timeout_s}
    if settings.embedded_broker:
        folder = settings.broker_folder
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        transport.update(
            data_folder_in=str(folder / "queue"),
            data_folder_out=str(folder / "queue"),
            processed_folder=str(folder / "processed"),
            control_folder=str(folder / "control"),
            store_processed=False,
        )
    if settings.broker_key_prefix:
        transport["global_keyprefix"] = settings.broker_key_prefix
    app.conf.update(
        broker_transport_options=transport,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        task_soft_time_limit=settings.job_soft_time_limit_s,
        task_time_limit=settings.job_time_limit_s,
        task_ignore_result=True,
        task_default_queue="cpu",
        task_serializer="json",
        accept_content=["json"],
        # A submission waits at most a few seconds for a broker that is down, then answers 503.
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0},
        worker_send_task_events=False,
        # Remote control needs fanout exchanges, which the embedded filesystem broker does not keep.
        worker_enable_remote_control=not settings.embedded_broker,
        worker_hijack_root_logger=False,
    )
    app.kloom_settings = settings
    # In the worker's main process, before it forks the child that runs jobs.
    signals.worker_init.connect(lambda **_: hardening.protect_process(), weak=False, dispatch_uid="kloom.protect_process")
    tasks.register(app)
    app.steps["worker"].add(heartbeat.HeartbeatStep)
    return app


def worker_name(queues: list[str]) -> str:
    """A node name unique to this worker process: the sweep tells workers apart by it."""
    return f"kloom-{'+'.join(queues)}-{os.getpid()}-{os.urandom(3).hex()}@{os.uname().nodename}"
