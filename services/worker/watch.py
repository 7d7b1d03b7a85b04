"""Cancel and the wall-time limit take effect during an evaluation, not only between steps.

The loop checks a job's cancel flag and limits before every step and gives every evaluation,
the baseline's included, the time left as its deadline, which the evaluator keeps; a user who
cancels would still wait for the step in flight, and a call the evaluator failed to bound would
hold the worker. ``JobWatch`` reads the job's row every ``interval_s`` in a thread of its own and
ends the evaluator call in flight (``Evaluator.abort``) when the job is cancelled, when this run
no longer holds it, or when a call still runs ``grace_s`` past the wall-time deadline.
``WatchedSink`` then ends the job ``cancelled`` or ``stopped`` with that reason, whatever the loop
concluded from the stopped call."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from services.db.models import Job

log = logging.getLogger(__name__)


class WatchedEvaluator:
    """An evaluator whose calls into the ranks are known while they run, so that only a call in
    flight is aborted. Everything else is the evaluator's own."""

    _TRACKED = frozenset({"evaluate", "baseline", "analyze", "reference_io"})

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self._lock = threading.Lock()
        self.call_started: float | None = None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.evaluator, name)
        if name not in self._TRACKED:
            return attr

        def tracked(*args, **kwargs):
            with self._lock:
                self.call_started = time.monotonic()
            try:
                return attr(*args, **kwargs)
            finally:
                with self._lock:
                    self.call_started = None

        return tracked

    def abort_call(self, reason: str) -> bool:
        """Abort the call in flight; False when none is."""
        with self._lock:
            if self.call_started is None:
                return False
            self.evaluator.abort(reason)
            return True


class JobWatch:
    """Watches one run of a job (``with JobWatch(...) as watch:``); ``fired`` holds the final
    state and reason once it has stopped a call."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        job_id: str,
        attempt: int,
        evaluator: WatchedEvaluator,
        max_wall_s: float | None,
        *,
        interval_s: float = 0.5,
        grace_s: float = 2.0,
    ):
        self.sessions = sessions
        self.job_id = job_id
        self.attempt = attempt
        self.evaluator = evaluator
        self.max_wall_s = max_wall_s
        self.deadline = None if max_wall_s is None else time.monotonic() + max_wall_s
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.fired: tuple[str, str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{job_id}", daemon=True)

    def __enter__(self) -> "JobWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - a database that is away for a moment: look again
                log.warning("job %s: cannot read its cancel flag now (%s)", self.job_id, type(exc).__name__)

    def check(self) -> None:
        """One look: abort the call in flight if the job must stop."""
        with self.sessions() as session:
            job = session.get(Job, self.job_id)
            held = job is not None and job.state == "running" and job.attempts == self.attempt
            cancelled = held and job.cancel_requested
        if cancelled or not held:
            reason = "cancelled by the user" if cancelled else f"run {self.attempt} no longer holds the job"
            if self.evaluator.abort_call(reason):
                log.info("job %s: %s; the evaluation in flight was stopped", self.job_id, reason)
                self.fired = ("cancelled", reason)
            return
        if self.deadline is not None and time.monotonic() >= self.deadline + self.grace_s:
            reason = f"wall-time limit reached ({self.max_wall_s:.0f} s) during an evaluation"
            if self.evaluator.abort_call(reason):
                log.info("job %s: %s; it was stopped", self.job_id, reason)
                self.fired = ("stopped", reason)


class WatchedSink:
    """The run's sink, which ends the job with the watch's state and reason when the watch stopped
    a call and the loop then concluded ``failed`` (a reference stopped while timed reads as a
    failed reference to it)."""

    def __init__(self, sink, watch: JobWatch):
        self.sink = sink
        self.watch = watch

    def save(self, trajectory, step) -> None:
        if trajectory.state == "failed" and self.watch.fired is not None:
            trajectory.state, trajectory.stop_reason = self.watch.fired
        self.sink.save(trajectory, step)

    def cancel_requested(self) -> bool:
        return self.sink.cancel_requested()

    def finish(self, state: str, reason: str) -> bool:
        return self.sink.finish(state, reason)
