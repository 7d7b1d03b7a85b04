"""One KernelBench problem, measured for ``kernelbench_run.py`` (in a child process of its own).

Phases, each writing the result file again as it ends (so a kill keeps what was measured;
max-autotune, which compiles longest, runs after kloom's job):
1. eager: the problem's ``Model`` on its own ``get_inputs()``, timed with the evaluator's timer
   (``services/worker/evaluator/timing.py``: cache flushed before every call, CUDA events), and its
   peak device memory (the torch allocator's peak, and the device's as NVML sees it);
2. each ``torch.compile`` mode: compile seconds (the first call), time, and the outputs against
   eager's at KernelBench's tolerance (atol = rtol = 1e-2);
3. kloom offline: ``run_job`` with the offline strategist and the real evaluator on the imported
   workload, at most ``--max-candidates`` candidates: outcome, the two times the speedup divides
   with their 95% interval, the winning strategy and what made it (kloom's kernels, inductor, a
   CUDA graph, cuDNN settings), job wall time, and the device's peak while the job ran.

With ``--no-kloom``, phases 1 and 2 only (``kernelbench_run.py --fill``: a compile mode added to
problems measured without it, beside an eager time measured again in the same process).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kloom.speedup import REFERENCE_COPY  # noqa: E402
from services.worker.evaluator import precision  # noqa: E402
from services.worker.profiler.nvml_quiet import sampling_allowed  # noqa: E402

KB_TOLERANCE = 1e-2
COMPARE_CHUNK = 1 << 26  # elements: 512 MiB per float64 temporary
GIB = float(1 << 30)


class DevicePeak:
    """The device's used memory, sampled every 50 ms in a thread (NVML, else nvidia-smi): what
    every process on the GPU holds, the evaluator's rank processes included. No sample is taken
    while a judge times its blocks (``nvml_quiet``): NVML's queries stall CUDA calls beside them
    (the judge samples between its blocks itself), and beside the judge's probe of the GPU one
    read as work left running (an honest candidate rejected, thirty-sixth session)."""

    def __init__(self, device: str):
        self.enabled = device == "cuda"
        self.peak = 0
        self._stop = threading.Event()
        self._read = None
        if self.enabled:
            try:
                import pynvml

                pynvml.nvmlInit()
                # Index 0, not torch.cuda.current_device(): asking torch would create this
                # process's CUDA context before the idle reading (the run has one GPU).
                handle = pynvml.nvmlDeviceGetHandleByIndex(0)
                self._read = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used
            except Exception:  # noqa: BLE001 - no NVML bindings: ask nvidia-smi
                self._read = _smi_used

    def __enter__(self) -> "DevicePeak":
        if self.enabled:
            self.idle = self._read()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if sampling_allowed():
                self.sample()
            self._stop.wait(0.05)

    def sample(self) -> None:
        """One reading now (also from the measured code: building a problem on the device and
        calling it can take less than the thread's period, which then saw only the idle device)."""
        if not self.enabled:
            return
        try:
            self.peak = max(self.peak, self._read())
        except Exception:  # noqa: BLE001
            pass

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self.sample()  # what the block left allocated, at least

    def gib(self) -> dict | None:
        if not self.enabled:
            return None
        return {"peak_gib": round(self.peak / GIB, 3), "idle_gib": round(self.idle / GIB, 3), "above_idle_gib": round(max(0, self.peak - self.idle) / GIB, 3)}


def _smi_used() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
                         capture_output=True, text=True, timeout=10).stdout
    return int(out.strip().splitlines()[0]) << 20


def load(path: str):
    from kloom.workload import import_file, module_name_for

    return import_file(path, module_name_for(path, "kb_problem"))


def build(module, device: torch.device):
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    # As constructed (training mode), as kloom's evaluator runs the reference: in eval mode a
    # BatchNorm uses its running statistics instead of the batch's, another computation (measured
    # 13-16% faster on level2_11 and level2_15 before this was fixed).
    return model.to(device), inputs


def leaves(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in leaves(o)]
    return []


def compare(got, want) -> dict:
    g, w = leaves(got), leaves(want)
    if len(g) != len(w) or any(a.shape != b.shape for a, b in zip(g, w)):
        return {"correct": False, "why": "outputs differ in number or shape"}
    worst = 0.0
    ok = True
    for a, b in zip(g, w):
        # In chunks, in float64: whole, a 6 GiB float32 output took 12 GiB per temporary and
        # the compare ran out of memory on level1_19 (67.5 GiB held).
        a, b = a.detach().reshape(-1), b.detach().reshape(-1)
        for i in range(0, a.numel(), COMPARE_CHUNK):
            x, y = a[i:i + COMPARE_CHUNK].double(), b[i:i + COMPARE_CHUNK].double()
            worst = max(worst, float((x - y).abs().max()))
            ok = ok and bool(torch.allclose(x, y, atol=KB_TOLERANCE, rtol=KB_TOLERANCE))
    return {"correct": ok, "max_abs_diff": worst}


def time_ms(fn, device: torch.device, budget_s: float) -> dict:
    from services.worker.evaluator.timing import Timer

    timer = Timer(device, 0)
    samples = timer.measure(fn, restore=None, warmup=3, min_iters=10 if device.type == "cuda" else 3, max_iters=300, budget_s=budget_s)
    samples.sort()
    return {"ms": samples[len(samples) // 2], "p10_ms": samples[len(samples) // 10], "p90_ms": samples[(9 * len(samples)) // 10], "iters": len(samples)}


def measure_modes(row: dict, args, device: torch.device, save, modes: list[str]) -> None:
    module = load(args.workload)
    # The reference's own peak, from before its weights and inputs exist (and before this
    # process's CUDA context: the evaluator's ranks pay for theirs too).
    with DevicePeak(device.type) as seen:
        model, inputs = build(module, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            seen.sample()  # the model and its inputs
        with torch.no_grad():
            want = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
            seen.sample()  # and its outputs, with what the call took for temporaries (the allocator keeps it cached)
    if device.type == "cuda" and "reference_memory" not in row:
        row["reference_memory"] = {
            "allocator_peak_gib": round(torch.cuda.max_memory_allocated() / GIB, 3),
            "inputs_and_weights_gib": round(before / GIB, 3),
            "device": seen.gib(),
        }
    row.setdefault("modes", {})
    for mode in modes:
        entry: dict = {}
        row["modes"][mode] = entry
        try:
            fn = model if mode == "eager" else torch.compile(model, mode=mode)
            t0 = time.monotonic()
            with torch.no_grad():
                got = fn(*inputs)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            if mode != "eager":
                entry["compile_s"] = round(time.monotonic() - t0, 1)
                entry.update(compare(got, want))
            del got

            def call():
                with torch.no_grad():
                    fn(*inputs)

            entry.update(time_ms(call, device, args.timing_budget_s))
        except Exception as exc:  # noqa: BLE001 - one mode failing does not stop the others
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        save()
    del model, inputs, want
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def made_by(step) -> str:
    """What produced the best kernel: kloom's own kernels, inductor, a CUDA graph, cuDNN tuning."""
    params = step.plan.params or {}
    wrapper = params.get("wrapper", "none")
    if step.plan.strategy == REFERENCE_COPY:
        return "reference"
    if wrapper == "kernels":
        return "kloom kernels"
    if wrapper == "kernels_graph":
        return "kloom kernels in a CUDA graph"
    if wrapper == "kernels_compiled":
        # kloom's regions as opaque operators, inductor fusing what is left around them. Rows
        # measured before the thirty-second session counted these as inductor's.
        return "kloom kernels with inductor"
    if "compile" in wrapper or params.get("inner") == "compile":
        return "inductor"
    if wrapper == "graph":
        return "cuda graph"
    if "cudnn" in wrapper:
        return "cudnn tuning"
    return step.plan.strategy


def run_kloom(row: dict, args, save) -> None:
    from agents.loop import run_job
    from agents.records import JobSpec, Limits
    from agents.sinks import FileSink
    from kloom.speedup import measured
    from services.worker.evaluator import EvalSettings, Evaluator

    overrides = {"timing_budget_s": args.timing_budget_s} if args.timing_budget_s else {}
    # KLOOM_EVAL_<FIELD> variables set a setting for a whole run (benchmarks/gpu/spare_memory.sh).
    settings = dataclasses.replace(EvalSettings.from_env(args.device), **overrides)
    spec = JobSpec(workload=str(Path(args.workload).resolve()), world_size=1, device=args.device, shapes=settings.shapes,
                   strategist="offline", limits=Limits(max_iters=args.max_candidates), use_kb=False, profile="none")
    t0 = time.monotonic()
    with DevicePeak(args.device) as seen, Evaluator(args.device, settings) as evaluator:
        traj = run_job(spec, FileSink(Path(args.jobs) / args.name), evaluator=evaluator)
    best = traj.best_step
    m = measured(best.timing) if best else None
    row["kloom"] = {
        "state": traj.state,
        "stop_reason": traj.stop_reason[:500],
        "outcome": traj.outcome,
        "result_speedup": traj.result_speedup,
        "correct": best is not None,
        "reference_alone_ms": traj.baseline.reference_ms if traj.baseline else None,
        "reference_ms": m.reference_ms if m else None,
        "best_ms": m.candidate_ms if m else None,
        "measured_speedup": m.speedup if m else None,
        "speedup_ci": [m.low, m.high] if m and m.low is not None else None,
        "ci_from": m.interval_from if m else None,
        "verdict": m.verdict if m else None,
        "strategy": best.plan.strategy if best else None,
        "made_by": made_by(best) if best else None,
        "steps": [{"strategy": s.plan.strategy, "status": s.status, "speedup": s.speedup} for s in traj.steps],
        "job_wall_s": round(time.monotonic() - t0, 1),
        "device_memory": seen.gib(),
        "evaluator_bound_gib": evaluator_bound(traj),
        "pool_processes": pool_processes(traj),
    }
    save()


def evaluator_bound(traj) -> float | None:
    """Issue 21's bound on the evaluator's device memory, the largest over the job's evaluations:
    the reference's allocator peak + the candidate's + one copy of the outputs (GiB)."""
    bounds = [m.reference_peak_bytes + m.candidate_peak_bytes + m.output_bytes
              for s in traj.steps if s.evaluation is not None and (m := s.evaluation.memory) is not None]
    return round(max(bounds) / GIB, 3) if bounds else None


def pool_processes(traj) -> dict | None:
    """The most device memory the evaluator's own processes held together in one NVML sample,
    over the job's evaluations, with how many processes there were then: CUDA contexts and
    allocator pools, which ``evaluator_bound`` leaves out (``our_processes`` of the evaluation's
    NVML summary, docs/profiling.md); None where NVML gave no per-process memory."""
    seen = [ours for s in traj.steps if s.evaluation is not None
            for dev in ((s.evaluation.environment.get("nvml") or {}).get("devices") or {}).values()
            if (ours := dev.get("our_processes"))]
    if not seen:
        return None
    top = max(seen, key=lambda o: o["most_together_gib"])
    return {"gib": round(top["most_together_gib"], 3), "processes": top["processes_then"],
            "largest_gib": round(max(max(o["max_gib_by_pid"].values()) for o in seen), 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--result", required=True, type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--modes", default="eager,default,max-autotune")
    ap.add_argument("--max-candidates", type=int, default=3)
    ap.add_argument("--jobs", default="jobs")
    ap.add_argument("--timing-budget-s", type=float, default=None)
    ap.add_argument("--no-kloom", action="store_true", help="the baselines only (eager and the compile modes), no kloom job")
    args = ap.parse_args()
    if args.timing_budget_s is None:
        args.timing_budget_s = 1.0 if args.device == "cuda" else 0.2
    device = torch.device(args.device)
    # Eager and torch.compile at the precision the judge holds the reference to (no TF32 for
    # float32: PyTorch's default lets cuDNN's convolutions use it, which made eager 2x faster
    # than the reference kloom's speedups divide on KernelBench's level-2 convolutions).
    precision.pin()
    # The device's name is asked after the reference's peak is read (asking starts CUDA here).
    row: dict = {"workload": args.name, "status": "running", "device": args.device, "precision": precision.flags()}

    def save() -> None:
        tmp = args.result.with_suffix(".tmp")
        tmp.write_text(json.dumps(row))
        tmp.replace(args.result)

    save()
    modes = [m for m in args.modes.split(",") if m]
    # max-autotune compiles longest: it goes last, so that a call's budget running out there
    # costs its time only (the row is measured by then).
    late = [m for m in modes if m == "max-autotune"]
    try:
        measure_modes(row, args, device, save, [m for m in modes if m not in late])
    except Exception as exc:  # noqa: BLE001 - the problem itself does not run here
        row.update(status="reference_failed", reason=f"{type(exc).__name__}: {exc}"[:1000])
        save()
        return 0
    row["device"] = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    if not args.no_kloom:
        run_kloom(row, args, save)
    row["status"] = "measured"
    save()
    if late:
        measure_modes(row, args, device, save, late)
    return 0


if __name__ == "__main__":
    sys.exit(main())
