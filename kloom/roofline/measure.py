"""Single-device ceilings of the machine this runs on (``calibrate.py`` puts them in a profile):

- matmul rate per dtype: a large square ``a @ b`` on random data, median of many timed calls
  (CUDA events on a GPU, wall clock on the CPU);
- HBM (or host memory) bandwidth: ``y.copy_(x)``, counting the bytes read and written;
- peer copy bandwidth GPU0 -> GPU1, one way, when two or more GPUs are visible.

Also how big and how many (``Sizes``), shared with the collective benchmark. Torch and the
standard library only.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch


class CalibrationError(RuntimeError):
    """A measurement could not be made (no GPU, too few GPUs, a rank that failed or hung)."""


@dataclass(frozen=True)
class Sizes:
    """How big and how many: full runs match shared/HARDWARE.md, quick runs take seconds."""

    matmul_n: int
    copy_bytes: int
    collective_bytes: int
    reps: int
    warmup: int
    budget_s: float  # per measurement: stop repeating (after 3 reps) once this is spent


#: Sizes by (device, quick).
SIZES = {
    ("cuda", False): Sizes(matmul_n=8192, copy_bytes=1 << 30, collective_bytes=256 << 20, reps=30, warmup=5, budget_s=5.0),
    ("cuda", True): Sizes(matmul_n=4096, copy_bytes=256 << 20, collective_bytes=64 << 20, reps=10, warmup=3, budget_s=1.0),
    ("cpu", False): Sizes(matmul_n=512, copy_bytes=256 << 20, collective_bytes=16 << 20, reps=10, warmup=2, budget_s=3.0),
    ("cpu", True): Sizes(matmul_n=256, copy_bytes=64 << 20, collective_bytes=1 << 20, reps=5, warmup=1, budget_s=0.5),
}

_MATMUL_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


# Timing ------------------------------------------------------------------------------------------
def _median_seconds(fn, device: str, sizes: Sizes, sync=None) -> float:
    """Median time of ``fn()``: CUDA events on the current stream, or the wall clock around a
    full synchronisation (``sync``) where the work spans several devices or runs on the CPU."""
    for _ in range(sizes.warmup):
        fn()
    if sync:
        sync()
    elif device == "cuda":
        torch.cuda.synchronize()
    times: list[float] = []
    spent = 0.0
    while len(times) < sizes.reps and (len(times) < 3 or spent < sizes.budget_s):
        if device == "cuda" and sync is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            seconds = time.perf_counter() - t0
        times.append(seconds)
        spent += seconds
    return statistics.median(times)


# Single-device ceilings ---------------------------------------------------------------------------
def measure_matmul_tflops(device: str, sizes: Sizes) -> dict[str, float]:
    """TFLOP/s of a square matmul per dtype (and tf32 and fp8 where the GPU has them)."""
    n = sizes.matmul_n
    rates: dict[str, float] = {}
    for key, dtype in _MATMUL_DTYPES.items():
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        with _tf32(device, False):  # fp32 means full fp32, whatever the process set before
            rates[key] = 2 * n**3 / _median_seconds(lambda: torch.mm(a, b, out=out), device, sizes) / 1e12
        if key == "fp32" and device == "cuda":
            with _tf32(device, True):
                rates["tf32"] = 2 * n**3 / _median_seconds(lambda: torch.mm(a, b, out=out), device, sizes) / 1e12
        del a, b, out
    if device == "cuda":
        fp8 = _fp8_tflops(n, sizes)
        if fp8:
            rates["fp8"] = fp8
    return rates


@contextlib.contextmanager
def _tf32(device: str, allowed: bool):
    """Allow (or forbid) TF32 tensor cores for fp32 matmuls on CUDA for the duration."""
    if device != "cuda":
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _fp8_tflops(n: int, sizes: Sizes) -> float | None:
    """e4m3 x e4m3 -> bf16 through ``torch._scaled_mm``; None where the GPU or build lacks it."""
    if torch.cuda.get_device_capability() < (8, 9) or not hasattr(torch, "_scaled_mm"):
        return None
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        one = torch.ones((), device="cuda")
        seconds = _median_seconds(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), "cuda", sizes)
    except (RuntimeError, TypeError):
        return None
    return 2 * n**3 / seconds / 1e12


def measure_copy_gbps(device: str, sizes: Sizes) -> float:
    """Device-memory (or host-memory) bandwidth of a large copy, bytes read + written, in GB/s."""
    x = torch.randn(sizes.copy_bytes // 4, device=device)
    y = torch.empty_like(x)
    seconds = _median_seconds(lambda: y.copy_(x), device, sizes)
    return 2 * x.numel() * x.element_size() / seconds / 1e9


def measure_peer_copy_gbps(sizes: Sizes, src: int = 0, dst: int = 1) -> float:
    """One-way copy bandwidth from GPU ``src`` to GPU ``dst`` in GB/s (bytes sent)."""
    x = torch.randn(sizes.copy_bytes // 4, device=f"cuda:{src}")
    y = torch.empty(x.numel(), device=f"cuda:{dst}")

    def both() -> None:
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)

    seconds = _median_seconds(lambda: y.copy_(x), "cuda", sizes, sync=both)
    return x.numel() * x.element_size() / seconds / 1e9
