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
that carry nothing else. ``python -m kloom.roofline.calibrate SPEC RANK`` is the entry point of
the collective benchmark's rank processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from .model import COLLECTIVES, HardwareProfile, bus_factor
from .profiles import builtin_profiles, profile_dir, profile_name_for_gpu, save_profile

#: Set in every rank process: NVLink multicast stays off on shared hosts (shared/HARDWARE.md).
FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

_REPO_ROOT = Path(__file__).resolve().parents[2]


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


_SIZES = {
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


# Collectives over several processes ---------------------------------------------------------------
def measure_collectives(device: str, world_size: int, sizes: Sizes, timeout_s: float = 600.0) -> dict:
    """Run the collective benchmark on ``world_size`` new processes and return rank 0's report:
    ``{"ops": {op: {"bytes", "seconds", "algbw_gbps", "busbw_gbps"} or {"error"}}, "latency_us": ...}``."""
    workdir = Path(tempfile.mkdtemp(prefix="kloom-calibrate-"))
    try:
        spec = {
            "device": device,
            "world_size": world_size,
            "bytes": sizes.collective_bytes,
            "reps": sizes.reps,
            "warmup": sizes.warmup,
            "budget_s": sizes.budget_s,
            "store": str(workdir / "store"),
            "report": str(workdir / "report.json"),
        }
        spec_path = workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = rank_environment()
        procs = []
        logs = []
        for rank in range(world_size):
            log = open(workdir / f"rank{rank}.log", "w+")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "kloom.roofline.calibrate", str(spec_path), str(rank)],
                    env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(workdir),
                )
            )
        _wait_all(procs, logs, timeout_s)
        return json.loads((workdir / "report.json").read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def rank_environment() -> dict[str, str]:
    """The environment of a benchmark rank: ours, kloom importable, NVLink multicast off."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(FORCED_ENV)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _wait_all(procs: list[subprocess.Popen], logs: list, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = f"rank {failed[0]} exited with {procs[failed[0]].returncode}" if failed else f"no answer in {timeout_s:.0f} s"
                raise CalibrationError(f"collective benchmark failed: {why}\n{_log_tail(logs, failed[:1] or range(len(procs)))}")
            time.sleep(0.05)
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise CalibrationError(f"collective benchmark failed on rank(s) {failed}\n{_log_tail(logs, failed)}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def _log_tail(logs: list, ranks, chars: int = 3000) -> str:
    parts = []
    for rank in ranks:
        logs[rank].flush()
        logs[rank].seek(0)
        parts.append(f"--- rank {rank} ---\n{logs[rank].read()[-chars:]}")
    return "\n".join(parts)


def _collective_call(op: str, dist, out, inp):
    if op == "all_reduce":
        return lambda: dist.all_reduce(inp)
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, inp)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp)
    return lambda: dist.all_to_all_single(out, inp)


def _collective_buffers(op: str, numel: int, world: int, dtype, device):
    """(output, input) for a collective whose larger buffer has ``numel`` elements, as in
    nccl-tests: the output of an all-gather, the input of a reduce-scatter."""
    if op == "all_reduce":
        return None, torch.randn(numel, dtype=dtype, device=device)
    if op == "all_gather":
        return torch.empty(numel, dtype=dtype, device=device), torch.randn(numel // world, dtype=dtype, device=device)
    if op == "reduce_scatter":
        return torch.empty(numel // world, dtype=dtype, device=device), torch.randn(numel, dtype=dtype, device=device)
    return torch.empty(numel, dtype=dtype, device=device), torch.randn(numel, dtype=dtype, device=device)


def _rank_main(spec_path: str, rank: int) -> None:
    """One rank of the collective benchmark; rank 0 writes the report."""
    import torch.distributed as dist

    spec = json.loads(Path(spec_path).read_text())
    world, kind = int(spec["world_size"]), spec["device"]
    sizes = Sizes(0, 0, int(spec["bytes"]), int(spec["reps"]), int(spec["warmup"]), float(spec["budget_s"]))
    if kind == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{spec['store']}", rank=rank, world_size=world, device_id=device)
        dtype = torch.bfloat16
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{spec['store']}", rank=rank, world_size=world)
        dtype = torch.float32
    element = torch.empty((), dtype=dtype).element_size()
    numel = sizes.collective_bytes // (element * world) * world
    marker = torch.ones(1, device=device)

    def aligned(fn):
        """A timed call of ``fn`` that starts on every rank together (after a tiny all-reduce)."""

        def call() -> float:
            dist.all_reduce(marker, op=dist.ReduceOp.MAX)
            if kind != "cuda":
                t0 = time.perf_counter()
                fn()
                return time.perf_counter() - t0
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()  # a synchronous collective makes the current stream wait for NCCL's
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return call

    report: dict = {"ops": {}, "latency_us": {}, "world_size": world, "backend": dist.get_backend()}
    for op in COLLECTIVES:
        out, inp = _collective_buffers(op, numel, world, dtype, device)
        try:
            seconds = _slowest_rank(_median_of(aligned(_collective_call(op, dist, out, inp)), sizes), device, dist)
        except (RuntimeError, NotImplementedError, ValueError) as exc:  # a backend without this collective
            report["ops"][op] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        nbytes = numel * element
        algbw = nbytes / seconds / 1e9
        report["ops"][op] = {"bytes": nbytes, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(op, world)}
        del out, inp
    tiny = torch.randn(1, dtype=dtype, device=device)
    report["latency_us"]["all_reduce"] = 1e6 * _slowest_rank(_median_of(aligned(lambda: dist.all_reduce(tiny)), sizes), device, dist)
    if rank == 0:
        Path(spec["report"]).write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


def _median_of(call, sizes: Sizes) -> float:
    for _ in range(sizes.warmup):
        call()
    times: list[float] = []
    while len(times) < sizes.reps and (len(times) < 3 or sum(times) < sizes.budget_s):
        times.append(call())
    return statistics.median(times)


def _slowest_rank(seconds: float, device, dist) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


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
    sizes = _SIZES[(device, quick)]
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
    import fcntl

    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


if __name__ == "__main__":
    _rank_main(sys.argv[1], int(sys.argv[2]))
