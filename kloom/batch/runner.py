"""Batch runs over a suite: every workload becomes a job, jobs run in parallel over the GPUs (or
one at a time on a CPU), and the batch resumes where it stopped when run again with the same
command: finished jobs are skipped, an interrupted job continues from its last recorded step.

Layout of a batch directory::

    batch.json                the batch's settings (a resumed run must match them)
    jobs/<workload>/          one FileSink per job: trajectory.json, best_kernel.py
    report.json, report.md, *.png   written by ``kloom.batch.report``

A finished batch committed under ``results/`` keeps its trajectories in one archive instead
(``kloom bench archive``, ``archive.py``): ``trajectories.jsonl.xz`` and a ``manifest.json`` per job.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from agents.loop import run_job
from agents.records import FINISHED_STATES, Trajectory
from agents.sinks import FileSink
from kloom.suite import resolve_suite
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.profiler import job_profiler

from .archive import ARCHIVE
from .plan import BatchSettings, plan_batch


@dataclass
class JobOutcome:
    workload: str
    state: str
    speedup: float | None
    seconds: float
    skipped: bool = False


def _device_groups(settings: BatchSettings, parallel: int | None) -> list[list[int] | None]:
    """Disjoint GPU sets, one per concurrent job (CUDA), or one slot per concurrent CPU job."""
    if settings.device != "cuda":
        return [None] * max(1, parallel or 1)
    count = torch.cuda.device_count()
    slots = max(1, count // settings.world_size)
    if parallel:
        slots = min(slots, parallel)
    return [list(range(i * settings.world_size, (i + 1) * settings.world_size)) for i in range(slots)]


def run_batch(
    settings: BatchSettings,
    out: str | Path,
    *,
    parallel: int | None = None,
    kb=None,
    eval_settings=None,
    on_event: Callable[[str, dict], None] | None = None,
) -> list[JobOutcome]:
    """Run (or resume) a batch into ``out``; returns one outcome per workload."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings.suite = str(resolve_suite(settings.suite))
    _check_same_batch(out, settings)
    chosen, left_out = plan_batch(settings)
    (out / "left_out.json").write_text(json.dumps([{"workload": w, "reason": r} for w, r in left_out], indent=1))
    todo: "queue.Queue" = queue.Queue()
    outcomes: list[JobOutcome] = []
    lock = threading.Lock()
    for info in chosen:
        sink = FileSink(out / "jobs" / info.name)
        previous = sink.load()
        if previous is not None and previous.state in FINISHED_STATES and previous.workload_sha256 == info.sha256:
            outcomes.append(JobOutcome(info.name, previous.state, _speedup(previous), 0.0, skipped=True))
            if on_event:
                on_event("skipped", {"workload": info.name, "state": previous.state})
            continue
        todo.put((info, sink, previous if previous and previous.workload_sha256 == info.sha256 else None))
    eval_settings = eval_settings or EvalSettings.for_device(settings.device)
    if settings.shapes:
        eval_settings.shapes = settings.shapes

    evaluators: list = []

    def worker(devices) -> None:
        with Evaluator(settings.device, eval_settings, devices=devices) as evaluator:
            evaluators.append(evaluator)
            while True:
                try:
                    info, sink, resume = todo.get_nowait()
                except queue.Empty:
                    return
                if on_event:
                    on_event("started", {"workload": info.name, "devices": devices, "resumed_at": len(resume.steps) if resume else 0})
                spec = settings.job_spec(info.path, job_id=f"batch:{out.name}:{info.name}", shapes=eval_settings.shapes)
                t0 = time.monotonic()
                profiler = job_profiler(spec.profile, spec.device, spec.shapes, evaluator.devices, evaluator.settings)
                traj = run_job(spec, sink, evaluator=evaluator, resume=resume, kb=kb, profiler=profiler)
                outcome = JobOutcome(info.name, traj.state, _speedup(traj), time.monotonic() - t0)
                with lock:
                    outcomes.append(outcome)
                if on_event:
                    on_event("finished", asdict(outcome))

    threads = [threading.Thread(target=worker, args=(devices,), daemon=True) for devices in _device_groups(settings, parallel)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.5)
    except KeyboardInterrupt:
        # Stopped from outside (a time limit, Ctrl-C): kill the rank pools so no GPU stays held;
        # every finished step is already saved, and the same command resumes.
        for evaluator in evaluators:
            for pool in evaluator.pools.values():
                pool.kill()
        raise
    return outcomes


def _speedup(traj: Trajectory) -> float | None:
    return traj.best_speedup


def _check_same_batch(out: Path, settings: BatchSettings) -> None:
    if (out / ARCHIVE).is_file():
        raise ValueError(f"{out} holds an archived batch ({ARCHIVE}): its jobs cannot resume; use another --out")
    path = out / "batch.json"
    current = asdict(settings)
    if path.is_file():
        saved = json.loads(path.read_text())
        keys = ("suite", "world_size", "device", "strategist", "shapes")
        differing = [k for k in keys if saved.get(k) != current.get(k)]
        if differing:
            raise ValueError(
                f"{out} holds a batch with other settings ({', '.join(f'{k}={saved.get(k)!r}' for k in differing)}); "
                "use another --out or the same settings to resume it"
            )
    path.write_text(json.dumps(current, indent=1))
