"""Measure the ceilings of the machine this runs on and save them as a ``HardwareProfile``.

What is measured (``docs/roofline.md`` has the reasoning):

- matmul rate per dtype: a large square ``a @ b`` on random data, median of many timed calls
  (CUDA events on a GPU, wall clock on the CPU);
- HBM (or host memory) bandwidth: ``y.copy_(x)``, counting the bytes read and written;
- peer copy bandwidth GPU0 -> GPU1, one way, when two or more GPUs are visible;
- bus bandwidth of all-reduce, all-gather, reduce-scatter and all-to-all over ``world_size``
  ranks, in separate processes (NCCL on CUDA, gloo on the CPU), with nccl-tests' busbw formulas.

The per-GPU link bandwidth the floor uses is the best of the peer copy and the collectives' bus
bandwidths: each is a rate at which one rank pushes bytes to its peers.

Torch and the standard library only: GPU workers call ``load_or_calibrate`` at start-up on images
that carry nothing else. The single-device measurements are in ``measure.py``, the collective
benchmark (its own rank processes) in ``collective_bench.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import torch

from .collective_bench import measure_collectives
from .measure import SIZES, CalibrationError, measure_copy_gbps, measure_matmul_tflops, measure_peer_copy_gbps
from .model import HardwareProfile
from .profiles import builtin_profiles, profile_dir, profile_name_for_gpu, save_profile

# The profile --------------------------------------------------------------------------------------
def detected_name(device: str) -> str:
    """The profile name of this machine: the GPU's (``h200``, ``h100``, ...) or ``cpu``."""
    if device == "cuda":
        return profile_name_for_gpu(torch.cuda.get_device_name(0))
    return "cpu"


def calibrate(device: str = "cpu", world_size: int | None = None, quick: bool = False, name: str | None = None) -> HardwareProfile:
    """Measure this machine's ceilings and return them as a profile (not saved; see ``save_profile``).

    ``world_size`` ranks run the collective benchmark (default: every GPU, or 2 on the CPU); with
    fewer than 2 ranks, and fewer than 2 GPUs for the peer copy, the link ceiling comes from the
    built-in profile of the same name, if there is one.
    """
    if device not in ("cpu", "cuda"):
        raise CalibrationError(f"device must be cpu or cuda, not {device!r}")
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    if device == "cuda" and gpus == 0:
        raise CalibrationError("no CUDA device is visible")
    if world_size is None:
        world_size = gpus if device == "cuda" else 2
    if device == "cuda" and world_size > gpus:
        raise CalibrationError(f"world size {world_size} needs {world_size} GPUs; {gpus} are visible")
    sizes = SIZES[(device, quick)]
    name = name or detected_name(device)
    matmul = measure_matmul_tflops(device, sizes)
    hbm = measure_copy_gbps(device, sizes)
    peer = measure_peer_copy_gbps(sizes) if gpus >= 2 else 0.0
    if device == "cuda":
        torch.cuda.empty_cache()  # the rank processes need the memory
    collectives = measure_collectives(device, world_size, sizes) if world_size >= 2 else {"ops": {}, "latency_us": {}}
    busbw = {op: r["busbw_gbps"] for op, r in collectives["ops"].items() if "busbw_gbps" in r}
    link, basis = choose_link(peer, busbw, world_size, builtin_profiles().get(name))
    what = f"{torch.cuda.get_device_name(0)} x{gpus}" if device == "cuda" else f"CPU host ({os.cpu_count()} cores, gloo)"
    return HardwareProfile(
        name=name,
        description=f"{what}, measured by kloom calibrate{' (quick)' if quick else ''} over {world_size} rank(s)",
        matmul_tflops={k: _figure(v) for k, v in matmul.items()},
        hbm_gbps=_figure(hbm),
        link_gbps=_figure(link),
        collective_busbw_gbps={k: _figure(v) for k, v in busbw.items()},
        source="calibrated",
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(0) if device == "cuda" else "",
        world_size=world_size,
        peer_copy_gbps=_figure(peer),
        link_basis=basis,
        collective_latency_us={k: _figure(v) for k, v in collectives["latency_us"].items()},
    )


def _figure(value: float) -> float:
    """Four significant digits: more than the measurements can back, and never rounded to 0."""
    return float(f"{value:.4g}")


def choose_link(peer_gbps: float, busbw_gbps: dict[str, float], world_size: int, builtin: HardwareProfile | None) -> tuple[float, str]:
    """The per-GPU one-way link ceiling and where it came from: the best of the peer copy and the
    collectives' bus bandwidths (each is bytes one rank sends per second), else the built-in's."""
    candidates = {"peer copy GPU0->GPU1": peer_gbps}
    candidates.update({f"{op} busbw over {world_size} ranks": v for op, v in busbw_gbps.items()})
    basis, best = max(candidates.items(), key=lambda kv: kv[1])
    if best > 0:
        return best, basis
    if builtin is not None and builtin.link_gbps > 0:
        return builtin.link_gbps, f"built-in {builtin.name} profile (nothing to measure with one rank and one GPU)"
    return 0.0, "none measured"


def profile_age_s(profile: HardwareProfile) -> float:
    """Seconds since the profile was measured (infinite for one never measured)."""
    if not profile.measured_at:
        return float("inf")
    try:
        measured = datetime.fromisoformat(profile.measured_at)
    except ValueError:
        return float("inf")
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - measured).total_seconds()


def load_or_calibrate(device: str = "cpu", world_size: int | None = None, max_age_s: float = 7 * 86400, quick: bool = False, name: str | None = None) -> HardwareProfile:
    """The saved calibration of this machine if it was measured over ``world_size`` ranks less
    than ``max_age_s`` ago, else a fresh one (saved). A file lock keeps workers that start together
    from measuring at the same time, which would spoil both measurements."""
    if world_size is None:
        world_size = torch.cuda.device_count() if device == "cuda" else 2
    name = name or detected_name(device)
    path = profile_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        if path.is_file():
            try:
                cached = HardwareProfile.from_dict(json.loads(path.read_text()))
            except (ValueError, TypeError):
                cached = None
            if cached and cached.source == "calibrated" and cached.world_size == world_size and profile_age_s(cached) <= max_age_s:
                return cached
        profile = calibrate(device, world_size, quick=quick, name=name)
        save_profile(profile, path)
        return profile


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
