"""Worker heartbeats (and, where asked, the periodic sweep), run as a Celery worker bootstep.

The heartbeat thread lives in the worker's main process, beside the child that runs the job: a
worker that is killed stops beating, and the sweep hands its job to another worker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from celery import bootsteps, signals
from sqlalchemy.orm import Session, sessionmaker

from kloom.clock import utcnow
from kloom.db import create_db_engine, session_factory
from kloom.roofline import detect_profile
from kloom.settings import Settings
from services.db.models import Worker
from services.worker.profiler.nvml import NvmlSampler, gpu_inventory as nvml_inventory

from .broker import dispatch
from .sweep import sweep

log = logging.getLogger(__name__)


def gpu_inventory() -> list[dict]:
    """This machine's GPUs from NVML (the profiler's reader), or none where it is not installed."""
    try:
        entries = list(nvml_inventory())
    except Exception as exc:  # noqa: BLE001 - a machine without a driver reports no GPUs
        log.warning("no GPU inventory: %s", exc)
        return []
    # Without NVML the reader returns one {"status": "unavailable", "reason": ...} entry: no GPUs.
    for entry in entries:
        if entry.get("status", "ok") != "ok":
            log.info("no GPUs: %s", entry.get("reason", "NVML unavailable"))
    return [e for e in entries if e.get("status", "ok") == "ok"]


def with_usage(gpus: list[dict]) -> list[dict]:
    """The inventory with what each GPU does now, read from NVML for the dashboard: utilisation,
    memory used, temperature, power and when they were read. Unchanged where NVML cannot say."""
    if not gpus:
        return gpus
    try:
        with NvmlSampler([g["index"] for g in gpus]) as sampler:
            pass  # entering and leaving takes one sample of each GPU
    except Exception as exc:  # noqa: BLE001 - a heartbeat goes out whatever NVML says
        log.debug("no GPU usage: %s", exc)
        return gpus
    now = utcnow().isoformat()
    out = []
    for gpu in gpus:
        rows = sampler.samples.get(gpu["index"]) or []
        if not rows:
            out.append(gpu)
            continue
        last = rows[-1]
        used = last.get("memory_used_gib")
        out.append(
            {
                **gpu,
                "utilization_pct": last.get("gpu_util_pct"),
                "memory_used_gib": round(used, 1) if used is not None else None,
                "temperature_c": last.get("temperature_c"),
                "power_w": last.get("power_w"),
                "sampled_at": now,
            }
        )
    return out


def profile_name(gpus: list[dict]) -> str:
    """The hardware profile the roofline uses on this machine. A GPU worker measures its own
    ceilings on first start (matmul rate, HBM, peer copy, collective bus bandwidth) and reuses
    the saved calibration for a week; the evaluator then reads that saved profile by name."""
    fallback = detect_profile({"gpu": gpus[0].get("name", "")} if gpus else {})
    if not gpus:
        return fallback
    try:
        from kloom.roofline.calibrate import load_or_calibrate  # lazy: keeps torch out of the API, which imports this module

        return load_or_calibrate("cuda", len(gpus)).name
    except Exception:  # noqa: BLE001 - the built-in profile serves until calibration works
        log.exception("calibration failed; using the built-in %s profile", fallback)
        return fallback


class Every(threading.Thread):
    """Calls ``fn`` now and then every ``interval`` seconds until stopped; errors are logged, not raised."""

    def __init__(self, name: str, interval: float, fn: Callable[[], object]):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.fn = fn
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.fn()
            except Exception:  # noqa: BLE001 - a database that is down for a while must not end the thread
                log.exception("%s failed; trying again in %.0f s", self.name, self.interval)
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()


class Heartbeat:
    """Registers a worker and refreshes its ``last_heartbeat``."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings, worker_id: str):
        self.sessions = sessions
        self.settings = settings
        self.worker_id = worker_id
        self.gpus: list[dict] = []

    def register(self) -> None:
        gpus = self.gpus = gpu_inventory()
        with self.sessions() as session, session.begin():
            row = session.get(Worker, self.worker_id) or Worker(id=self.worker_id)
            row.hostname = os.uname().nodename
            row.pid = os.getpid()
            row.queues = list(self.settings.worker_queues)
            row.gpus = gpus
            row.profile = profile_name(gpus)
            row.started_at = row.last_heartbeat = utcnow()
            row.stopped_at = None
            session.add(row)
        self._touch()

    def beat(self) -> None:
        gpus = with_usage(self.gpus)  # read before the transaction: NVML may take a moment
        with self.sessions() as session, session.begin():
            row = session.get(Worker, self.worker_id)
            if row is None:
                session.rollback()
                self.register()
                return
            row.last_heartbeat = utcnow()
            if gpus:
                row.gpus = gpus
        self._touch()

    def stopped(self) -> None:
        with self.sessions() as session, session.begin():
            row = session.get(Worker, self.worker_id)
            if row is not None:
                row.stopped_at = utcnow()

    def _touch(self) -> None:
        path = self.settings.heartbeat_file
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


class HeartbeatStep(bootsteps.StartStopStep):
    """Starts the heartbeat (and the sweep, with ``KLOOM_WORKER_SWEEP``) with the worker."""

    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.threads: list[Every] = []
        self.heartbeat: Heartbeat | None = None

    def start(self, worker) -> None:
        settings: Settings = worker.app.kloom_settings
        # No pooled connections: nothing the pool's child processes could inherit mid-use.
        sessions = session_factory(create_db_engine(settings.db_url, pool=False))
        self.heartbeat = Heartbeat(sessions, settings, worker.hostname)
        self._register(self.heartbeat)
        self.threads.append(Every("heartbeat", settings.heartbeat_interval_s, self.heartbeat.beat))
        if settings.worker_sweep:
            self.threads.append(
                Every("sweep", settings.sweep_interval_s, lambda: sweep(sessions, settings, lambda j, q: dispatch(worker.app, j, q)))
            )
        for thread in self.threads:
            thread.start()

        # Beat until the worker has finished its job (a warm shutdown waits for it), then say so.
        signals.worker_shutdown.connect(self._on_shutdown, sender=worker, weak=False)

    def _on_shutdown(self, sender=None, **_kwargs) -> None:
        for thread in self.threads:
            thread.stop()
        if self.heartbeat is not None:
            try:
                self.heartbeat.stopped()
            except Exception:  # noqa: BLE001 - the sweep finds a silent worker anyway
                log.warning("could not mark worker %s stopped", self.heartbeat.worker_id)

    @staticmethod
    def _register(heartbeat: Heartbeat) -> None:
        # The first registration waits for the database (a worker may start before it).
        for delay in (1, 2, 4, 8, 15):
            try:
                heartbeat.register()
                return
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot register worker yet (%s); again in %d s", exc, delay)
                time.sleep(delay)
        heartbeat.register()
