"""``kloom calibrate``: measure this machine's ceilings and save them as a hardware profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kloom.roofline.profiles import save_profile

from .evaluate import Device


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate_cmd(
        device: Annotated[Device, typer.Option("--device", help="cpu (gloo ranks) or cuda (NCCL, one GPU per rank).")] = Device.cpu,
        world_size: Annotated[int | None, typer.Option("--world-size", "-n", min=1, help="Ranks for the collective benchmark (default: every GPU, or 2 on the CPU).")] = None,
        out: Annotated[Path | None, typer.Option("--out", help="Write the profile here instead of the profile directory.")] = None,
        name: Annotated[str | None, typer.Option("--name", help="Profile name (default: the detected GPU, e.g. h200, or cpu).")] = None,
        quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repetitions: seconds, not a minute.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the profile as JSON.")] = False,
    ) -> None:
        """Measure matmul rates, memory, peer-copy and collective bandwidth, and save the profile.

        The evaluator's roofline uses a saved profile of the detected name in place of the built-in
        one (docs/roofline.md).
        """
        from kloom.roofline.calibrate import CalibrationError, calibrate  # lazy: loads torch

        try:
            profile = calibrate(device.value, world_size, quick=quick, name=name)
        except CalibrationError as exc:
            typer.echo(f"calibration failed: {exc}", err=True)
            raise typer.Exit(1)
        path = save_profile(profile, out)
        if as_json:
            typer.echo(json.dumps(profile.to_dict(), indent=2))
        else:
            print_profile(profile, path)


def print_profile(profile, path: Path | None = None) -> None:
    """The profile as a table of ceilings."""
    console = Console()
    table = Table(title=f"hardware profile {profile.name!r}: {profile.description}")
    table.add_column("ceiling")
    table.add_column("value", justify="right")
    for dtype, rate in sorted(profile.matmul_tflops.items()):
        table.add_row(f"matmul {dtype}", f"{rate:.4g} TFLOP/s")
    table.add_row("memory copy (read + write)", f"{profile.hbm_gbps:.4g} GB/s")
    if profile.peer_copy_gbps:
        table.add_row("peer copy GPU0->GPU1, one way", f"{profile.peer_copy_gbps:.4g} GB/s")
    for op, busbw in profile.collective_busbw_gbps.items():
        table.add_row(f"{op} busbw ({profile.world_size} ranks)", f"{busbw:.4g} GB/s")
    for op, latency in profile.collective_latency_us.items():
        table.add_row(f"{op} latency, one element", f"{latency:.4g} us")
    table.add_row("[bold]link (used by the floor)[/]", f"[bold]{profile.link_gbps:.4g} GB/s[/]")
    console.print(table)
    console.print(f"link ceiling from: {profile.link_basis}")
    if path is not None:
        console.print(f"saved to {path}")
