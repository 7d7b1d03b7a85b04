"""The benchmark harness of the kernel library: each case times kloom's kernel, eager PyTorch and
what inductor generates for the same torch function (``torch.compile``, default mode), side by
side in one process on one GPU, after checking the kernel's result against eager.

A family's ``bench_<family>.py`` lists its cases (``cases()``); ``bench_all.py`` runs them all and
writes the table and ``wins.json`` (the strategist offers a kind of kernel only where it beat
inductor). GPU-only: it imports torch, triton and the standard library.
"""

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import triton

from kloom.batch.aggregate import geomean


@dataclass
class Case:
    """One pattern at one size: ``make()`` builds the inputs on the GPU; ``reference`` is the
    torch function (run eagerly and compiled), ``kernel`` the same computation by kloom's kernel."""

    kind: str  # the template kind it measures (a key of wins.json)
    name: str
    make: Callable[[], tuple]
    reference: Callable
    kernel: Callable
    exact: bool = False  # integer results (indices) must match exactly
    notes: str = ""
    bytes: int = 0  # the pattern's minimum memory traffic, for the achieved bandwidth
    extra: dict = field(default_factory=dict)


def relative_error(got, want) -> float:
    """Norm-wise relative error ``||got - want|| / ||want||`` (float64)."""
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _check(case: Case, got, want) -> tuple[bool, float]:
    if isinstance(want, tuple):
        results = [_check(case, g, w) for g, w in zip(got, want)]
        return all(r[0] for r in results), max(r[1] for r in results)
    if got.shape != want.shape:
        return False, math.inf
    if case.exact or not want.is_floating_point():
        mismatch = float((got != want).double().mean())
        return mismatch == 0.0, mismatch
    err = relative_error(got, want)
    return err <= (1e-4 if want.dtype == torch.float32 else 2e-2), err


def run_case(case: Case) -> dict:
    """Check and time one case: milliseconds of each implementation and the ratios."""
    started = time.monotonic()
    inputs = case.make()
    want = case.reference(*inputs)
    got = case.kernel(*inputs)
    ok, err = _check(case, got, want)
    row = {"kind": case.kind, "name": case.name, "correct": ok, "error": err, "notes": case.notes}
    compiled = torch.compile(case.reference)
    compiled(*inputs)
    compiled_ok, compiled_err = _check(case, compiled(*inputs), want)
    row["inductor_error"] = compiled_err
    times = {}
    for label, fn in (("eager", case.reference), ("kernel", case.kernel), ("inductor", compiled)):
        times[label] = triton.testing.do_bench(lambda fn=fn: fn(*inputs), warmup=25, rep=100)
    row.update({f"{k}_ms": v for k, v in times.items()})
    row["vs_eager"] = times["eager"] / times["kernel"]
    row["vs_inductor"] = times["inductor"] / times["kernel"]
    if case.bytes:
        row["kernel_gbps"] = case.bytes / times["kernel"] / 1e6
    row["seconds"] = time.monotonic() - started
    del inputs, want, got
    torch.cuda.empty_cache()
    return row


def wins_table(rows: list[dict], device: str, command: str) -> dict:
    """Per kind: the geometric mean of inductor's time over the kernel's, and whether the kernel
    wins (a kind with an incorrect or crashed case does not)."""
    kinds: dict[str, dict] = {}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind and "vs_inductor" in r]
        crashed = any(r["kind"] == kind and not r.get("failure", "skipped").startswith("skipped") for r in rows)
        if not mine:
            continue
        geo = geomean([r["vs_inductor"] for r in mine])
        vs_eager = geomean([r["vs_eager"] for r in mine])
        correct = all(r["correct"] for r in mine) and not crashed
        kinds[kind] = {"vs_inductor": round(geo, 4), "vs_eager": round(vs_eager, 4), "cases": len(mine), "correct": correct, "wins": correct and geo >= 1.0}
    return {"measured_on": device, "command": command, "kinds": kinds}


def markdown(rows: list[dict], device: str, command: str) -> str:
    lines = [
        f"# kloom kernels vs eager vs inductor on {device}",
        "",
        f"Command: `{command}`",
        "",
        "| kind | case | correct (rel. error) | eager ms | inductor ms | kernel ms | vs eager | vs inductor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "kernel_ms" not in r:
            lines.append(f"| {r['kind']} | {r['name']} | failed: {r.get('failure', '')[:120]} | | | | | |")
            continue
        lines.append(
            f"| {r['kind']} | {r['name']} | {'yes' if r['correct'] else 'NO'} ({r['error']:.1e}) | {r['eager_ms']:.3f} | "
            f"{r['inductor_ms']:.3f} | {r['kernel_ms']:.3f} | {r['vs_eager']:.2f}x | {r['vs_inductor']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def run(cases: list[Case], out_dir: str | None, command: str, budget_s: float = 1e9) -> list[dict]:
    """Run ``cases`` (stopping before the budget runs out), writing the JSON, the markdown table
    and ``wins.json`` under ``out_dir`` after every case, so that a cut-off run keeps what it did."""
    device = torch.cuda.get_device_name()
    rows: list[dict] = []
    started = time.monotonic()
    for case in cases:
        if time.monotonic() - started > budget_s:
            rows.append({"kind": case.kind, "name": case.name, "failure": "skipped: out of time"})
            continue
        try:
            row = run_case(case)
        except Exception as exc:  # noqa: BLE001 - one failing case must not lose the others' results
            row = {"kind": case.kind, "name": case.name, "failure": f"{type(exc).__name__}: {exc}"}
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out_dir:
            _write(out_dir, rows, device, command)
    return rows


def _write(out_dir: str, rows: list[dict], device: str, command: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels_bench.json").write_text(json.dumps({"device": device, "command": command, "rows": rows}, indent=1))
    (out / "kernels_bench.md").write_text(markdown(rows, device, command))
    (out / "wins.json").write_text(json.dumps(wins_table(rows, device, command), indent=1) + "\n")


def pattern_args(doc: str, script: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    """A family benchmark's command line (``--out``, ``--patterns``, ``--budget-s``, and what
    ``extra`` adds to the parser) parsed, and the command as the report prints it."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--patterns", nargs="*", default=None, help="only patterns whose name contains one of these words")
    if extra is not None:
        extra(parser)
    parser.add_argument("--budget-s", type=float, default=math.inf, help="start no pattern after this many seconds")
    return parser.parse_args(), " ".join(["python", script] + sys.argv[1:])


def pattern_table(rows: list[dict], title: str, command: str, rivals: list[tuple[str, str]], device: str) -> str:
    """A kernel family's pattern rows as markdown: eager's time, then kloom's speed over it (its
    error in units of the tolerance) and each rival's (``(header, row column)``: ``default_ms``,
    ``cudnn_benchmark_ms``); **wrong** marks a result outside the tolerance."""
    def wrong(error) -> str:
        return " **wrong**" if error > 1 else ""

    lines = [f"# {title}", "", f"`{command}` on {device}. Speedups over eager; the error against eager in units "
             "of the tolerance (at most 1 passes); **wrong**: outside it.", "",
             "| pattern | eager ms | kloom (error/tol) | " + " | ".join(h for h, _ in rivals) + " |", "|---|---|---|" + "---|" * len(rivals)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['pattern']} | error: {r['error']} |" + " |" * (1 + len(rivals)))
            continue
        e = r["eager_ms"]
        cells = [f"{e / r['kloom_ms']:.2f}x ({r['kloom_error']:.2g}){wrong(r['kloom_error'])}"]
        cells += [f"{e / r[col]:.2f}x{wrong(r.get(col.replace('_ms', '_error'), 0))}" if col in r else "" for _, col in rivals]
        lines.append(f"| {r['pattern']} | {e:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_patterns(found, measure: Callable, out: Path, stem: str, table: Callable[[list[dict]], str], budget_s: float,
                 clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Each ``(name, eager, kloom, tolerance)`` pattern measured by ``measure`` (a row), one failing
    pattern reported and the others still run, none started after ``budget_s``; ``<stem>.json``
    and ``<stem>.md`` (``table`` of the rows, e.g. ``pattern_table``) under ``out`` rewritten after
    every pattern, so a run cut short keeps what it measured."""
    started = clock()
    rows: list[dict] = []
    for name, eager, kloom, tol in found:
        try:
            if clock() - started > budget_s:
                raise TimeoutError("not started: over the time budget")
            rows.append(measure(name, eager, kloom, tol))
        except Exception as exc:  # one failing pattern is reported, the others still run
            rows.append({"pattern": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(rows[-1], flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
        (out / f"{stem}.md").write_text(table(rows))
    return rows
