"""``profile()``: hardware feedback for one candidate (or the reference) on one workload.

Two launches, each a fresh process group of N ranks under a hard timeout (everything it started
is killed on expiry, so profiling never hangs a job):

1. The timeline: the PyTorch profiler on every rank for a few iterations (no replay). It gives
   the kernels' times, the communication share and the exposed share; NVML is sampled meanwhile.
2. On CUDA, Nsight Compute on the chosen ranks: kernel replay of compute kernels only, for
   Speed-of-Light throughput, occupancy, registers, shared memory and ncu's bottleneck verdict,
   attached to the timeline's kernels by name.

Where ncu is missing, not permitted to read counters, failed or ran out of time, the profile
says so and keeps the timeline's kernels (no SOL). On the CPU it is the PyTorch profiler's
operator summary. Both launches run workload and candidate code, so each runs in the evaluator's
sandbox (``sandboxed.py``) with its scrubbed rank environment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch

from kloom.profile import kernel_key
from kloom.profile_summary import summarise
from kloom.static_check import check_candidate
from kloom.workload import WorkloadError, inspect_candidate, inspect_workload
from services.worker.evaluator.settings import EvalSettings

from . import ncu as N
from . import timeline as tl
from .launch import LaunchSpec, command, rank_output
from .nvml import NvmlSampler
from .records import KernelStat, Profile, RankTimeline
from .sandboxed import RunOutcome, run_sandboxed
from .settings import ProfileSettings

#: Time allowed for exporting a saved ncu report to CSV.
EXPORT_TIMEOUT_S = 120.0


class _Stop(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def profile(
    workload_path: str | os.PathLike,
    candidate_source: str | None,
    *,
    world_size: int,
    device: str,
    settings: ProfileSettings | None = None,
    sandbox_settings: EvalSettings | None = None,
) -> Profile:
    """Profile ``candidate_source`` (``None``: the reference alone) on ``workload_path`` at
    ``world_size`` ranks on ``device`` (``cpu`` or ``cuda``), in the sandbox the evaluator's ranks
    get under ``sandbox_settings`` (default: the device's). Never raises for a candidate's or a
    tool's failure: the returned ``Profile`` carries the status and the reason."""
    settings = settings or ProfileSettings.for_device(device)
    sandbox_settings = sandbox_settings or EvalSettings.for_device(device)
    started = time.monotonic()
    result = Profile(tool="none", status="failed", reason="", workload=str(workload_path), world_size=world_size, device=device)
    workdir = Path(tempfile.mkdtemp(prefix="kloom-profile-"))
    os.chmod(workdir, 0o700)
    try:
        _check_device(device, world_size, settings)
        spec = _spec(workload_path, candidate_source, world_size, device, settings, workdir, result)
        def run(cmd: list[str], log_name: str, timeout_s: float | None = None) -> RunOutcome:
            return run_sandboxed(cmd, settings=sandbox_settings, device=device, world_size=world_size, workdir=workdir,
                                 timeout_s=timeout_s or settings.timeout_s, log_path=workdir / log_name)

        torch_timeline(spec, settings, run, result)
        if device == "cuda" and settings.tool == "ncu":
            nsight_compute(spec, settings, run, workdir, result)
        else:
            result.tool, result.status = "torch_profiler", "ok"
            result.reason = (
                "on the CPU: the PyTorch profiler's operator summary (no hardware counters)"
                if device != "cuda"
                else "Nsight Compute not requested (tool=torch_profiler)"
            )
    except _Stop as stop:
        result.status, result.reason = stop.status, stop.reason
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result.kernels = result.kernels[: settings.top_kernels]
    result.seconds = time.monotonic() - started
    result.summary = summarise(result)
    return result


def _check_device(device: str, world_size: int, settings: ProfileSettings) -> None:
    """Refuse settings that cannot work here before anything is launched."""
    try:
        settings.ncu_ranks(world_size)
    except ValueError as exc:
        raise _Stop("failed", str(exc)) from None
    if device == "cpu":
        return
    if device != "cuda":
        raise _Stop("failed", f"device must be 'cpu' or 'cuda', not {device!r}")
    needed = max(settings.devices or list(range(world_size))) + 1
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < needed:
        raise _Stop("unavailable", f"CUDA: {world_size} ranks need GPUs up to index {needed - 1}; {visible} visible here")


def _spec(workload_path, candidate_source, world_size, device, settings, workdir: Path, result: Profile) -> LaunchSpec:
    try:
        info = inspect_workload(workload_path)
        info.check_world_size(world_size)
    except WorkloadError as exc:
        raise _Stop("failed", f"the workload cannot be used: {exc}") from None
    candidate = None
    if candidate_source is not None:
        try:
            result.candidate_sha256 = inspect_candidate("<candidate>", candidate_source).sha256
        except WorkloadError as exc:
            raise _Stop("failed", f"the candidate cannot be used: {exc}") from None
        violations = check_candidate(candidate_source, "<candidate>")
        if violations:
            raise _Stop("failed", "the candidate is rejected by the static checker: " + "; ".join(map(str, violations)))
        path = workdir / f"candidate_{result.candidate_sha256[:16]}.py"
        path.write_text(candidate_source)
        candidate = str(path)
    return LaunchSpec(
        workload=str(Path(workload_path).resolve()),
        candidate=candidate,
        world_size=world_size,
        device=device,
        out_dir=str(workdir / "timeline"),
        shapes=settings.shapes,
        mode="torch",
        warmup_iters=settings.warmup_iters,
        iters=settings.iters,
        seed=settings.seed if settings.seed is not None else secrets.randbits(30),
        devices=settings.devices,
        communication_patterns=list(settings.communication_patterns),
    )


def _failure(outcome: RunOutcome, spec: LaunchSpec, what: str, timeout_s: float) -> _Stop:
    if outcome.timed_out:
        return _Stop("timeout", f"{what} did not finish within {timeout_s:.0f} s; every process it started was killed")
    for rank in range(spec.world_size):
        error = rank_output(spec.out_dir, rank, "error.json")
        if error.is_file():
            return _Stop("failed", f"{what} failed on rank {rank}: {json.loads(error.read_text())['message']}")
    tail = " | ".join(line for line in outcome.output.strip().splitlines()[-3:])
    return _Stop("failed", f"{what} failed (exit code {outcome.returncode}): {tail}")


#: How ``profile()`` runs a command that runs or reads what profiled code wrote: the command, its
#: log's name and optionally its own time limit; in the evaluator's sandbox (``sandboxed.py``).
Runner = Callable[..., RunOutcome]


def torch_timeline(spec: LaunchSpec, settings: ProfileSettings, run: Runner, result: Profile) -> None:
    """The timeline stage of ``profile()``: the PyTorch profiler on every rank, NVML sampled
    meanwhile. Fills ``result``'s kernels, timelines and shares; raises ``_Stop`` on failure."""
    devices = [spec.device_index(r) for r in range(spec.world_size)]
    sampler = NvmlSampler(devices, settings.nvml_interval_s) if spec.device == "cuda" and settings.nvml else nullcontext()
    spec_path = spec.save()
    with sampler:
        outcome = run(command(spec_path), "timeline.log")
    result.phase_seconds["timeline"] = outcome.seconds
    if isinstance(sampler, NvmlSampler):
        result.nvml = sampler.summary()
        result.flags += result.nvml.get("flags", [])
        result.link = _nvml_link(result.nvml)
    if outcome.returncode != 0:
        raise _failure(outcome, spec, "the PyTorch profiler run", settings.timeout_s)
    ranks = [json.loads(rank_output(spec.out_dir, r).read_text()) for r in range(spec.world_size)]
    result.ranks_timed = [r["rank"] for r in ranks if r.get("recorded")]
    result.environment.update(devices=[r["device"] for r in ranks], shapes=spec.shapes, seed=spec.seed)
    result.kernels = merge_kernels(ranks, settings.communication_patterns)
    result.timelines = [
        RankTimeline(rank=r["rank"], iterations=r["iterations"], **r["breakdown"]) for r in ranks if "breakdown" in r
    ]
    if result.timelines:
        result.communication_share = max(t.communication_share for t in result.timelines)
        result.exposed_communication_share = max(t.exposed_share for t in result.timelines)
        result.idle_share = max(t.idle_share for t in result.timelines)


def merge_kernels(ranks: list[dict], patterns: list[str] | tuple[str, ...] = ()) -> list[KernelStat]:
    """Kernels (or operators) of every rank's timeline, summed by name, most time first."""
    calls: dict[str, int] = {}
    totals: dict[str, float] = {}
    for r in ranks:
        for k in r.get("kernels", []):
            calls[k["name"]] = calls.get(k["name"], 0) + int(k["calls"])
            totals[k["name"]] = totals.get(k["name"], 0.0) + float(k["total_us"])
    grand = sum(totals.values())
    stats = []
    for name, total in totals.items():
        comm = tl.is_communication(name, patterns)
        stats.append(
            KernelStat(
                name=name,
                calls=calls[name],
                total_us=total,
                mean_us=total / calls[name] if calls[name] else 0.0,
                share=total / grand if grand > 0 else 0.0,
                communication=comm,
                category=tl.category(name, patterns),
                bottleneck="communication" if comm else "",
            )
        )
    return sorted(stats, key=lambda k: -k.total_us)


def _nvml_link(summary: dict) -> dict:
    devices = summary.get("devices", {}) if summary.get("status") == "ok" else {}
    tx = [d["nvlink_tx_gbps"]["max"] for d in devices.values() if "nvlink_tx_gbps" in d]
    rx = [d["nvlink_rx_gbps"]["max"] for d in devices.values() if "nvlink_rx_gbps" in d]
    if not tx and not rx:
        return {}
    return {"source": "nvml", "tx_gbps_max": max(tx, default=0.0), "rx_gbps_max": max(rx, default=0.0)}


def nsight_compute(spec: LaunchSpec, settings: ProfileSettings, run: Runner, workdir: Path, result: Profile) -> None:
    """The Nsight Compute stage of ``profile()`` (after ``torch_timeline``): replays the compute
    kernels of the chosen ranks and attaches their metrics to ``result.kernels``. Sets the tool,
    status and reason, falling back to the timeline's kernels when ncu is missing, not permitted,
    failed or timed out."""
    result.tool = "torch_profiler"
    ncu = N.find(settings.ncu_path)
    if ncu is None:
        result.status = "unavailable"
        result.reason = f"ncu not found ({settings.ncu_path!r} is not an executable or not on PATH); fell back to the PyTorch profiler's kernel timeline"
        return
    result.environment["ncu"] = N.version(ncu)
    ranks = settings.ncu_ranks(spec.world_size)
    sections = list(settings.sections)
    if settings.nvlink_sections:
        sections += [s for s in N.nvlink_sections(N.sections(ncu)) if s not in sections]
    run_spec = dataclasses.replace(spec, mode="ncu", profile_ranks=ranks, iters=settings.ncu_iters, out_dir=str(workdir / "ncu"))
    report = str(workdir / "ncu" / "report")
    cmd = N.profile_command(
        ncu,
        report=report,
        sections=sections,
        kernel_filter=tl.ncu_exclusion_regex(settings.communication_patterns),
        launch_skip=settings.ncu_launch_skip,
        launch_count=settings.ncu_launch_count,
    ) + command(run_spec.save())
    outcome = run(cmd, "ncu.log")
    result.phase_seconds["ncu"] = outcome.seconds
    fallback = "kernel times from the PyTorch profiler, no Speed-of-Light"
    if N.PERMISSION_ERROR in outcome.output:
        result.status, result.reason = "unavailable", N.PERMISSION_REASON
        return
    if outcome.returncode != 0 or outcome.timed_out:
        stop = _failure(outcome, run_spec, "ncu", settings.timeout_s)
        hint = " (a kernel that waits on a peer under replay? add its name to communication_patterns)" if outcome.timed_out else ""
        result.status, result.reason = stop.status, f"{stop.reason}{hint}; {fallback}"
        return
    if N.NOTHING_PROFILED in outcome.output or not Path(report + ".ncu-rep").is_file():
        result.tool, result.status, result.ranks_profiled = "ncu", "ok", ranks
        result.reason = f"ncu replayed no kernel on rank(s) {_ranks(ranks)}: every kernel is communication (excluded from replay)"
        return
    t0 = time.monotonic()
    raw = _export(ncu, report + ".ncu-rep", "raw", run, workdir)
    details = _export(ncu, report + ".ncu-rep", "details", run, workdir)
    result.phase_seconds["ncu_export"] = time.monotonic() - t0
    launches = N.parse_raw(raw)
    if not launches:
        last = raw.strip().splitlines()[-1:] or ["no output"]
        result.status = "failed"
        result.reason = f"ncu ran but its report could not be read ({last[0][:200]}); {fallback}"
        return
    rules = N.parse_rules(details)
    per_kernel = N.aggregate(launches, rules)
    matched = attach(result.kernels, per_kernel)
    result.tool, result.status, result.ranks_profiled = "ncu", "ok", ranks
    result.reason = (
        f"Nsight Compute on rank(s) {_ranks(ranks)}: {len(launches)} kernel launches replayed "
        f"(communication kernels excluded), {matched} of the timeline's kernels matched; timeline on every rank"
    )
    # NVLink bytes moved by the replayed (compute) kernels themselves: peer loads and stores.
    nvlink = {
        key: sum(m.metrics.get(key, 0.0) * m.launches for m in per_kernel.values())
        for key in ("nvltx__bytes.sum", "nvlrx__bytes.sum")
    }
    if any(nvlink.values()):
        result.link["ncu_replayed_kernels_bytes"] = nvlink


def _export(ncu: str, report: str, page: str, run: Runner, workdir: Path) -> str:
    """A page of the saved report as CSV text ('' when it cannot be exported). In the sandbox too:
    the report lies where the profiled code could write."""
    for plain in (False, True):
        outcome = run(N.export_command(ncu, report, page, plain), f"{page}.csv", EXPORT_TIMEOUT_S)
        if outcome.returncode == 0:
            return (workdir / f"{page}.csv").read_text(errors="replace")
    return ""


def attach(kernels: list[KernelStat], metrics: dict[str, N.KernelMetrics]) -> int:
    """Copy ncu's metrics onto the timeline's kernels (same demangled name, else the same bare
    function name); the number of kernels that got them."""
    by_key: dict[str, N.KernelMetrics] = {}
    for name, m in metrics.items():
        by_key.setdefault(kernel_key(name), m)
    matched = 0
    for k in kernels:
        if k.communication:
            continue
        m = metrics.get(k.name) or by_key.get(kernel_key(k.name))
        if m is None:
            continue
        matched += 1
        k.sm_throughput_pct = m.sm_throughput_pct
        k.memory_throughput_pct = m.memory_throughput_pct
        k.dram_throughput_pct = m.dram_throughput_pct
        k.achieved_occupancy_pct = m.achieved_occupancy_pct
        k.theoretical_occupancy_pct = m.theoretical_occupancy_pct
        k.registers_per_thread = m.registers_per_thread
        k.shared_mem_per_block_bytes = m.shared_mem_per_block_bytes
        k.bottleneck, k.bottleneck_detail = N.bottleneck(m.sm_throughput_pct, m.memory_throughput_pct, m.dram_throughput_pct, m.rule)
        k.metrics = dict(m.metrics)
    return matched


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))
