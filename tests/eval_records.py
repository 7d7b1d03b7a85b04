"""The records a job holds (the evaluator's ``kloom.evaluation``, the profiler's ``kloom.profile``,
the traced ``agents.analysis``) as a test states them: what the test is about, given; every other
required field at a neutral value. Real records, which a ``Step`` or a ``Trajectory`` holds and
saves as the loop's would be."""

from __future__ import annotations

from typing import Any

from agents.analysis import Analysis
from kloom.evaluation import BaselineResult, ErrorInfo, EvalResult, TimeStats, TimingRecord
from kloom.profile import Profile
from kloom.roofline.model import RooflineRecord


def roofline(dominant: str = "compute", floor_ms: float = 1.0, **fields: Any) -> RooflineRecord:
    """A roofline record: the floor and its dominant term, other terms 0 unless given."""
    terms = dict(profile="test", flops=0.0, hbm_bytes=0.0, link_bytes=0.0, compute_ms=0.0, hbm_ms=0.0, link_ms=0.0, unoverlapped_ms=floor_ms)
    return RooflineRecord(**{**terms, **fields, "dominant": dominant, "floor_ms": floor_ms})


def timing(speedup: float, candidate_ms: float = 1.0, reference_ms: float | None = None, **fields: Any) -> TimingRecord:
    """A timing with no per-rank statistics unless given; the reference's time is the one the
    speedup implies unless given."""
    reference_ms = speedup * candidate_ms if reference_ms is None else reference_ms
    return TimingRecord(**{"reference": [], "candidate": [], **fields, "reference_ms": reference_ms, "candidate_ms": candidate_ms, "speedup": speedup})


def stats(median_ms: float, iters: int = 10, stdev_ms: float = 0.0) -> TimeStats:
    """Per-rank statistics around one median."""
    return TimeStats(median_ms, median_ms, median_ms, median_ms, median_ms, median_ms, stdev_ms, iters)


def evaluation(status: str = "correct", *, timing: TimingRecord | None = None, error: ErrorInfo | None = None, **fields: Any) -> EvalResult:
    """An evaluation of a candidate of workload ``w`` on two CPU ranks; ``correct`` follows the status."""
    base = dict(workload="w", world_size=2, device="cpu", correct=status == "correct")
    return EvalResult(status=status, **{**base, **fields}, timing=timing, error=error)


def baseline(reference_ms: float | None, *, status: str = "correct", **fields: Any) -> BaselineResult:
    """The reference of workload ``w`` timed alone on two CPU ranks."""
    return BaselineResult(status=status, **{**dict(workload="w", world_size=2, device="cpu"), **fields}, reference_ms=reference_ms)


def profile(summary: str = "", **fields: Any) -> Profile:
    """A PyTorch-profiler profile of a candidate of workload ``w`` on two CPU ranks."""
    base = dict(tool="torch_profiler", status="ok", reason="", workload="w", world_size=2, device="cpu")
    return Profile(**{**base, **fields, "summary": summary})


def analysis(**fields: Any) -> Analysis:
    """The traced structure of a workload on two CPU ranks: nothing found but what is given."""
    empty = dict(collectives=[], collective_sizes={}, ops=[], host_sync_ops=[], patterns=[], input_shapes=[], dtypes=[], mutated_inputs=[], output_shapes=[])
    counts = dict.fromkeys(("n_kernels", "n_elementwise", "n_matmul", "n_attention", "host_syncs", "total_input_bytes", "param_bytes", "collective_bytes"), 0)
    return Analysis(**{**dict(family="", world_size=2, device="cpu"), **empty, **counts, **fields})
