"""``kloom suite list`` and ``kloom suite show``: the benchmark suite's workloads, read from their
files' syntax trees (nothing is run). ``suite_app`` is the ``kloom suite`` group; other suite
commands (importers) add themselves to it."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from kloom.suite import discover, find
from kloom.workload import WorkloadError, read_source

from .import_cmd import register_import

#: The parallelism families of docs/workload-format.md.
FAMILIES = (
    "collectives",
    "tensor_parallel",
    "sequence_parallel",
    "context_parallel",
    "expert_parallel",
    "data_parallel",
    "pipeline_parallel",
    "vocab_parallel",
    "other",
    "single_gpu",
)

suite_app = typer.Typer(name="suite", help="The benchmark suite: list its workloads, show one.", no_args_is_help=True)
register_import(suite_app)  # kloom suite import kernelbench|pkb (kloom/cli/import_cmd.py)

SuiteOpt = Annotated[str | None, typer.Option("--suite", help="A directory of workload files (default: kloom's own suite).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _family(value: str | None) -> str | None:
    if value is not None and value not in FAMILIES:
        raise typer.BadParameter(f"{value!r} is not a family; choose one of {', '.join(FAMILIES)}")
    return value


def shape_profiles(source: str) -> dict[str, str]:
    """The source text of each profile in a workload's literal ``SHAPES = {...}`` dict."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "SHAPES" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {
                key.value: ast.get_source_segment(source, value) or ""
                for key, value in zip(node.value.keys, node.value.values)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
    return {}


@suite_app.command("list")
def list_cmd(
    family: Annotated[str | None, typer.Option("--family", "-f", callback=_family, help="Only this parallelism family.")] = None,
    suite: SuiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the suite's workloads (name, family, world sizes, where each appears in practice)."""
    try:
        found, problems = discover(suite)
    except FileNotFoundError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1)
    chosen = [w for w in found if family is None or w.family == family]
    if as_json:
        payload = {
            "workloads": [dataclasses.asdict(w) for w in chosen],
            "problems": [dataclasses.asdict(p) for p in problems],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    if not sys.stdout.isatty():
        # Piped or redirected: plain tab-separated lines, whole (no box, no truncation), for
        # grep, cut and column -t.
        typer.echo("name\tfamily\tworld_sizes\tdescription")
        for w in chosen:
            typer.echo("\t".join((w.name, w.family, ",".join(map(str, w.world_sizes)), " ".join(w.description.split()))))
        for problem in problems:
            typer.echo(f"not a usable workload: {problem.path}: {problem.reason}", err=True)
        return
    table = Table(title=f"{len(chosen)} workloads" + (f" in {family}" if family else ""))
    table.add_column("name", no_wrap=True, min_width=max((len(w.name) for w in chosen), default=4))
    table.add_column("family", no_wrap=True)
    table.add_column("world sizes")
    table.add_column("description", overflow="fold")
    for w in chosen:
        table.add_row(Text(w.name), w.family, ",".join(map(str, w.world_sizes)), Text(w.description))
    Console().print(table)
    errors = Console(stderr=True)
    for problem in problems:
        errors.print(f"not a usable workload: {problem.path}: {problem.reason}", markup=False, highlight=False)


@suite_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="A workload's name (see `kloom suite list`) or a workload file.")],
    suite: SuiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one workload: its metadata, shape profiles and source."""
    try:
        info = find(name, suite)
        source = read_source(info.path)
    except (KeyError, FileNotFoundError, WorkloadError) as exc:
        typer.echo(exc.args[0] if isinstance(exc, KeyError) else str(exc), err=True)
        raise typer.Exit(1)
    shapes = shape_profiles(source)
    if as_json:
        typer.echo(json.dumps({**dataclasses.asdict(info), "shapes": shapes, "code": source}, indent=2))
        return
    console = Console()
    console.print(f"[bold]{info.name}[/] ({info.family}) - {info.path}", highlight=False)
    rows = [
        ("description", info.description),
        ("source", info.source),
        ("world sizes", ", ".join(map(str, info.world_sizes))),
        ("roofline", "yes" if info.has_roofline else "no"),
        ("tolerance", "workload's own" if info.has_tolerance else "defaults"),
        *((f"shapes {profile}", text) for profile, text in shapes.items()),
    ]
    table = Table(show_header=False, box=None)
    table.add_column(style="dim")
    table.add_column()
    for key, value in rows:
        table.add_row(key, Text(value))
    console.print(table)
    console.print(Syntax(source, "python", line_numbers=True, word_wrap=True))


def register(app: typer.Typer) -> None:
    app.add_typer(suite_app, name="suite")
