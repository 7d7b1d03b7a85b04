"""``kloom optimize``: run one optimization job locally, with a progress display."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agents.records import JobRequest, Limits
from agents.sinks import FileSink
from kloom.speedup import FASTER, measured
from kloom.suite import find

from .evaluate import Device, ShapesOpt, _settings


def resolve_workload(workload: str) -> Path:
    """A path to a workload file, or the name of a workload in kloom's suite."""
    path = Path(workload)
    if path.is_file():
        return path
    try:
        return Path(find(workload).path)
    except KeyError as exc:
        raise typer.BadParameter(str(exc).strip('"')) from None


def register(app: typer.Typer) -> None:
    @app.command("optimize")
    def optimize_cmd(
        workload: Annotated[str, typer.Argument(help="Workload file, or the name of a suite workload.")],
        world_size: Annotated[int, typer.Option("--world-size", "-n", min=1, help="Number of ranks.")] = 1,
        device: Annotated[Device, typer.Option(help="cpu (gloo) or cuda (NCCL).")] = Device.cpu,
        model: Annotated[str, typer.Option("--model", help="'offline' (no LLM), or a litellm model name, e.g. openai/gpt-4o.")] = "offline",
        max_iters: Annotated[int, typer.Option("--max-iters", min=1, help="Candidates to evaluate at most.")] = 6,
        budget_usd: Annotated[float | None, typer.Option("--budget-usd", help="Stop before model calls would pass this spend.")] = None,
        max_wall_s: Annotated[float | None, typer.Option("--max-wall-s", help="Stop after this many seconds.")] = None,
        out: Annotated[Path, typer.Option("--out", help="Directory for trajectory.json and best_kernel.py.")] = Path("kloom-out"),
        shapes: ShapesOpt = None,
        fresh: Annotated[bool, typer.Option("--fresh", help="Start over even if --out holds a trajectory of this job.")] = False,
        use_kb: Annotated[bool, typer.Option("--kb/--no-kb", help="Use the knowledge base (when it is set up).")] = True,
        profile: Annotated[str, typer.Option("--profile", help="Which correct candidates get a hardware profile: new_best, every_correct or none.")] = "new_best",
    ) -> None:
        """Optimize a workload: plan, write and evaluate candidates, keep the best.

        The trajectory is saved after every step; running the same command again resumes it.
        Exit code 0 when a correct kernel was found.
        """
        from agents.loop import run_job  # lazy: the agents' loop loads torch
        from services.worker.evaluator import Evaluator  # lazy: the evaluator loads torch
        from services.worker.profiler import job_profiler  # lazy: the profiler loads torch

        path = resolve_workload(workload)
        settings = _settings(device, shapes)
        request = JobRequest(world_size=world_size, device_kind=device.value, strategist=model, shapes=settings.shapes,
                             limits=Limits(max_iters=max_iters, max_wall_s=max_wall_s, budget_usd=budget_usd),
                             use_kb=use_kb, profile=profile)
        spec = request.spec(str(path.resolve()))
        sink = FileSink(out)
        resume = None if fresh else sink.load()
        if resume is not None and (resume.job.workload != spec.workload or resume.job.world_size != world_size or resume.job.device != device.value):
            resume = None
        console = Console()
        if resume is not None:
            console.print(f"resuming {sink.trajectory_path} at step {len(resume.steps)}")
        kb = _open_kb(console) if use_kb else None
        console.print(f"optimizing [bold]{path.name}[/] at world size {world_size} on {device.value} with the {model} strategist")
        with Evaluator(device.value, settings) as evaluator, console.status("preparing: timing the reference and tracing it") as status:

            def show(traj) -> None:
                step = traj.steps[-1]
                speed = f"{step.speedup:.3f}x" if step.speedup is not None else "-"
                best = traj.best_step
                status.update(f"step {step.index + 1}/{max_iters}: best {traj.best_speedup:.3f}x" if best else f"step {step.index + 1}/{max_iters}")
                console.print(f"step {step.index}: {step.plan.strategy:<26} {step.status:<14} {speed:>9}  {step.feedback.splitlines()[0][:90] if step.feedback else ''}")

            profiler = job_profiler(spec.profile, spec.device, spec.shapes, evaluator.devices, evaluator.settings)
            traj = run_job(spec, sink, evaluator=evaluator, resume=resume, kb=kb, progress=show, profiler=profiler)
        _print_summary(console, traj, sink)
        raise typer.Exit(0 if traj.best_step is not None else 1)


def _open_kb(console: Console):
    """The knowledge base adapter, or None when the KB is not installed or not reachable."""
    try:
        from kb.adapter import KnowledgeBaseAdapter  # optional: the knowledge base needs sqlalchemy (a service extra)
    except ImportError:
        return None
    try:
        return KnowledgeBaseAdapter.from_settings()
    except Exception as exc:  # noqa: BLE001 - the job runs without a KB
        console.print(f"[yellow]knowledge base unavailable ({exc}); running without it[/]")
        return None


def _print_summary(console: Console, traj, sink) -> None:
    table = Table(title=f"{traj.workload_name}: {traj.state} ({traj.stop_reason})")
    for col in ("step", "strategy", "status", "reference ms", "ms", "speedup (95% CI)", "verdict", "% of floor"):
        table.add_column(col)
    for step in traj.steps:
        m = measured(step.timing, traj.self_bias) if step.correct else None
        ci = f" ({m.low:.2f}-{m.high:.2f})" if m and m.low is not None else ""
        table.add_row(
            str(step.index),
            step.plan.strategy,
            step.status,
            f"{m.reference_ms:.4g}" if m else "-",
            f"{m.candidate_ms:.4g}" if m else "-",
            f"{m.speedup:.3f}x{ci}" if m else "-",
            m.verdict if m else "-",
            f"{100 * step.fraction_of_floor:.1f}" if step.fraction_of_floor else "-",
        )
    console.print(table)
    best = traj.best_step
    if best:
        m = measured(best.timing, traj.self_bias)
        what = m.text() if m else f"{traj.best_speedup:.3f}x"
        if traj.outcome == FASTER:
            console.print(f"faster kernel found: step {best.index} ({best.plan.strategy}), {what}; kernel in {sink.directory / 'best_kernel.py'}")
        else:
            console.print(f"no faster kernel found: the reference stands at 1.00x (best correct kernel: step {best.index}, {best.plan.strategy}, {what}); it is in {sink.directory / 'best_kernel.py'}")
    else:
        console.print("no correct kernel")
    console.print(f"trajectory: {sink.trajectory_path}")
