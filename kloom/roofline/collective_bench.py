"""The collective benchmark: bus bandwidth of all-reduce, all-gather, reduce-scatter and all-to-all
over ``world_size`` ranks, in separate processes (NCCL on CUDA, gloo on the CPU), with nccl-tests'
busbw formulas. ``python -m kloom.roofline.collective_bench SPEC RANK`` is the entry point of its
rank processes. Torch and the standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from kloom.processes import NO_MULTICAST, run_ranks

from .measure import CalibrationError, Sizes
from .model import COLLECTIVES, bus_factor

_REPO_ROOT = Path(__file__).resolve().parents[2]


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
        logs = [open(workdir / f"rank{rank}.log", "w+b") for rank in range(world_size)]
        try:
            outcome = run_ranks(lambda rank: [sys.executable, "-m", "kloom.roofline.collective_bench", str(spec_path), str(rank)],
                                world_size, env=lambda rank: env, cwd=workdir, logs=logs.__getitem__, timeout_s=timeout_s)
            if not outcome.ok:
                failed = outcome.failed
                why = (f"rank {failed[0]} exited with {outcome.codes[failed[0]]}" if failed
                       else f"no answer in {timeout_s:.0f} s")
                raise CalibrationError(f"collective benchmark failed: {why}\n{_log_tail(logs, failed[:1] or range(world_size))}")
        finally:
            for log in logs:
                log.close()
        return json.loads((workdir / "report.json").read_text())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def rank_environment() -> dict[str, str]:
    """The environment of a benchmark rank: ours, kloom importable, NVLink multicast off."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(NO_MULTICAST)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _log_tail(logs: list, ranks, chars: int = 3000) -> str:
    parts = []
    for rank in ranks:
        logs[rank].flush()
        logs[rank].seek(0)
        parts.append(f"--- rank {rank} ---\n{logs[rank].read()[-chars:].decode(errors='replace')}")
    return "\n".join(parts)


def _collective_call(op: str, out, inp):
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
            seconds = _slowest_rank(_median_of(aligned(_collective_call(op, out, inp)), sizes), device)
        except (RuntimeError, NotImplementedError, ValueError) as exc:  # a backend without this collective
            report["ops"][op] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        nbytes = numel * element
        algbw = nbytes / seconds / 1e9
        report["ops"][op] = {"bytes": nbytes, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(op, world)}
        del out, inp
    tiny = torch.randn(1, dtype=dtype, device=device)
    report["latency_us"]["all_reduce"] = 1e6 * _slowest_rank(_median_of(aligned(lambda: dist.all_reduce(tiny)), sizes), device)
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


def _slowest_rank(seconds: float, device) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


if __name__ == "__main__":
    _rank_main(sys.argv[1], int(sys.argv[2]))
