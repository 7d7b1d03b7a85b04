"""One profiled rank (``python -m services.worker.profiler.rank SPEC RANK``, started by ``launch``).

It joins the process group and builds the model exactly as an evaluator rank does, by using the
evaluator's own ``RankState`` (same default device, seeding and process-group set-up), warms the
model up, then runs the profiled iterations:

- ``torch`` mode: under ``torch.profiler`` (CPU, and CUDA on GPUs) inside a ``kloom_profile``
  range; the rank reduces its own trace to kernel totals and a communication breakdown and writes
  them to ``rank<r>.json``;
- ``ncu`` mode: between ``cudaProfilerStart`` and ``cudaProfilerStop`` inside an NVTX range, on
  the chosen ranks only, so that ``ncu --profile-from-start off`` replays only those kernels;
- ``plain`` mode: just the iterations.

Every rank runs the same number of iterations, so that their collectives match.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from kloom.workload import import_file, inspect_workload, module_name_for
from services.worker.evaluator.rank import seed_everything, seed_for
from services.worker.evaluator.reference_rank import ReferenceRank

from . import timeline as tl
from .launch import LaunchSpec, rank_output

#: How long a rank whose record is written waits for its process group to come down. Destroying
#: an NCCL communicator whose collectives were captured in a CUDA graph can block for ever
#: (pytorch/pytorch#115388; on 4xH200 every profile of a whole-step-graph candidate ran into the
#: launch timeout with its GPUs idle); past this the rank leaves without it.
TEARDOWN_S = 15.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _barrier(device: torch.device) -> None:
    if dist.get_world_size() > 1:
        if device.type == "cuda":
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()
    _sync(device)


def build(spec: LaunchSpec, rank: int) -> tuple[ReferenceRank, torch.nn.Module, list]:
    """A reference rank of the evaluator with the candidate (or the reference) built the way the
    judge builds them (same weights), and its inputs. The profiler is no judge: the candidate runs
    here beside the workload's code."""
    state = ReferenceRank(rank, spec.world_size, spec.device, spec.device_index(rank), os.environ["KLOOM_PROFILE_STORE"])
    path = str(Path(spec.workload).resolve())
    state.workload = state._load_workload(path, inspect_workload(path).sha256, spec.shapes)
    if not spec.candidate:
        model, _ = state._build(spec.seed)
    else:
        module = import_file(spec.candidate, module_name_for(spec.candidate, "candidate"))
        seed_everything(seed_for(spec.seed, rank))
        with torch.device(state.device):
            init = state.workload.get_init_inputs()
            seed_everything(seed_for(spec.seed, rank))
            model = module.ModelNew(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(state.device)
    return state, model, state._inputs(spec.seed + 1)


def run(spec: LaunchSpec, rank: int) -> dict:
    """Build, warm up and run the profiled iterations; the rank's result record."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    state, model, inputs = build(spec, rank)
    device = state.device
    seconds["build"] = time.perf_counter() - t0

    def step() -> None:
        with torch.no_grad():
            model(*inputs)

    t0 = time.perf_counter()
    for _ in range(spec.warmup_iters):
        step()
    _barrier(device)
    seconds["warmup"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    records = spec.records(rank)
    result: dict = {"rank": rank, "device": str(device), "iterations": spec.iters, "recorded": records}
    if spec.mode == "torch" and records:
        result.update(_record_torch(spec, rank, step, device))
    elif spec.mode == "ncu" and records and device.type == "cuda":
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push("kloom_profile")
        for _ in range(spec.iters):
            step()
        _sync(device)
        torch.cuda.nvtx.range_pop()
        torch.cuda.profiler.stop()
    else:
        if spec.mode == "torch":
            _barrier(device)  # the recording ranks pass one inside their profiler
        for _ in range(spec.iters):
            step()
        _sync(device)
    seconds["profiled"] = time.perf_counter() - t0
    _barrier(device)
    result["seconds"] = seconds
    return result


def _record_torch(spec: LaunchSpec, rank: int, step, device: torch.device) -> dict:
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        # Ranks start their profilers at different moments; the barrier absorbs that skew
        # outside the window, where it would otherwise read as communication.
        _barrier(device)
        with record_function("kloom_profile"):
            for _ in range(spec.iters):
                step()
            _sync(device)
    if spec.trace:
        prof.export_chrome_trace(str(rank_output(spec.out_dir, rank, "trace.json")))
    extra = spec.communication_patterns
    events = prof.events()
    if device.type == "cuda":
        kernels, window = device_events(events, device.index)
        totals = tl.totals_by_name(kernels)
        parts = tl.device_breakdown(kernels, window, extra)
        kind = "kernels"
    else:
        ops, main_lane, window = cpu_events(events)
        totals = operator_totals(events, window)
        parts = tl.cpu_breakdown(ops, main_lane, window, extra)
        kind = "operators"
    return {
        "kind": kind,
        "kernels": [{"name": t.name, "calls": t.calls, "total_us": t.total_us} for t in totals],
        "breakdown": {
            "window_us": parts.window_us,
            "busy_us": parts.busy_us,
            "compute_us": parts.compute_us,
            "communication_us": parts.communication_us,
            "exposed_communication_us": parts.exposed_communication_us,
        },
    }


def _own_range(events, device_type) -> tuple[float, float] | None:
    for e in events:
        if e.device_type == device_type and e.name == "kloom_profile":
            return (e.time_range.start, e.time_range.end)
    return None


def device_events(events, device_index: int) -> tuple[list[tl.Event], tuple[float, float]]:
    """Kernels, copies and memsets that ran on GPU ``device_index`` inside the profiled window,
    and that window: the ``kloom_profile`` range as the GPU saw it (the CPU's range where the
    profiler did not mirror it onto the GPU)."""
    window = _own_range(events, DeviceType.CUDA) or _own_range(events, DeviceType.CPU)
    lo, hi = window
    kernels = [
        tl.Event(e.name, max(lo, e.time_range.start), min(hi, e.time_range.end), lane=int(getattr(e, "device_resource_id", 0) or 0))
        for e in events
        if e.device_type == DeviceType.CUDA
        and e.device_index == device_index
        and not e.is_user_annotation
        and not e.name.startswith(tl.OWN_RANGES)
        and e.time_range.end > lo
        and e.time_range.start < hi
    ]
    return kernels, window


def cpu_events(events) -> tuple[list[tl.Event], int, tuple[float, float]]:
    """CPU operators with their enclosing operators' names, the main thread, and the window
    (the ``kloom_profile`` range)."""
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    own = next(e for e in cpu if e.name == "kloom_profile")
    out = []
    for e in cpu:
        parents = []
        parent = e.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        out.append(
            tl.Event(e.name, e.time_range.start, e.time_range.end, lane=e.thread, parents=tuple(reversed(parents)), annotation=e.is_user_annotation)
        )
    return out, own.thread, (own.time_range.start, own.time_range.end)


def operator_totals(events, window: tuple[float, float]) -> list[tl.NameTotal]:
    """The operator summary of the profiled window: calls and self CPU time per operator (the
    whole duration for asynchronous ones, such as gloo's collectives, which have no self time)."""
    acc: dict[str, tl.NameTotal] = {}
    lo, hi = window
    for e in events:
        if e.device_type != DeviceType.CPU or not lo <= e.time_range.start < hi or e.name.startswith(tl.OWN_RANGES):
            continue
        row = acc.setdefault(e.name, tl.NameTotal(e.name, 0, 0.0))
        row.calls += 1
        row.total_us += e.time_range.elapsed_us() if e.is_async else e.self_cpu_time_total
    return sorted(acc.values(), key=lambda t: -t.total_us)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec, rank = LaunchSpec.load(argv[0]), int(argv[1])
    code = 0
    try:
        result = run(spec, rank)
        rank_output(spec.out_dir, rank).write_text(json.dumps(result))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
        error = {"message": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc()[-8000:]}
        rank_output(spec.out_dir, rank, "error.json").write_text(json.dumps(error))
        code = 1
    finally:
        teardown(code)
    return code


def teardown(code: int, wait_s: float = TEARDOWN_S) -> None:
    """Destroy the process group; if that has not returned after ``wait_s``, end the process
    with ``code`` (its record is written: nothing is lost but a clean NCCL shutdown)."""
    if not dist.is_initialized():
        return
    done = threading.Event()

    def destroy() -> None:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
        finally:
            done.set()

    threading.Thread(target=destroy, name="kloom-teardown", daemon=True).start()
    if not done.wait(wait_s):
        print(f"[kloom] the process group did not come down within {wait_s:.0f} s; leaving without it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
