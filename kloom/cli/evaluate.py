"""``kloom eval`` and ``kloom baseline``: judge one candidate, or time the reference alone."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


WorkloadArg = Annotated[Path, typer.Argument(help="Workload file (KernelBench format, optionally multi-rank).", exists=False)]
WorldSizeOpt = Annotated[int, typer.Option("--world-size", "-n", min=1, help="Number of ranks.")]
DeviceOpt = Annotated[Device, typer.Option("--device", help="cpu (gloo) or cuda (NCCL, one GPU per rank).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the full result record as JSON.")]
ShapesOpt = Annotated[str | None, typer.Option("--shapes", help="Shape profile: ci or gpu (default: ci on cpu, gpu on cuda).")]


def _settings(device: Device, shapes: str | None, trials: int | None = None):
    from services.worker.evaluator import EvalSettings  # lazy: the evaluator loads torch

    settings = EvalSettings.from_env(device.value)
    if shapes:
        settings.shapes = shapes
    if trials is not None:
        settings.trials = trials
    return settings


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_cmd(
        workload: WorkloadArg,
        candidate: Annotated[Path, typer.Argument(help="Candidate file defining ModelNew.")],
        world_size: WorldSizeOpt = 1,
        device: DeviceOpt = Device.cpu,
        shapes: ShapesOpt = None,
        trials: Annotated[int, typer.Option(min=1, help="Correctness trials before timing.")] = 5,
        as_json: JsonOpt = False,
    ) -> None:
        """Check a candidate against the reference on every rank and time both.

        Exit code 0 only when the candidate is correct on every rank.
        """
        from services.worker.evaluator import Evaluator  # lazy: the evaluator loads torch

        with Evaluator(device.value, _settings(device, shapes, trials)) as evaluator:
            result = evaluator.evaluate(workload, candidate, world_size=world_size)
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            print_result(result)
        raise typer.Exit(0 if result.correct else 1)

    @app.command("baseline")
    def baseline_cmd(
        workload: WorkloadArg,
        world_size: WorldSizeOpt = 1,
        device: DeviceOpt = Device.cpu,
        shapes: ShapesOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Time the reference alone on every rank (and give its roofline floor)."""
        from services.worker.evaluator import Evaluator  # lazy: the evaluator loads torch

        with Evaluator(device.value, _settings(device, shapes)) as evaluator:
            result = evaluator.baseline(workload, world_size=world_size)
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            print_baseline(result)
        raise typer.Exit(0 if result.status == "correct" else 1)


def print_result(result) -> None:
    console = Console()
    colour = "green" if result.correct else "red"
    console.print(f"[bold {colour}]{result.status}[/] {result.workload} at world size {result.world_size} on {result.device}")
    console.print(result.summary())
    if result.error:
        if result.error.traceback:
            console.print(result.error.traceback.rstrip(), markup=False, highlight=False)
        if result.error.log_tail:
            console.print("last lines of the rank's log:", style="dim")
            console.print(result.error.log_tail.rstrip(), markup=False, highlight=False)
    if result.trials:
        table = Table(title="correctness (worst rank per trial)")
        for col in ("trial", "phase", "ok", "max abs diff", "max rel diff", "message"):
            table.add_column(col)
        for trial in result.trials:
            worst = max(trial.ranks, key=lambda c: (not c.ok, c.max_abs_diff))
            table.add_row(str(trial.trial), trial.phase, "yes" if trial.ok else "NO", f"{worst.max_abs_diff:.3g}", f"{worst.max_rel_diff:.3g}", worst.message[:120])
        console.print(table)
    if result.timing:
        table = Table(title=f"timing ({result.timing.clock}), ms")
        for col in ("rank", "reference median", "candidate median", "candidate p10-p90", "iters"):
            table.add_column(col)
        for rank, (ref, cand) in enumerate(zip(result.timing.reference, result.timing.candidate)):
            table.add_row(str(rank), f"{ref.median_ms:.4g}", f"{cand.median_ms:.4g}", f"{cand.p10_ms:.4g}-{cand.p90_ms:.4g}", str(cand.iters))
        console.print(table)
        console.print(f"speedup (max over ranks of reference / max over ranks of candidate): [bold]{result.timing.speedup:.3f}x[/]")
    if result.roofline:
        r = result.roofline
        console.print(
            f"roofline ({r.profile}): floor {r.floor_ms:.4g} ms ({r.dominant}-bound; compute {r.compute_ms:.3g}, "
            f"HBM {r.hbm_ms:.3g}, link {r.link_ms:.3g} ms; unoverlapped {r.unoverlapped_ms:.3g} ms)"
            + (f"; candidate at {100 * r.fraction_of_floor:.1f}% of the floor" if r.fraction_of_floor else "")
        )


def print_baseline(result) -> None:
    console = Console()
    if result.status != "correct":
        console.print(f"[bold red]{result.status}[/]: {result.error.message if result.error else ''}")
        if result.error and result.error.traceback:
            console.print(result.error.traceback.rstrip(), markup=False, highlight=False)
        return
    table = Table(title=f"reference of {result.workload} at world size {result.world_size} on {result.device}, ms")
    for col in ("rank", "median", "p10", "p90", "iters"):
        table.add_column(col)
    for rank, t in enumerate(result.times):
        table.add_row(str(rank), f"{t.median_ms:.4g}", f"{t.p10_ms:.4g}", f"{t.p90_ms:.4g}", str(t.iters))
    console.print(table)
    console.print(f"reference time (max over ranks of the median): [bold]{result.reference_ms:.4g} ms[/]")
    if result.roofline:
        r = result.roofline
        console.print(f"roofline ({r.profile}): floor {r.floor_ms:.4g} ms, {r.dominant}-bound; reference at {100 * (r.reference_fraction or 0):.1f}% of the floor")
