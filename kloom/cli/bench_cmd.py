"""``kloom bench``: batch runs over a suite (resumable), their reports, comparisons and baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kloom.batch.archive import ArchiveError, archive_batch
from kloom.batch.plan import BatchSettings, plan_batch
from kloom.batch.report import BatchReport, compare, workload_table, write_report

from .evaluate import Device
from .optimize_cmd import _open_kb

bench_app = typer.Typer(help="Batch runs over a benchmark suite: run, report, compare, baselines.", no_args_is_help=True)

SuiteOpt = Annotated[str, typer.Option("--suite", help="'kloom' (the built-in suite) or a directory of workload files.")]


@bench_app.command("run")
def run_cmd(
    world_size: Annotated[int, typer.Option("--world-size", "-n", min=1, help="Ranks per job.")],
    suite: SuiteOpt = "kloom",
    device: Annotated[Device, typer.Option(help="cpu or cuda.")] = Device.cpu,
    strategist: Annotated[str, typer.Option("--strategist", help="'offline' or a litellm model name.")] = "offline",
    max_iters: Annotated[int, typer.Option("--max-iters", min=1, help="Candidates per workload at most.")] = 6,
    budget_usd: Annotated[float | None, typer.Option("--budget-usd", help="Model spend per job at most.")] = None,
    max_wall_s: Annotated[float | None, typer.Option("--max-wall-s", help="Wall time per job at most.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Batch directory (re-running the same command resumes it).")] = Path("kloom-batch"),
    workload: Annotated[list[str] | None, typer.Option("--workload", "-w", help="Only these workloads (repeatable).")] = None,
    parallel: Annotated[int | None, typer.Option("--parallel", help="Concurrent jobs (default: GPUs // world size, 1 on CPU).")] = None,
    shapes: Annotated[str | None, typer.Option("--shapes", help="Shape profile (default: ci on cpu, gpu on cuda).")] = None,
    use_kb: Annotated[bool, typer.Option("--kb/--no-kb", help="Use and fill the knowledge base.")] = True,
    profile: Annotated[str, typer.Option("--profile", help="Which correct candidates get a hardware profile: new_best, every_correct or none.")] = "new_best",
) -> None:
    """Optimize every workload of a suite at one world size and write the report.

    Stopped at any point, the same command continues where the batch was: finished workloads
    are not redone and an interrupted job resumes from its last recorded step.
    """
    from kloom.batch.runner import run_batch  # lazy: loads torch, the evaluator and the agents' loop

    settings = BatchSettings(
        suite=suite,
        world_size=world_size,
        device=device.value,
        strategist=strategist,
        max_iters=max_iters,
        budget_usd=budget_usd,
        max_wall_s_per_job=max_wall_s,
        shapes=shapes,
        workloads=list(workload or []),
        use_kb=use_kb,
        profile=profile,
    )
    console = Console()
    chosen, left_out = plan_batch(settings)
    for name, reason in left_out:
        console.print(f"[dim]left out {name}: {reason}[/]")
    kb = _open_kb(console) if use_kb else None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(f"batch of {len(chosen)} workloads", total=len(chosen))

        def on_event(kind: str, data: dict) -> None:
            if kind in ("finished", "skipped"):
                progress.advance(task)
                speed = f"{data['speedup']:.3f}x" if data.get("speedup") else "-"
                note = "(already done)" if kind == "skipped" else f"{data.get('seconds', 0):.0f} s"
                progress.console.print(f"{data['workload']:<40} {data['state']:<10} {speed if kind == 'finished' else ''} {note}")
            elif kind == "started":
                resumed = f" (resuming at step {data['resumed_at']})" if data.get("resumed_at") else ""
                progress.console.print(f"[dim]start {data['workload']}{resumed}[/]")

        try:
            run_batch(settings, out, parallel=parallel, kb=kb, on_event=on_event)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    report = write_report(out)
    _print_aggregate(console, report)
    console.print(f"report: {out / 'report.md'}")


@bench_app.command("report")
def report_cmd(out: Annotated[Path, typer.Argument(help="A batch directory.")], as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """(Re)write and print the report of a batch directory, finished or not."""
    if not (out / "batch.json").is_file():
        raise typer.BadParameter(f"{out} is not a batch directory (no batch.json)")
    report = write_report(out)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=1))
    else:
        _print_aggregate(Console(), report)
        # The per-workload table, as Markdown lines (readable in a terminal and when piped).
        typer.echo("\n".join(workload_table(report.rows)))
        typer.echo(f"report: {out / 'report.md'}")


@bench_app.command("archive")
def archive_cmd(
    out: Annotated[Path, typer.Argument(help="A finished batch directory.")],
    commit: Annotated[str | None, typer.Option("--commit", help="The commit to record in each job's manifest (default: the last commit that changed the directory).")] = None,
) -> None:
    """Pack a finished batch's job trajectories into one compressed archive (trajectories.jsonl.xz)
    with a manifest per job, removing the per-job trajectory.json and best_kernel.py copies;
    `kloom bench report` reads the archive."""
    try:
        done = archive_batch(out, commit=commit)
    except ArchiveError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"archived {len(done['jobs'])} job(s) into {done['archive']} (commit {done['commit'] or 'unknown'})")


@bench_app.command("compare")
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Report A: a batch directory or its report.json.")],
    b: Annotated[Path, typer.Argument(help="Report B.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show what changed from batch A to batch B."""
    def load(path: Path) -> BatchReport:
        path = path / "report.json" if path.is_dir() else path
        if not path.is_file():
            raise typer.BadParameter(f"no report at {path}")
        return BatchReport.from_dict(json.loads(path.read_text()))

    diff = compare(load(a), load(b))
    if as_json:
        typer.echo(json.dumps(diff.to_dict(), indent=1))
        return
    console = Console()
    table = Table(title="aggregates: A -> B")
    for col in ("metric", "A", "B"):
        table.add_column(col)
    for key, (va, vb) in diff.aggregate.items():
        table.add_row(key, _num(va), _num(vb))
    console.print(table)
    table = Table(title="workloads")
    for col in ("workload", "speedup A", "speedup B", "change", "strategy A", "strategy B"):
        table.add_column(col)
    for w in diff.workloads:
        table.add_row(w.workload, _num(w.speedup_a), _num(w.speedup_b), w.change, w.strategy_a or "-", w.strategy_b or "-")
    console.print(table)


@bench_app.command("baseline")
def baseline_cmd(
    world_size: Annotated[list[int], typer.Option("--world-size", "-n", help="World sizes (repeatable).")],
    suite: SuiteOpt = "kloom",
    device: Annotated[Device, typer.Option(help="cpu or cuda.")] = Device.cpu,
    out: Annotated[Path, typer.Option("--out", help="JSON-lines file of rows (resumable); a .md table is written beside it.")] = Path("baselines.jsonl"),
) -> None:
    """Time every workload's reference and give its roofline floor (the table speedups are measured from)."""
    from kloom.batch.baselines import baselines_markdown, measure_baselines  # lazy: loads torch and the evaluator

    console = Console()

    def show(row: dict) -> None:
        base = f"{row['baseline_ms']:.4g} ms" if row.get("baseline_ms") else row["status"]
        console.print(f"{row['workload']:<40} ws={row['world_size']} {base}")

    rows = measure_baselines(suite, world_size, out, device=device.value, on_row=show)
    out.with_suffix(".md").write_text(baselines_markdown(rows))
    console.print(f"table: {out.with_suffix('.md')}")


def _num(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _print_aggregate(console: Console, report: BatchReport) -> None:
    a = report.aggregate
    table = Table(title="batch")
    table.add_column("metric")
    table.add_column("value")
    table.add_row("workloads (finished)", f"{a.workloads} ({a.finished})")
    table.add_row("correct", f"{a.correct} ({100 * a.correctness_rate:.0f}%)")
    for p, v in a.fast_p.items():
        table.add_row(f"fast_{p} (measurable wins)", f"{v:.2f}")
    if a.fast_1_any is not None:
        table.add_row("fast_1 (any speedup > 1, as in the literature)", f"{a.fast_1_any:.2f}")
        table.add_row("faster kernel found / no measurable change", f"{a.faster_kernel_found} / {a.no_measurable_change}")
    table.add_row("geomean speedup", _num(a.geomean_speedup))
    table.add_row("median fraction of floor", _num(a.median_fraction_of_floor))
    table.add_row("GPU hours", f"{a.total_gpu_hours:.3f}")
    table.add_row("LLM cost (USD)", _num(a.total_cost_usd))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
