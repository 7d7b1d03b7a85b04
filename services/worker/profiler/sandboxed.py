"""A profiling launch in the evaluator's sandbox.

Profiling runs the workload's code and the candidate's, as the evaluator's ranks do, so it gets
their sandbox (``services/worker/evaluator/sandbox.py``): the command (the launcher, or ncu
around it) starts as "rank 0" of a pool of its own, with the pool's namespaces, read-only view
with the service's data hidden, unprivileged user, cgroups and limits, and the ranks it starts
are its children, inside the same boundaries. The profile's directory is the pool's private
writable directory; the caller reads the ranks' outputs from it afterwards.

Before, the profiler's launches got the scrubbed environment only, and a service job profiled its
first correct candidate (the reference's copy runs the uploaded workload's code): code that the
evaluator's sandbox kept from the service's data ran beside it, as the worker's user.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from kloom.processes import end_tree, log_tail
from services.worker.evaluator import sandbox
from services.worker.evaluator.settings import EvalSettings


@dataclass
class RunOutcome:
    """How a sandboxed command ended."""

    returncode: int | None
    timed_out: bool
    seconds: float
    output: str = ""


#: The processes of a profiling pool beyond its ranks: the launcher and ncu.
EXTRA_PROCESSES = 2


def run_sandboxed(
    cmd: list[str],
    *,
    settings: EvalSettings,
    device: str,
    world_size: int,
    workdir: str | os.PathLike,
    timeout_s: float,
    log_path: str | os.PathLike,
) -> RunOutcome:
    """Run ``cmd`` (which starts ``world_size`` ranks) in a sandboxed pool whose private directory
    is ``workdir``, with a rank's scrubbed environment, under a hard timeout; on expiry, or at the
    end, kill it and everything it started. A sandbox that cannot be set up is an outcome with the
    reason, never a launch without it."""
    started = time.monotonic()
    workdir = str(workdir)
    isolation = sandbox.PoolIsolation(settings, world_size + EXTRA_PROCESSES, device, workdir, role="profile")
    proc = None
    try:
        isolation.prepare()
        if isolation.user is not None:
            _hand_over(workdir, isolation.user.pw_uid, isolation.user.pw_gid)
        env = sandbox.rank_environment(workdir, {}, cache_dir=isolation.cache_dir())
        proc, status = isolation.spawn(0, cmd, env, workdir, str(log_path))
        isolation.started(0, proc.pid, status, settings.start_timeout_s)
        timed_out = False
        try:
            proc.wait(max(0.0, timeout_s - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            timed_out = True
        return RunOutcome(
            returncode=None if timed_out else proc.returncode,
            timed_out=timed_out,
            seconds=time.monotonic() - started,
            output=log_tail(str(log_path), 20_000),
        )
    except (sandbox.SandboxError, OSError) as exc:
        return RunOutcome(returncode=1, timed_out=False, seconds=time.monotonic() - started,
                          output=f"the profiling sandbox could not be set up: {exc}")
    finally:
        if proc is not None:
            end_tree(proc)
        isolation.release()


def _hand_over(workdir: str, uid: int, gid: int) -> None:
    """The profile's directory and what the worker wrote in it (specs, the candidate) go to the
    rank user, as a pool's directory does: the ranks write their outputs there."""
    for root, dirs, files in os.walk(workdir):
        os.chown(root, uid, gid)
        for name in files:
            os.chown(os.path.join(root, name), uid, gid)

