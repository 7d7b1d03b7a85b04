"""``kloom kb``: search the knowledge base, show a kernel or a strategy, export a kernel, judge
the kept kernels again (``verify``).

The database is kloom's (``KLOOM_DATABASE_URL``, else the embedded SQLite file); ``--db`` points
at another one.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

DbOpt = Annotated[str | None, typer.Option("--db", help="Database URL (default: kloom's settings, KLOOM_DATABASE_URL).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _sessions(db: str | None):
    from kb.adapter import open_kb  # lazy: the knowledge base loads sqlalchemy

    return open_kb(db)[1]


def _strategy_row(strategy) -> dict:
    return {
        "id": strategy.public_id,
        "strategy": strategy.name,
        "description": strategy.description,
        "applies_to": strategy.applies_to,
        "wins": strategy.wins,
        "losses": strategy.losses,
        "confidence": round(strategy.confidence, 4),
        "best_speedup": strategy.best_speedup,
        "best_params": strategy.best_params,
    }


def _evidence_row(e) -> dict:
    return {
        "job_id": e.job_id,
        "workload": e.job.workload_name,
        "world_size": e.job.world_size,
        "won": e.won,
        "status": e.status,
        "speedup": e.speedup,
        "candidate_ms": e.candidate_ms,
        "reference_ms": e.reference_ms,
        "fraction_of_floor": e.fraction_of_floor,
        "params": e.params,
        "tries": e.tries,
        "profile": e.profile_summary,
    }


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def register(app: typer.Typer) -> None:
    kb_app = typer.Typer(help="The knowledge base: winning kernels and the strategies behind them.", no_args_is_help=True)
    app.add_typer(kb_app, name="kb")

    @kb_app.command("search")
    def search_cmd(
        query: Annotated[str | None, typer.Argument(help="Words to match (workload, strategy, operators, collectives).")] = None,
        family: Annotated[str | None, typer.Option("--family", help="Only this parallelism family.")] = None,
        collective: Annotated[str | None, typer.Option("--collective", help="Only workloads that call this collective.")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1)] = 20,
        as_json: JsonOpt = False,
        db: DbOpt = None,
    ) -> None:
        """Find kernels: by relevance to QUERY, else fastest first."""
        from kb import store  # lazy: the knowledge base loads sqlalchemy
        from kb.records import KernelSummary  # lazy: the knowledge base loads sqlalchemy

        with _sessions(db)() as session:
            matches = store.search(session, query, family=family, collective=collective, limit=limit)
            rows = [KernelSummary.of(m.kernel, score=m.score if query else None) for m in matches]
        if as_json:
            typer.echo(json.dumps([r.to_json() for r in rows], indent=2))
            return
        if not rows:
            Console().print("no kernel matches")
            return
        table = Table(title=f"{len(rows)} kernel(s)")
        for col in ("id", "workload", "family", "ranks", "hardware", "strategy", "speedup", "% of floor"):
            table.add_column(col, overflow="fold")
        for r in rows:
            floor = _fmt(r.fraction_of_floor and 100 * r.fraction_of_floor, "{:.0f}")
            table.add_row(r.id, r.workload_name, r.family, str(r.world_size), r.hardware, r.strategy, f"{r.speedup:.2f}x", floor)
        Console().print(table)

    @kb_app.command("strategies")
    def strategies_cmd(
        family: Annotated[str | None, typer.Option("--family", help="Only this parallelism family.")] = None,
        limit: Annotated[int, typer.Option("--limit", min=1)] = 50,
        as_json: JsonOpt = False,
        db: DbOpt = None,
    ) -> None:
        """List strategies with their wins, losses and the confidence their evidence gives."""
        from kb import store  # lazy: the knowledge base loads sqlalchemy

        with _sessions(db)() as session:
            rows = [_strategy_row(s) for s in store.list_strategies(session, family=family, limit=limit)]
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        table = Table(title=f"{len(rows)} strateg{'y' if len(rows) == 1 else 'ies'}")
        for col in ("id", "strategy", "family", "bound", "hardware", "wins", "losses", "confidence", "best"):
            table.add_column(col, overflow="fold")
        for r in rows:
            scope = r["applies_to"]
            table.add_row(
                r["id"], r["strategy"], scope["family"], scope["dominant"] or "-", scope["hardware"],
                str(r["wins"]), str(r["losses"]), f"{r['confidence']:.2f}", _fmt(r["best_speedup"], "{:.2f}x"),
            )
        Console().print(table)

    @kb_app.command("show")
    def show_cmd(
        item: Annotated[str, typer.Argument(help="A kernel id (k12, or 12) or a strategy id (s3).")],
        as_json: JsonOpt = False,
        db: DbOpt = None,
    ) -> None:
        """Show a kernel (its code, measurements and provenance) or a strategy (with its evidence)."""
        from kb import store  # lazy: the knowledge base loads sqlalchemy
        from kb.records import KernelDetail  # lazy: the knowledge base loads sqlalchemy

        console = Console()
        with _sessions(db)() as session:
            if item.strip().lower().startswith("s"):
                strategy = store.get_strategy(session, item)
                if strategy is None:
                    console.print(f"[red]no strategy {item}[/]")
                    raise typer.Exit(1)
                data = _strategy_row(strategy) | {"evidence": [_evidence_row(e) for e in strategy.evidence]}
                if as_json:
                    typer.echo(json.dumps(data, indent=2))
                    return
                _print_strategy(console, data)
                return
            kernel = store.get_kernel(session, item)
            if kernel is None:
                console.print(f"[red]no kernel {item}[/]")
                raise typer.Exit(1)
            detail = KernelDetail.of(kernel)
        if as_json:
            typer.echo(json.dumps(detail.to_json(), indent=2))
            return
        _print_kernel(console, detail)

    @kb_app.command("verify")
    def verify_cmd(
        device: Annotated[str, typer.Option("--device", help="Judge the kernels of this device kind (cpu or cuda) on this machine.")] = "cpu",
        world_size: Annotated[int | None, typer.Option("-n", "--world-size", min=1, help="Only kernels of this world size.")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Judge and report; change nothing.")] = False,
        as_json: JsonOpt = False,
        db: DbOpt = None,
    ) -> None:
        """Judge the kept kernels again with the evaluator as it is now; drop those that no longer pass."""
        from kb.verify import verify  # lazy: the knowledge base loads sqlalchemy
        from services.worker.evaluator import EvalSettings, Evaluator  # lazy: the evaluator loads torch

        if device not in ("cpu", "cuda"):
            raise typer.BadParameter("cpu or cuda", param_hint="--device")
        with Evaluator(device, EvalSettings.from_env(device)) as evaluator:
            verdicts = verify(_sessions(db), evaluator, device=device, world_size=world_size, dry_run=dry_run)
        if as_json:
            typer.echo(json.dumps([asdict(v) for v in verdicts], indent=2))
            return
        table = Table(title=f"{len(verdicts)} kernel(s) judged again on {device}" + (" (dry run: nothing changed)" if dry_run else ""))
        for col in ("id", "workload", "ranks", "kept at", "now", "status", "action", "why"):
            table.add_column(col, overflow="fold")
        for v in verdicts:
            table.add_row(v.kernel_id, v.workload, str(v.world_size), f"{v.kept_speedup:.2f}x", _fmt(v.speedup, "{:.2f}x"), v.status, v.action, v.reason)
        Console().print(table)

    @kb_app.command("export")
    def export_cmd(
        kernel_id: Annotated[str, typer.Argument(help="A kernel id (k12, or 12).")],
        out: Annotated[Path, typer.Option("--out", help="Directory to write the module into.")],
        db: DbOpt = None,
    ) -> None:
        """Write a kernel as a standalone module: ModelNew, its workload and a pytest test (no kloom needed)."""
        from kb.export import ExportError, export_kernel  # lazy: the knowledge base loads sqlalchemy

        with _sessions(db)() as session:
            try:
                written = export_kernel(session, kernel_id, out)
            except ExportError as exc:
                Console().print(f"[red]{exc}[/]")
                raise typer.Exit(1) from None
        for path in written:
            typer.echo(str(path))
        typer.echo(f"check it with: cd {out} && pytest -q test_kernel.py")


def _print_kernel(console: Console, k) -> None:
    """A ``kb.records.KernelDetail`` as text."""
    floor = f", {100 * k.fraction_of_floor:.0f}% of roofline" if k.fraction_of_floor else ""
    console.print(f"[bold]kernel {k.id}[/] for {k.workload_name} ({k.family}, world size {k.world_size}, {k.hardware})")
    console.print(f"{k.speedup:.2f}x: {k.candidate_ms:.4g} ms vs reference {k.reference_ms:.4g} ms{floor}")
    console.print(f"strategy {k.strategy} {json.dumps(k.params, sort_keys=True)}; job {k.job_id} step {k.step_index}; model {k.model or '-'}")
    if k.rationale:
        console.print(f"why: {k.rationale}", markup=False, highlight=False)
    for t in k.tuned:
        console.print(f"tuned: {t['kernel']} key {t['key']}: {t['kwargs']}, {t['num_warps']} warps, {t['num_stages']} stages",
                      markup=False, highlight=False)
    console.print(Syntax(k.code, "python", line_numbers=False))


def _print_strategy(console: Console, s: dict) -> None:
    scope = s["applies_to"]
    console.print(f"[bold]strategy {s['id']}[/]: {s['strategy']}")
    console.print(s["description"], markup=False, highlight=False)
    console.print(
        f"applies to {scope['family']} workloads, {scope['dominant'] or 'any'}-bound, on {scope['hardware']}; "
        f"won at input bytes {scope['input_bytes']} and world sizes {scope['world_sizes']}"
    )
    console.print(f"{s['wins']} win(s), {s['losses']} loss(es): confidence {s['confidence']:.2f}; best {_fmt(s['best_speedup'], '{:.2f}x')} with {json.dumps(s['best_params'], sort_keys=True)}")
    table = Table(title="evidence")
    for col in ("job", "workload", "ranks", "result", "speedup", "% of floor", "profile"):
        table.add_column(col, overflow="fold")
    for e in s["evidence"]:
        floor = _fmt(e["fraction_of_floor"] and 100 * e["fraction_of_floor"], "{:.0f}")
        table.add_row(e["job_id"], e["workload"], str(e["world_size"]), "won" if e["won"] else e["status"] if e["speedup"] is None else "lost",
                      _fmt(e["speedup"], "{:.2f}x"), floor, (e["profile"] or "").splitlines()[0][:80] if e["profile"] else "")
    console.print(table)
