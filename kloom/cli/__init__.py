"""The ``kloom`` command line. Each sub-command lives in its own module and imports its heavy
dependencies (torch, the evaluator, the agents' loop, the database, the service) when it runs,
so that ``kloom --help`` loads none of them and the GPU-side commands work with torch, typer and
rich alone."""

from __future__ import annotations

import typer

from . import bench_cmd, calibrate_cmd, evaluate, kb_cmd, optimize_cmd, service_cmd, suite_cmd

app = typer.Typer(
    name="kloom",
    help="kloom makes multi-GPU AI kernels fast: it evaluates, optimizes and remembers candidate kernels for multi-rank workloads.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

evaluate.register(app)
optimize_cmd.register(app)
bench_cmd.register(app)
calibrate_cmd.register(app)
service_cmd.register(app)
suite_cmd.register(app)
kb_cmd.register(app)


def main() -> None:
    app()
