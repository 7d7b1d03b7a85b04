"""The profiler a job's verifier calls, under the job's policy: what the worker task, the batch
runner and ``kloom optimize`` pass to ``agents.loop.run_job``."""

from __future__ import annotations

from typing import Callable

from services.worker.evaluator.settings import EvalSettings

from .profiling import profile
from .records import Profile
from .settings import ProfileSettings


def job_profiler(policy: str, device: str, shapes: str | None, devices: list[int] | None = None,
                 sandbox_settings: EvalSettings | None = None) -> Callable[..., Profile] | None:
    """A profiler for the policy ``new_best`` or ``every_correct`` (None for ``none``), on the
    evaluator's ``devices``, in the sandbox of the evaluator's ranks (``sandbox_settings``: the
    job's evaluator's settings; default: the device's). ``shapes`` None: the device's default
    (gpu on cuda, ci on cpu).

    Profiles run in fresh processes launched for the purpose (Nsight Compute has to start the
    process it measures), never in the evaluator's warm pool."""
    if policy == "none":
        return None
    settings = ProfileSettings.from_env(device)
    settings.candidates = "every_correct" if policy == "every_correct" else "new_best"
    settings.shapes = shapes or ("gpu" if device == "cuda" else "ci")
    settings.devices = devices

    def run(workload: str, code: str, *, world_size: int, device: str) -> Profile:
        return profile(workload, code, world_size=world_size, device=device, settings=settings, sandbox_settings=sandbox_settings)

    return run
