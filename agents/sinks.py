"""Where a job's trajectory goes after every step: the ``TrajectorySink`` protocol the loop talks
to, and ``FileSink`` (a directory: the CLI and the batch runner). The service's sink is
``services.db.sink.DBSink``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from .records import Step, Trajectory


class TrajectorySink(Protocol):
    def save(self, trajectory: Trajectory, step: Step | None) -> None:
        """Persist the trajectory after a step (``step``) or a change of state (``None``)."""

    def cancel_requested(self) -> bool:
        """Polled before every step."""


class FileSink:
    """Saves ``trajectory.json`` (atomically) and ``best_kernel.py`` in a directory after every step."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cancel_file = self.directory / "CANCEL"

    @property
    def trajectory_path(self) -> Path:
        return self.directory / "trajectory.json"

    def load(self) -> Trajectory | None:
        if not self.trajectory_path.is_file():
            return None
        return Trajectory.from_dict(json.loads(self.trajectory_path.read_text()))

    def save(self, trajectory: Trajectory, step: Step | None) -> None:
        tmp = self.trajectory_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(trajectory.to_dict(), indent=1))
        os.replace(tmp, self.trajectory_path)
        best = trajectory.best_step
        if best is not None and best.candidate_code:
            path = self.directory / "best_kernel.py"
            if not path.is_file() or path.read_text() != best.candidate_code:
                path.write_text(best.candidate_code)

    def cancel_requested(self) -> bool:
        return self.cancel_file.exists()
