"""The baseline table of a suite: every workload's reference timed at its shapes, with its
roofline floor. Resumable: rows already in the output file are not measured again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from kloom.suite import discover
from services.worker.evaluator import EvalSettings, Evaluator


def measure_baselines(
    suite: str | None,
    world_sizes: list[int],
    out: str | Path,
    *,
    device: str,
    eval_settings=None,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Time each workload's reference at each world size; rows go to ``out`` (JSON lines)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[(row["workload"], row["world_size"], row["sha256"])] = row
    found, _ = discover(suite)
    settings = eval_settings or EvalSettings.for_device(device)
    rows = []
    for ws in world_sizes:
        todo = [w for w in found if ws in w.world_sizes and (w.name, ws, w.sha256) not in done]
        rows += [r for (name, w, _), r in done.items() if w == ws]
        if not todo:
            continue
        with Evaluator(device, settings) as evaluator:
            for info in todo:
                result = evaluator.baseline(info.path, world_size=ws)
                roof = result.roofline
                row = {
                    "workload": info.name,
                    "family": info.family,
                    "world_size": ws,
                    "sha256": info.sha256,
                    "status": result.status,
                    "baseline_ms": result.reference_ms,
                    "spread": max((t.spread for t in result.times), default=None),
                    "floor_ms": roof.floor_ms if roof else None,
                    "dominant": roof.dominant if roof else None,
                    "compute_ms": roof.compute_ms if roof else None,
                    "hbm_ms": roof.hbm_ms if roof else None,
                    "link_ms": roof.link_ms if roof else None,
                    "fraction_of_floor": roof.reference_fraction if roof else None,
                    "profile": roof.profile if roof else None,
                    "gpu": result.environment.get("gpu"),
                    "error": result.error.message if result.error else None,
                }
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                rows.append(row)
                if on_row:
                    on_row(row)
    return rows


def baselines_markdown(rows: list[dict]) -> str:
    lines = [
        "| workload | family | world size | baseline ms | floor ms | bound | % of floor | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["family"], r["workload"], r["world_size"])):
        pct = f"{100 * r['fraction_of_floor']:.1f}" if r.get("fraction_of_floor") else "-"
        base = f"{r['baseline_ms']:.4g}" if r.get("baseline_ms") else "-"
        floor = f"{r['floor_ms']:.3g}" if r.get("floor_ms") else "-"
        status = r["status"] if r["status"] == "correct" else f"{r['status']}: {(r.get('error') or '')[:80]}"
        lines.append(f"| {r['workload']} | {r['family']} | {r['world_size']} | {base} | {floor} | {r.get('dominant') or '-'} | {pct} | {status} |")
    return "\n".join(lines) + "\n"
