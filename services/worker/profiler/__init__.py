"""Hardware feedback for the agents: Nsight Compute, the PyTorch profiler's timeline and NVML.

Imports torch and the standard library only (``pynvml`` lazily), so that it runs on GPU images
that carry nothing else. Entry points: ``profile()`` for one candidate, ``job_profiler()`` for a job's verifier, ``gpu_inventory()`` for
a worker's heartbeat, ``NvmlSampler`` around timing. ``docs/profiling.md`` has the details.

The names below load on first use, so that ``python -m services.worker.profiler.launch`` starts
without importing torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "profile": "profiling",
    "Profile": "records",
    "KernelStat": "records",
    "RankTimeline": "records",
    "ProfileSettings": "settings",
    "NvmlSampler": "nvml",
    "gpu_inventory": "nvml",
    "job_profiler": "for_job",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
