"""``kloom suite import kernelbench|pkb``: turn a benchmark checkout into a suite directory.

The ``suite`` command group owns this sub-group: it calls ``register_import(suite_app)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kloom.importers import ImporterError, import_kernelbench, import_pkb
from kloom.importers.pkb import DEFAULT_SHAPES

import_app = typer.Typer(
    help="Import the problems of a KernelBench or ParallelKernelBench checkout as a suite directory.",
    no_args_is_help=True,
)

CheckoutArg = Annotated[Path, typer.Argument(help="The checkout's root directory.")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Suite directory to write (default: under ~/.cache/kloom/suites/).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the imported and the rejected problems as JSON.")]


def register_import(suite_app: typer.Typer) -> None:
    """Add ``import kernelbench`` and ``import pkb`` to the ``kloom suite`` group."""
    suite_app.add_typer(import_app, name="import")


@import_app.command("kernelbench")
def kernelbench_cmd(
    path: CheckoutArg,
    level: Annotated[int | None, typer.Option("--level", min=1, help="Import this level only (default: every level).")] = None,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """KernelBench problems (KernelBench/level<N>/<id>_<name>.py) as world-size-1 workloads."""
    try:
        report = import_kernelbench(path, level=level, out_dir=out)
    except ImporterError as exc:
        typer.echo(f"cannot import: {exc}", err=True)
        raise typer.Exit(2)
    _show(report, as_json)


@import_app.command("pkb")
def pkb_cmd(
    path: CheckoutArg,
    out: OutOpt = None,
    world_sizes: Annotated[str, typer.Option("--world-sizes", help="World sizes the workloads declare, comma-separated.")] = "1,2,4,8",
    gpu_shape: Annotated[str, typer.Option("--gpu-shape", help="base_shape of the gpu shape profile, MxN.")] = "1024x1024",
    gpu_dtype: Annotated[str, typer.Option("--gpu-dtype", help="dtype of the gpu shape profile.")] = "bfloat16",
    as_json: JsonOpt = False,
) -> None:
    """ParallelKernelBench problems (reference/<id>_<name>.py) as multi-rank workloads.

    Inputs come from the checkout's utils/input_output_tensors.py at run time; problems kloom
    cannot run are listed with the reason.
    """
    try:
        sizes = tuple(int(w) for w in world_sizes.split(",") if w.strip())
        m, n = (int(v) for v in gpu_shape.lower().split("x"))
    except ValueError:
        typer.echo("--world-sizes takes integers like 2,4,8 and --gpu-shape one like 1024x1024", err=True)
        raise typer.Exit(2)
    if not sizes or min(sizes) < 1:
        typer.echo("--world-sizes needs at least one positive integer", err=True)
        raise typer.Exit(2)
    shapes = {**DEFAULT_SHAPES, "gpu": {"base_shape": (m, n), "dtype": gpu_dtype}}
    try:
        report = import_pkb(path, out_dir=out, shapes=shapes, world_sizes=sizes)
    except ImporterError as exc:
        typer.echo(f"cannot import: {exc}", err=True)
        raise typer.Exit(2)
    _show(report, as_json)


def _show(report, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
        return
    console = Console()
    if report.imported:
        table = Table(title=f"imported from {report.checkout}")
        table.add_column("workload")
        table.add_column("notes")
        for item in report.imported:
            table.add_row(item.name, "; ".join(item.notes))
        console.print(table)
    if report.rejected:
        table = Table(title="not imported")
        table.add_column("problem")
        table.add_column("reason")
        for item in report.rejected:
            table.add_row(Path(item.origin).name, item.reason)
        console.print(table)
    console.print(f"{len(report.imported)} imported, {len(report.rejected)} rejected; suite directory: {report.out_dir}")
