"""``kloom up``'s worker, kept alive: started as a child process, started again when it dies.

A worker killed with SIGKILL (or by the kernel's OOM killer) says nothing on its way out: the
supervisor marks it stopped in the database at once, so that the sweep of the worker it starts
next (which sweeps as soon as it is up) requeues its running job, which resumes from its last
recorded step. Restarts back off (1 s, doubling, up to 60 s) while the worker keeps dying young.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from kloom.db import create_db_engine, session_factory
from kloom.processes import exit_description
from kloom.settings import Settings
from services.db import workers

log = logging.getLogger(__name__)

#: A worker that lived this long before dying is restarted at once (its backoff starts over).
HEALTHY_AFTER_S = 60.0
MAX_BACKOFF_S = 60.0


class WorkerSupervisor:
    """Runs ``command`` as the worker and restarts it when it exits on its own."""

    def __init__(self, command: list[str], env: dict[str, str], settings: Settings, *,
                 preexec_fn: Callable[[], None] | None = None, on_restart: Callable[[int, int], None] | None = None):
        self.command = command
        self.env = env
        self.settings = settings
        self.preexec_fn = preexec_fn
        self.on_restart = on_restart  # (old pid, new pid), for the console
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-supervisor", daemon=True)

    def start(self) -> int:
        """Start the worker (and the thread that watches it); its pid."""
        self._thread.start()
        self._started.wait(30)
        return self.proc.pid if self.proc else -1

    def _spawn(self) -> subprocess.Popen:
        # Started from the watching thread: PR_SET_PDEATHSIG follows the thread that forked the
        # child, and this thread lives as long as the worker may.
        return subprocess.Popen(self.command, env=self.env, preexec_fn=self.preexec_fn)

    def _run(self) -> None:
        backoff = 1.0
        self.proc = self._spawn()
        self._started.set()
        while True:
            born = time.monotonic()
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            dead = self.proc.pid
            log.error("the worker (pid %d) died (%s); starting another", dead, exit_description(code))
            self._mark_stopped(dead)
            backoff = 1.0 if time.monotonic() - born >= HEALTHY_AFTER_S else min(backoff * 2, MAX_BACKOFF_S)
            if self._stopping.wait(backoff if self.restarts else 0):
                return
            self.proc = self._spawn()
            self.restarts += 1
            if self.on_restart:
                self.on_restart(dead, self.proc.pid)

    def _mark_stopped(self, pid: int) -> None:
        try:
            engine = create_db_engine(self.settings.db_url, pool=False)
            try:
                with session_factory(engine)() as session, session.begin():
                    workers.mark_stopped(session, os.uname().nodename, pid)
            finally:
                engine.dispose()
        except Exception as exc:  # noqa: BLE001 - the sweep finds a silent worker anyway, later
            log.warning("could not mark the dead worker stopped: %s", exc)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop supervising; ask the worker to finish (SIGTERM), then kill it."""
        self._stopping.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._thread.join(5)
