"""Profiler settings: which candidates, which ranks, which tool, how long (a plain dataclass)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from services.worker.evaluator.settings import env_overrides

#: Nsight Compute sections read for every replayed kernel; NVLink sections are added where
#: ``ncu --list-sections`` offers them.
DEFAULT_SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "LaunchStats", "Occupancy")


@dataclass
class ProfileSettings:
    #: Which evaluated candidates get a profile: every correct one, or only a new best.
    candidates: Literal["every_correct", "new_best"] = "new_best"
    #: Preferred tool on CUDA; ``torch_profiler`` skips Nsight Compute (the timeline always runs).
    tool: Literal["ncu", "torch_profiler"] = "ncu"
    #: Ranks whose kernels ncu replays: ``all`` or a comma-separated list such as ``0`` or ``0,3``.
    ranks: str = "0"
    #: Hard limit in seconds on each launched run (the timeline run, then the ncu run); on expiry
    #: every process of the run is killed.
    timeout_s: float = 300.0
    #: Shape profile of the workload (``ci`` or ``gpu``).
    shapes: str = "ci"
    warmup_iters: int = 3
    #: Iterations recorded by the PyTorch profiler on every rank.
    iters: int = 5
    #: Iterations run between cudaProfilerStart/Stop under ncu (each kernel is replayed many times).
    ncu_iters: int = 1
    #: The ncu executable (a name looked up on PATH, or a path).
    ncu_path: str = "ncu"
    sections: list[str] = field(default_factory=lambda: list(DEFAULT_SECTIONS))
    #: Add the NVLink sections when this ncu lists them.
    nvlink_sections: bool = True
    #: Matching kernels skipped, then profiled, after profiling starts (warm-up is already over).
    ncu_launch_skip: int = 0
    ncu_launch_count: int = 40
    #: Extra case-insensitive substrings that mark a kernel as communication (kept out of replay).
    communication_patterns: list[str] = field(default_factory=list)
    #: Kernels listed in the profile.
    top_kernels: int = 10
    #: Sample NVML during the timeline run.
    nvml: bool = True
    nvml_interval_s: float = 0.05
    #: Fixed seed for model and inputs; None draws a fresh one.
    seed: int | None = None
    #: GPU index per rank; None: rank r uses GPU r.
    devices: list[int] | None = None

    def should_profile(self, *, correct: bool, new_best: bool) -> bool:
        """Whether an evaluated candidate gets a profile under the ``candidates`` policy."""
        if not correct:
            return False
        return self.candidates == "every_correct" or new_best

    def ncu_ranks(self, world_size: int) -> list[int]:
        """The ranks ncu replays, checked against ``world_size``."""
        if self.ranks.strip().lower() == "all":
            return list(range(world_size))
        ranks = sorted({int(r) for r in self.ranks.split(",") if r.strip()})
        bad = [r for r in ranks if not 0 <= r < world_size]
        if bad or not ranks:
            raise ValueError(f"profile ranks {self.ranks!r} do not fit world size {world_size}")
        return ranks

    @classmethod
    def for_device(cls, device: str, **overrides) -> "ProfileSettings":
        """Defaults that suit the device kind, then the given overrides."""
        base = cls()
        if device == "cuda":
            base.shapes = "gpu"
        else:
            base.timeout_s = 120.0
        return dataclasses.replace(base, **overrides)

    @classmethod
    def from_env(cls, device: str) -> "ProfileSettings":
        """``for_device`` defaults with ``KLOOM_PROFILE_<FIELD>`` environment overrides."""
        return cls.for_device(device, **env_overrides(cls, "KLOOM_PROFILE_"))
