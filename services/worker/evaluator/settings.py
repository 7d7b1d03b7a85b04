"""Evaluator settings: trials, time limits and timing protocol (a plain dataclass, torch-alone)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field


@dataclass
class EvalSettings:
    #: Correctness trials with fresh random inputs before timing (one more runs after timing).
    trials: int = 5
    #: Shape profile the workload is built with (``ci`` or ``gpu``).
    shapes: str = "ci"
    # Time limits, in seconds, per phase. A rank that does not answer in time is killed.
    start_timeout_s: float = 120.0
    load_timeout_s: float = 300.0
    call_timeout_s: float = 60.0
    timing_timeout_s: float = 300.0
    # Timing protocol: warm-up calls, then as many timed calls as fit in the budget, clamped.
    warmup_iters: int = 3
    min_iters: int = 10
    max_iters: int = 200
    timing_budget_s: float = 1.0
    #: Bytes written between timed calls to evict the cache (0: on CUDA, twice the L2 size).
    flush_bytes: int = 0
    #: Time the candidate interleaved with the reference, call by call (the speedup then compares
    #: samples taken over the same seconds); off: the candidate alone, after the reference.
    interleave_timing: bool = True
    #: Without interleaving: time the reference again after the candidate and flag a drift.
    recheck_reference: bool = True
    #: A candidate faster than this many times the reference is flagged for a person to look at.
    suspicious_speedup: float = 10.0
    #: Outputs of one trial on one rank up to this size are judged in the pool process (which
    #: never imports candidate code); larger ones are compared on the rank's device against
    #: reference outputs computed there before the candidate was imported.
    judge_transfer_bytes: int = 32 << 20
    #: Fixed base seed for reproducing a run; None (the default) draws fresh seeds every
    #: evaluation, so that no candidate can be written against known inputs.
    seed: int | None = None
    #: Tolerance overrides by dtype name, e.g. {"bfloat16": (atol, rtol)}.
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Name of the hardware profile for the roofline ("auto": detected in the ranks).
    hardware_profile: str = "auto"
    # Limits applied to each rank process (see sandbox.py). 0 disables a limit.
    rank_memory_bytes: int = 0
    rank_open_files: int = 4096
    rank_cpu_seconds: int = 0
    #: Processes and threads per rank; a pool may have world_size times this, held by its pids
    #: cgroup (as root) or RLIMIT_NPROC (unprivileged; counts all the user's processes).
    rank_processes: int = 512
    #: The user ranks run as when this process is root ("": the caller's; the service uses
    #: ``sandbox.SERVICE_RANK_USER``). Workload files must be readable by it.
    rank_user: str = ""
    isolate_network: bool = True

    @classmethod
    def for_device(cls, device: str, **overrides) -> "EvalSettings":
        """Defaults that suit the device kind, then the given overrides."""
        base = cls()
        if device == "cuda":
            base.shapes = "gpu"
            base.warmup_iters = 5
            base.min_iters = 20
            base.max_iters = 500
            base.load_timeout_s = 600.0
        else:
            base.timing_budget_s = 0.4
            base.min_iters = 5
            base.max_iters = 100
            base.warmup_iters = 2
        return dataclasses.replace(base, **overrides)

    @classmethod
    def from_env(cls, device: str) -> "EvalSettings":
        """``for_device`` defaults with ``KLOOM_EVAL_<FIELD>`` environment overrides."""
        return cls.for_device(device, **env_overrides(cls, "KLOOM_EVAL_", skip=("tolerance", "seed")))


def _parse(type_name: str, raw: str):
    """``raw`` as a value of the annotated type (``int``, ``float``, ``bool``, ``list[int]``,
    ``list[str]``, optionally ``| None``; anything else stays a string)."""
    base = type_name.replace(" | None", "")
    if base.startswith("list["):
        item = int if base == "list[int]" else str
        return [item(part.strip()) for part in raw.split(",") if part.strip()]
    if base == "int":
        return int(raw)
    if base == "float":
        return float(raw)
    if base == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return raw


def env_overrides(cls, prefix: str, skip: tuple[str, ...] = ()) -> dict:
    """The ``<prefix><FIELD>`` environment variables set for the dataclass ``cls``'s fields, parsed
    by each field's annotation (shared by the evaluator's and the profiler's settings)."""
    overrides = {}
    for f in dataclasses.fields(cls):
        raw = os.environ.get(f"{prefix}{f.name.upper()}")
        if raw is None or f.name in skip:
            continue
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        try:
            overrides[f.name] = _parse(type_name, raw)
        except ValueError as exc:
            raise ValueError(f"{prefix}{f.name.upper()}={raw!r} is not a valid {type_name}: {exc}") from None
    return overrides
