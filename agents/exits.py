"""How a job ends: the loop's exits, each a typed exception that carries the job's final state,
and the errors a role raises to end the job rather than fail one step."""

from __future__ import annotations

from typing import ClassVar

from .records import JobState, Usage


class JobExit(Exception):
    """The job ends here in ``state``; the message is its stop reason. ``usage``: model calls that
    produced no step (charged to the trajectory's overhead)."""

    state: ClassVar[JobState]

    def __init__(self, reason: str, usage: Usage | None = None):
        super().__init__(reason)
        self.reason = reason
        self.usage = usage or Usage()


class JobSucceeded(JobExit):
    """The search is over (the step limit, or nothing left to try); it fails after all when no
    step was correct."""

    state = "succeeded"


class JobStopped(JobExit):
    """A limit (wall time, tokens, money) or an outage cut the search short."""

    state = "stopped"


class JobFailed(JobExit):
    """The job cannot run (a broken workload or reference, bad model settings)."""

    state = "failed"


class JobCancelled(JobExit):
    state = "cancelled"


class FatalRoleError(Exception):
    """A role's error that no further step can fix (bad credentials, say): the job fails."""


class RoleUnavailable(Exception):
    """A role's service stayed down through every retry: the job stops without failing."""
