"""What the API and the worker say to the broker: send a job's task to its device kind's queue,
whether the broker answers, how many messages wait. The Celery app itself is built by
``celery_app.create_celery_app``, which registers the task that ``RUN_JOB`` names."""

from __future__ import annotations

from celery import Celery

#: The name of the task that runs a job (``tasks.register``).
RUN_JOB = "kloom.run_job"


def dispatch(app: Celery, job_id: str, queue: str) -> None:
    """Send a job's task to its device kind's queue."""
    app.send_task(RUN_JOB, args=[job_id], queue=queue, routing_key=queue)


def broker_status(app: Celery) -> tuple[bool, str]:
    """Whether the broker answers now (``/health``), and what went wrong if not."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            return True, ""
    except Exception as exc:  # kombu raises transport-specific errors
        return False, f"{type(exc).__name__}: {exc}"


def queue_depths(app: Celery, queues: list[str]) -> dict[str, int]:
    """Messages waiting in each queue (``/metrics``); queues that cannot be read are left out."""
    depths: dict[str, int] = {}
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        for queue in queues:
            try:
                # kombu's virtual transports (Redis, filesystem) count a queue's messages with
                # _size; a passive declare would refuse a queue that no worker has bound yet.
                depths[queue] = int(channel._size(queue))
            except Exception:  # noqa: BLE001 - a broker that cannot count leaves the queue out
                continue
    return depths
