"""The report of a KernelBench run (``benchmarks/gpu/kernelbench_run.py``): ``partial.jsonl`` ->
``report.md`` and ``report.json``.

Aggregates: how many problems ran, were correct under kloom, and are still to run; fast_1 over
eager (kloom's result beats the reference measurably; and counting every measured speedup above
1.0, as the literature does); fast_1 against the better torch.compile mode (kloom's speedup over
eager above the faster compile mode's, both over eager); geometric means; and who made kloom's
winning kernels (its own kernels, inductor, a CUDA graph, cuDNN tuning). Per problem: every time,
the verdict with its interval, and peak memory (the evaluator's job beside the reference's own).

    python benchmarks/kernelbench_report.py OUT/partial.jsonl [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.kernelbench_run import read_rows  # noqa: E402
from kloom.batch.aggregate import geomean as _geomean  # noqa: E402
from kloom.speedup import FASTER, noise_floor, reported_speedup  # noqa: E402


def geomean(values: list[float | None]) -> float | None:
    """``kloom.batch.aggregate.geomean`` over the finite values."""
    return _geomean([v for v in values if v is not None and math.isfinite(v)])


def _ms(row: dict, mode: str) -> float | None:
    entry = (row.get("modes") or {}).get(mode) or {}
    if entry.get("error") or (mode != "eager" and entry.get("correct") is False):
        return None
    return entry.get("ms")


def compile_speedup(row: dict, mode: str) -> float | None:
    """A correct compile mode's speedup over eager: over the eager time measured beside it in the
    same process where the mode was added later (``kernelbench_run.py --fill``: the entry's
    ``eager_ms``), else over the row's own eager time."""
    ms = _ms(row, mode)
    eager = ((row.get("modes") or {}).get(mode) or {}).get("eager_ms") or _ms(row, "eager")
    return eager / ms if ms and eager else None


def best_compile(row: dict) -> tuple[str | None, float | None]:
    """The faster correct compile mode and its speedup over eager."""
    found = [(speedup, mode) for mode in ("default", "max-autotune") if (speedup := compile_speedup(row, mode))]
    if not found:
        return None, None
    speedup, mode = max(found)
    return mode, speedup


def at_least_compile(row: dict, compile_speedup: float) -> bool:
    """Whether kloom's result is at least as fast as the better compile mode within the noise
    between two measurements of a call (``kloom.speedup.noise_floor`` at the compiled call's
    time): the two come from different instruments (the evaluator's interleaved blocks, the
    harness's own loop), so a difference under that floor says neither is faster."""
    k = row.get("kloom") or {}
    eager = _ms(row, "eager")
    if not eager or not compile_speedup:
        return False
    return (k.get("result_speedup") or 0) * (1 + noise_floor(eager / compile_speedup)) >= compile_speedup


def build(rows: list[dict]) -> dict:
    measured = [r for r in rows if r.get("status") == "measured"]
    kloom = [r["kloom"] for r in measured if r.get("kloom")]
    correct = [k for k in kloom if k.get("correct")]
    wins = [k for k in correct if k.get("outcome") == FASTER]
    any_above = [k for k in correct if (reported_speedup(k.get("measured_speedup"), k.get("strategy")) or 0) > 1.0]
    beats_compile, matches_compile, compared = 0, 0, 0
    for r in measured:
        k = r.get("kloom") or {}
        _, comp = best_compile(r)
        if k.get("correct") and comp is not None:
            compared += 1
            beats_compile += (k.get("result_speedup") or 0) > comp
            matches_compile += at_least_compile(r, comp)
    made_by: dict[str, int] = {}
    for k in wins:
        made_by[k.get("made_by") or "?"] = made_by.get(k.get("made_by") or "?", 0) + 1
    n = len(measured)
    return {
        "problems": len(rows),
        "measured": n,
        "not_run": {s: sum(1 for r in rows if r.get("status") == s) for s in sorted({r.get("status") for r in rows} - {"measured"})},
        "kloom_correct": len(correct),
        "fast_1_over_eager": len(wins) / n if n else None,
        "fast_1_over_eager_any": len(any_above) / n if n else None,
        "fast_1_over_better_compile": beats_compile / compared if compared else None,
        "at_least_better_compile": matches_compile / compared if compared else None,
        "compared_with_compile": compared,
        "geomean_kloom": geomean([k.get("result_speedup") for k in correct]),
        "geomean_compile_default": geomean([compile_speedup(r, "default") for r in measured]),
        "geomean_compile_max_autotune": geomean([compile_speedup(r, "max-autotune") for r in measured]),
        "max_autotune_measured": sum(1 for r in measured if compile_speedup(r, "max-autotune")),
        # Over the problems max-autotune was measured on, the same three: what the column says
        # where it exists, not diluted by the problems it was not run on.
        "with_max_autotune": _against_max_autotune([r for r in measured if compile_speedup(r, "max-autotune")]),
        "geomean_better_compile": geomean([best_compile(r)[1] for r in measured]),
        "wins_made_by": made_by,
    }


def _against_max_autotune(rows: list[dict]) -> dict | None:
    """kloom, compile default and max-autotune, geomean over eager, on the same problems, and how
    often kloom is at least as fast as the better mode there (within the noise floor)."""
    if not rows:
        return None
    return {
        "problems": len(rows),
        "geomean_kloom": geomean([(r.get("kloom") or {}).get("result_speedup") for r in rows]),
        "geomean_compile_default": geomean([compile_speedup(r, "default") for r in rows]),
        "geomean_compile_max_autotune": geomean([compile_speedup(r, "max-autotune") for r in rows]),
        "max_autotune_faster_than_default": sum(1 for r in rows if best_compile(r)[0] == "max-autotune") / len(rows),
        "at_least_better_compile": sum(1 for r in rows if at_least_compile(r, best_compile(r)[1])) / len(rows),
    }


def _max_autotune_line(w: dict | None) -> list[str]:
    if not w:
        return []
    return [f"| on the {w['problems']} problems with max-autotune measured: geomean kloom / compile default / max-autotune; "
            f"max-autotune the faster mode; kloom at least as fast as the better mode (noise floor) | "
            f"{_f(w['geomean_kloom'], '.3f')} / {_f(w['geomean_compile_default'], '.3f')} / {_f(w['geomean_compile_max_autotune'], '.3f')}; "
            f"{w['max_autotune_faster_than_default']:.2f}; {w['at_least_better_compile']:.2f} |"]


def _short(device: str | None) -> str:
    """A GPU's name as a row shows it: "H100", "H200" (the whole name where it has no such word)."""
    words = (device or "?").replace("NVIDIA ", "").split()
    return words[0] if words else "?"


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def level_of(row: dict) -> str:
    """The KernelBench level a row's workload came from (its imported name begins ``levelN_``)."""
    head = row.get("workload", "").split("_", 1)[0]
    return head if head.startswith("level") else "other"


def by_level(rows: list[dict]) -> dict[str, dict]:
    """``build``'s aggregates over each level's rows: the goals are stated per level."""
    levels: dict[str, list[dict]] = {}
    for r in rows:
        levels.setdefault(level_of(r), []).append(r)
    return {level: build(levels[level]) for level in sorted(levels)}


def _level_lines(levels: dict[str, dict]) -> list[str]:
    if not levels:
        return []
    lines = ["", "| level | problems (measured) | fast_1 over eager (measurable; as the literature counts) | geomean over eager: kloom / better compile mode | "
             "at least as fast as the better compile mode | kloom's wins made by |", "|---|---|---|---|---|---|"]
    for level, a in levels.items():
        lines.append(
            f"| {level} | {a['problems']} ({a['measured']}) | {_f(a['fast_1_over_eager'], '.2f')}; {_f(a['fast_1_over_eager_any'], '.2f')} | "
            f"{_f(a['geomean_kloom'], '.3f')} / {_f(a['geomean_better_compile'], '.3f')} | {_f(a['at_least_better_compile'], '.2f')} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(a['wins_made_by'].items())) or '-'} |"
        )
    return lines


def to_markdown(report: dict, rows: list[dict]) -> str:
    a = report["aggregate"]
    lines = [
        "# KernelBench development split (levels 1-2) at the problems' own sizes",
        "",
        f"Device: {report.get('device') or '?'}. Command: `bash benchmarks/gpu/kernelbench.sh` (resumed across calls).",
        *([] if len(report.get("devices") or {}) < 2 else [
            "", "Measured on more than one kind of GPU (each problem's row names its own; a row's columns are from one machine):",
            ", ".join(f"{name}: {n} problems" for name, n in report["devices"].items()) + "."]),
        "",
        "| aggregate | value |",
        "|---|---|",
        f"| problems (measured) | {a['problems']} ({a['measured']}); not measured: {json.dumps(a['not_run'])} |",
        f"| kloom correct | {a['kloom_correct']} of {a['measured']} |",
        f"| fast_1 over eager (measurable wins) | {_f(a['fast_1_over_eager'], '.2f')} |",
        f"| fast_1 over eager (any measured speedup > 1, as the literature counts) | {_f(a['fast_1_over_eager_any'], '.2f')} |",
        f"| fast_1 over the better torch.compile mode | {_f(a['fast_1_over_better_compile'], '.2f')} (of {a['compared_with_compile']}) |",
        f"| at least as fast as the better torch.compile mode, within the noise floor between two measurements | {_f(a['at_least_better_compile'], '.2f')} |",
        f"| geomean speedup over eager: kloom / compile default / max-autotune / better | {_f(a['geomean_kloom'], '.3f')} / {_f(a['geomean_compile_default'], '.3f')} / {_f(a['geomean_compile_max_autotune'], '.3f')} / {_f(a['geomean_better_compile'], '.3f')} |",
        *_max_autotune_line(a.get("with_max_autotune")),
        f"| kloom's wins made by | {', '.join(f'{k}: {v}' for k, v in sorted(a['wins_made_by'].items())) or '-'} |",
        *_level_lines(report.get("by_level") or {}),
        "",
        "Times in ms. kloom's speedup divides the reference's time by the best kernel's, both from the evaluator's",
        "interleaved measurement (95% interval); memory: the device's peak above idle while kloom's job ran, beside",
        "the bound of issue 21 (the largest, over the job's evaluations, of the reference's allocator peak + the candidate's +",
        "one copy of the outputs; the pools' CUDA contexts, ~0.6 GiB a process, come on top), the reference's own (eager, same",
        "instrument) and the torch allocator's peak for the reference. The evaluator's processes: the most device memory",
        "its own processes held together in one NVML sample (contexts and allocator pools included), and how many there were",
        "(rows measured before NVML's per-process memory was read show '-'). A max-autotune time added after its row",
        "(`kernelbench_run.py --fill`) comes with its speedup over the eager time measured beside it, and the machine where",
        "that is not the row's.",
        "",
        "| problem | eager | compile | max-autotune | kloom ref / best | kloom speedup (95% CI) | outcome | made by | job s | mem kloom / bound / ref / ref alloc GiB | evaluator's processes GiB (n) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: r["workload"]):
        name = r["workload"] + (f" ({_short(r.get('device'))})" if len(report.get("devices") or {}) > 1 else "")
        if r.get("status") != "measured":
            lines.append(f"| {name} | {r.get('status')}: {(r.get('reason') or '')[:160]} | | | | | | | | | |")
            continue
        k = r.get("kloom") or {}
        ci = k.get("speedup_ci")
        speed = "-" if k.get("measured_speedup") is None else f"{k['measured_speedup']:.3f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        won = k.get("outcome") == FASTER
        if k.get("correct") and not won:
            # The job kept the reference: its result is 1.0x, whatever its best candidate measured.
            speed = f"1.000x (kept the reference; best candidate {speed})"
        mem_k = ((k.get("device_memory") or {}).get("above_idle_gib"))
        ref_mem = r.get("reference_memory") or {}
        mem_r = (ref_mem.get("device") or {}).get("above_idle_gib")
        pools = k.get("pool_processes")
        pools = f"{pools['gib']:.2f} ({pools['processes']})" if pools else "-"

        def mode(m: str) -> str:
            e = (r.get("modes") or {}).get(m) or {}
            if e.get("error"):
                return "error"
            if e.get("correct") is False:
                return f"wrong ({_f(e.get('ms'), '.4g')})"
            if e.get("eager_ms") and e.get("ms"):
                # Added later beside an eager time of its own: the ratio, and the machine where it differs.
                where = "" if _short(e.get("device")) == _short(r.get("device")) else f", {_short(e.get('device'))}"
                return f"{e['ms']:.4g} ({e['eager_ms'] / e['ms']:.2f}x{where})"
            return _f(e.get("ms"), ".4g")

        lines.append(
            f"| {name} | {mode('eager')} | {mode('default')} | {mode('max-autotune')} | "
            f"{_f(k.get('reference_ms'), '.4g')} / {_f(k.get('best_ms'), '.4g')} | {speed} | {k.get('outcome', '-')} | "
            f"{(k.get('made_by') if won else 'reference' if k.get('correct') else None) or '-'} | {_f(k.get('job_wall_s'), '.0f')} | {_f(mem_k, '.2f')} / {_f(k.get('evaluator_bound_gib'), '.2f')} / {_f(mem_r, '.2f')} / {_f(ref_mem.get('allocator_peak_gib'), '.2f')} | {pools} |"
        )
    failed = [r for r in rows if r.get("status") == "measured" and not (r.get("kloom") or {}).get("correct")]
    if failed:
        lines += ["", "## kloom without a correct kernel", ""]
        lines += [f"- **{r['workload']}**: {(r.get('kloom') or {}).get('stop_reason', '')}" for r in failed]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("partial", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = list(read_rows(args.partial).values())
    out = args.out or args.partial[0].parent
    out.mkdir(parents=True, exist_ok=True)
    devices = dict(collections.Counter(r["device"] for r in rows if r.get("device")).most_common())
    device = next(iter(devices), None) if len(devices) < 2 else "mixed"
    report = {"device": device, "devices": devices, "aggregate": build(rows), "by_level": by_level(rows), "rows": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(to_markdown(report, rows))
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
