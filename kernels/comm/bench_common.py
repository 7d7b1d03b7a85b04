"""What the comm kernels' benchmarks share (GPU scripts; torch, triton, the standard library and
``kloom.roofline``, which is standard library only): timing on every rank, the floors a result is
read against, and the record each case produces.

Timing: each implementation is called ``warmup`` times, then ``iters`` times with all ranks
released together (a barrier, then CUDA events around one call); a rank's figure is its median,
the case's is the slowest rank's (``time_ms``). Implementations of one case run side by side in
one process, on the same inputs, after a correctness check against the reference implementation.

Floors (``floors``): ``overlap`` is max(compute alone, communication alone), both measured in the
same run (the issue's "overlap floor": a kernel that hid all communication behind its compute
would take as long as the slower of the two); ``model`` is the roofline's max(compute, HBM, link)
on the GPU's built-in profile (``kloom/roofline``). ``fraction`` = floor / measured.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from kloom.roofline.model import RooflineTerms, estimate
from kloom.roofline.profiles import builtin_profiles, profile_name_for_gpu


@dataclass
class Measured:
    """One case of one kernel at one world size, every implementation side by side."""

    kernel: str
    case: str
    world: int
    shape: dict
    ms: dict[str, float] = field(default_factory=dict)  # implementation -> slowest rank's median
    max_error: dict[str, float] = field(default_factory=dict)  # implementation -> max |diff| from the reference, over ranks
    floor_ms: dict[str, float] = field(default_factory=dict)  # "overlap", "model", and their parts
    best_ours: str = ""  # the fastest of kloom's configurations
    notes: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def time_ms(fn: Callable[[], object], iters: int = 20, warmup: int = 5) -> float:
    """The slowest rank's median milliseconds of ``fn``, every call started by all ranks together."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    median = torch.tensor([statistics.median(samples)], device="cuda", dtype=torch.float64)
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    return float(median)


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Max |got - want| over every rank (float64)."""
    diff = (got.double() - want.double()).abs().max().reshape(1) if got.numel() else torch.zeros(1, device=got.device, dtype=torch.float64)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff)


def model_floor(flops: float, hbm_bytes: float, link_bytes: float) -> dict[str, float]:
    """The roofline's floor on this GPU's built-in profile (ms), with its three terms."""
    profile = builtin_profiles().get(profile_name_for_gpu(torch.cuda.get_device_name()), builtin_profiles()["h100"])
    record = estimate(RooflineTerms(flops=flops, hbm_bytes=hbm_bytes, link_bytes=link_bytes, dtype="bf16"), profile)
    return {"model": record.floor_ms, "model_compute": record.compute_ms, "model_hbm": record.hbm_ms, "model_link": record.link_ms}


def floors(compute_alone_ms: float, comm_alone_ms: float, flops: float, hbm_bytes: float, link_bytes: float) -> dict[str, float]:
    """Both floors of a case (see the module's docstring)."""
    out = {"overlap": max(compute_alone_ms, comm_alone_ms), "compute_alone": compute_alone_ms, "comm_alone": comm_alone_ms}
    out.update(model_floor(flops, hbm_bytes, link_bytes))
    return out


def fractions(m: Measured) -> dict[str, float]:
    """floor / measured of kloom's best configuration, for each floor."""
    if not m.best_ours or m.best_ours not in m.ms:
        return {}
    ours = m.ms[m.best_ours]
    return {name: m.floor_ms[name] / ours for name in ("overlap", "model") if m.floor_ms.get(name) and ours > 0}


def run_impls(m: Measured, impls: dict[str, Callable[[], torch.Tensor]], want: torch.Tensor, iters: int = 20, warmup: int = 5) -> None:
    """Check each implementation against ``want``, then time it; one that raises is recorded (its
    error in ``notes``) and the others still run. Every rank runs the same implementations in the
    same order, so a failure that is the same on every rank leaves no rank waiting."""
    failures = []
    for name, fn in impls.items():
        try:
            # Two calls checked: a kernel's second call can take another path than its first
            # (``launch``'s cached launcher).
            m.max_error[name] = max(max_error(fn(), want), max_error(fn(), want))
            m.ms[name] = time_ms(fn, iters=iters, warmup=warmup)
        except Exception as exc:  # recorded in the report: a benchmark documents what failed
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    if failures:
        m.notes = "; ".join(filter(None, [m.notes] + failures))
    ours = {name: t for name, t in m.ms.items() if name.startswith("kloom:")}
    m.best_ours = min(ours, key=ours.get) if ours else ""
