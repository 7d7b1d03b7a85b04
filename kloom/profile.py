"""The profile of one evaluated candidate (or reference): what the hardware says about it.

The profiler (``services.worker.profiler``) writes these records; a job's ``Step`` keeps one
(``agents.records``), and the knowledge base and the reports read them. They live in the core
beside the evaluator's records (``kloom.evaluation``) so that every layer can hold them without
importing the profiler. Plain dataclasses importing the standard library alone (no pydantic, no
torch), so that profiling runs on GPU images with torch alone; a ``Profile`` round-trips through
``to_dict`` / ``from_dict`` as JSON, like the evaluator's records.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from kloom.evaluation import dataclass_from_dict

Tool = Literal["ncu", "torch_profiler", "none"]
Status = Literal["ok", "unavailable", "failed", "timeout"]
PROFILE_VERSION = 1


@dataclass
class Breakdown:
    """One rank's profiled window, in microseconds (``services.worker.profiler.timeline.breakdown``
    computes it from the rank's events)."""

    window_us: float
    busy_us: float
    compute_us: float
    communication_us: float
    exposed_communication_us: float

    @property
    def communication_share(self) -> float:
        return self.communication_us / self.busy_us if self.busy_us > 0 else 0.0

    @property
    def exposed_share(self) -> float:
        return self.exposed_communication_us / self.busy_us if self.busy_us > 0 else 0.0

    @property
    def idle_share(self) -> float:
        return max(0.0, self.window_us - self.busy_us) / self.window_us if self.window_us > 0 else 0.0


@dataclass
class KernelStat:
    """One kernel (GPU) or operator (CPU), summed over the profiled iterations and ranks."""

    name: str
    calls: int
    total_us: float
    mean_us: float
    #: fraction of all kernel (or operator) time on the profiled ranks, 0..1
    share: float
    communication: bool = False
    #: coarse kind: communication, gemm, attention, copy, reduction, elementwise, triton, other
    category: str = "other"
    # Nsight Compute, where the kernel was replayed (None otherwise). Percentages of peak.
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = None
    #: compute-bound, memory-bound (DRAM), memory-bound (L1/L2), latency-bound, communication
    bottleneck: str = ""
    #: ncu's own words (its Speed-of-Light rule), or how the label was derived
    bottleneck_detail: str = ""
    #: other ncu metrics kept as read (grid and block size, NVLink bytes, ...)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RankTimeline(Breakdown):
    """One rank's profiled window from the PyTorch profiler (microseconds): the breakdown of
    ``Breakdown`` with the rank and the number of iterations it covers."""

    rank: int = 0
    iterations: int = 0


@dataclass
class Profile:
    """Hardware feedback for one candidate on one workload and world size."""

    #: the tool whose kernel metrics this profile holds
    tool: Tool
    status: Status
    #: why the status is what it is, in words (``ncu not found``, ``ERR_NVGPUCTRPERM: ...``)
    reason: str
    workload: str
    world_size: int
    device: str
    candidate_sha256: str = ""
    #: ranks whose kernels ncu replayed (empty without ncu)
    ranks_profiled: list[int] = field(default_factory=list)
    #: ranks whose timeline the PyTorch profiler recorded
    ranks_timed: list[int] = field(default_factory=list)
    kernels: list[KernelStat] = field(default_factory=list)
    #: union of communication time over busy time, worst rank (0..1)
    communication_share: float | None = None
    #: communication time no compute overlaps, over busy time, worst rank (0..1)
    exposed_communication_share: float | None = None
    #: time in the profiled window with nothing running, worst rank (0..1): launch-bound steps
    idle_share: float | None = None
    timelines: list[RankTimeline] = field(default_factory=list)
    #: NVLink / peer traffic where counters exist: {"source": "nvml" | "ncu", ...}
    link: dict[str, Any] = field(default_factory=dict)
    #: NVML samples taken during the timeline run (``NvmlSampler.summary()``)
    nvml: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    summary: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    version: int = PROFILE_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        return dataclass_from_dict(cls, data)

    def top(self, n: int = 3, communication: bool | None = None) -> list[KernelStat]:
        """The ``n`` kernels with the most time, optionally only (or no) communication ones."""
        chosen = [k for k in self.kernels if communication is None or k.communication == communication]
        return sorted(chosen, key=lambda k: -k.total_us)[:n]


_ANON = re.compile(r"\(anonymous namespace\)::")


def kernel_key(name: str) -> str:
    """A kernel's bare function name, for matching names across tools.

    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` becomes
    ``vectorized_elementwise_kernel``; a plain name (``nvjet_tst_...``, ``triton_poi_fused_0``)
    stays as it is.
    """
    text = _ANON.sub("", name.strip())
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    cut = len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = text[:cut]
    plain = []
    depth = 0
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            plain.append(ch)
    bare = "".join(plain).strip()
    return bare.rsplit("::", 1)[-1].split()[-1] if bare else name
