"""The batch report: per-workload results and the aggregates (correctness, fast_p, geometric-mean
speedup, fraction of the roofline floor, GPU time, LLM cost), as JSON, Markdown and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.records import Trajectory
from kloom.profile import Profile
from kloom.speedup import NO_CHANGE, measured
from kloom.profile_summary import summarise

from .aggregate import aggregate, fast_p
from .archive import load_trajectories

REPORT_VERSION = 1


#: Where a batch directory keeps profiles taken after the batch (``benchmarks/profile_gpu.py
#: --best-under-floor DIR`` writes there), matched to a job's best step by candidate hash.
PROFILES_DIR = "profiles"
#: (workload, world size, candidate sha256) -> (file name, profile): what ``profile_records`` finds.
ProfileRecords = dict[tuple[str, int, str], tuple[str, Profile]]


def profile_records(out: str | Path) -> ProfileRecords:
    """Profiles of candidates kept under ``out/profiles``: (workload, world size, candidate sha256)
    -> (file name, profile). A profile of every rank is preferred to one of rank 0; a file that
    holds no readable profile is skipped."""
    found: ProfileRecords = {}
    for path in sorted(Path(out, PROFILES_DIR).glob("*.json"), key=lambda p: "ranks-all" in p.name):
        try:
            stored = json.loads(path.read_text()).get("profile")
            profile = Profile.from_dict(stored) if stored else None
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        if profile is not None and profile.candidate_sha256 and profile.summary:
            name = Path(profile.workload).stem  # profiles name the workload by its file
            found[(name, profile.world_size, profile.candidate_sha256)] = (path.name, profile)
    return found


def _summary_line(profile: Profile) -> str:
    """A profile's summary on one line, written again by today's summariser (older profiles gain
    the verdict line) where it can read the record, else as stored."""
    try:
        summary = summarise(profile)
    except (TypeError, ValueError, KeyError, AttributeError):
        summary = profile.summary
    return ". ".join(summary.splitlines())


def _bottleneck(traj: Trajectory, records: ProfileRecords | None = None) -> str:
    """What the best (or last) step's profile says bounds the kernel, in a line; else a profile
    of the best kernel taken after the batch (``records``: ``profile_records``)."""
    best = traj.best_step
    for step in ([best] if best else []) + list(reversed(traj.steps)):
        if step.profile is not None and step.profile.summary:
            return _summary_line(step.profile)
    if best and records:
        hit = records.get((traj.workload_name, traj.job.world_size, best.candidate_sha256))
        if hit:
            return f"profile of the best kernel ({PROFILES_DIR}/{hit[0]}): {_summary_line(hit[1])}"
    if traj.analysis is not None and traj.analysis.dominant:
        return f"no profile; the roofline says {traj.analysis.dominant}-bound"
    return "no profile recorded"


def report_row(traj: Trajectory, records: ProfileRecords | None = None) -> dict[str, Any]:
    """One workload's line of a batch report (shared by `kloom bench` and the API)."""
    best = traj.best_step
    m = measured(best.timing) if best else None
    baseline = traj.baseline
    roofline = baseline.roofline if baseline else None
    ws = traj.job.world_size
    seconds = baseline.phase_seconds.get("total", 0.0) if baseline else 0.0
    seconds += sum(s.seconds.get("verify", 0.0) for s in traj.steps)
    return {
        "workload": traj.workload_name,
        "family": traj.workload_family,
        "state": traj.state,
        "stop_reason": traj.stop_reason,
        "steps": len(traj.steps),
        "correct": best is not None,
        "outcome": traj.outcome,
        # The reference timed alone, before any candidate (not the time the speedup divides).
        "baseline_ms": baseline.reference_ms if baseline else None,
        # The two times the speedup divides, from the same (interleaved) measurement.
        "reference_ms": m.reference_ms if m else None,
        "best_ms": m.candidate_ms if m else None,
        # The job's result: the best kernel's speedup when it is a measurable win, else 1.0
        # (the reference stands); the best kernel's own measurement beside it.
        "speedup": traj.result_speedup,
        "measured_speedup": m.speedup if m else None,
        "speedup_ci": [m.low, m.high] if m and m.low is not None else None,
        "ci_from": m.interval_from if m else None,
        "verdict": m.verdict if m else None,
        "floor_ms": roofline.floor_ms if roofline else None,
        "dominant": roofline.dominant if roofline else None,
        "fraction_of_floor": best.fraction_of_floor if best else None,
        "baseline_fraction_of_floor": roofline.reference_fraction if roofline else None,
        "strategy": best.plan.strategy if best else None,
        "cost_usd": traj.usage.cost_usd,
        "tokens": traj.usage.tokens,
        "gpu_seconds": seconds * ws if traj.job.device == "cuda" else 0.0,
        "wall_seconds": seconds,
        "flags": sorted({f for s in traj.steps if s.correct and s.evaluation for f in s.evaluation.flags}),
        "bottleneck": _bottleneck(traj, records),
        # Why the reference could not be traced: its job was planned without the structure.
        "trace_error": traj.analysis.trace_error if traj.analysis else "",
    }


def build_report(out: str | Path) -> dict[str, Any]:
    """The report of the batch in ``out`` (from its saved trajectories)."""
    out = Path(out)
    settings = json.loads((out / "batch.json").read_text()) if (out / "batch.json").is_file() else {}
    trajectories = load_trajectories(out)
    records = profile_records(out)
    rows = [report_row(t, records) for t in trajectories]
    left_out = json.loads((out / "left_out.json").read_text()) if (out / "left_out.json").is_file() else []
    return assemble(settings, trajectories, rows, left_out)


def assemble(settings: dict[str, Any], trajectories: list[Trajectory], rows: list[dict[str, Any]], left_out: list) -> dict[str, Any]:
    """A report from its workloads' rows (``report_row`` of each trajectory): the rows in order of
    family and workload, their aggregates, those below half of their floor, and the environment of
    the first job that recorded one. ``build_report``'s, and the API's for a batch it ran."""
    rows = sorted(rows, key=lambda r: (r["family"], r["workload"]))
    agg = aggregate(rows)
    aggregates = {
        "workloads": agg.workloads,
        "finished": agg.finished,
        "correct": agg.correct,
        "correctness_rate": agg.correctness_rate,
        "fast_p": agg.fast_p,
        # fast_1 as the literature counts it (any measured speedup above 1.0, noise included).
        "fast_1_any": fast_p(rows, 1.0, measurable_only=False),
        "faster_kernel_found": sum(1 for r in rows if r["outcome"] == "faster kernel found"),
        "no_measurable_change": sum(1 for r in rows if r["verdict"] == NO_CHANGE),
        "geomean_speedup": agg.geomean_speedup,
        "median_fraction_of_floor": agg.median_fraction_of_floor,
        "total_gpu_hours": sum(r["gpu_seconds"] for r in rows) / 3600,
        "total_llm_cost_usd": agg.total_cost_usd,
        "total_tokens": sum(r["tokens"] for r in rows),
    }
    below_half = [
        {"workload": r["workload"], "fraction_of_floor": r["fraction_of_floor"], "dominant": r["dominant"], "bottleneck": r["bottleneck"]}
        for r in rows
        if r["correct"] and r["fraction_of_floor"] is not None and r["fraction_of_floor"] < 0.5
    ]
    return {
        "version": REPORT_VERSION,
        "settings": settings,
        "environment": next((t.baseline.environment for t in trajectories if t.baseline and t.baseline.environment), {}),
        "aggregate": aggregates,
        "rows": rows,
        "below_half_of_floor": below_half,
        "left_out": left_out,
    }


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def to_markdown(report: dict[str, Any]) -> str:
    s, a = report["settings"], report["aggregate"]
    env = report.get("environment") or {}
    lines = [
        f"# Batch report: {Path(s.get('suite', '?')).name} at world size {s.get('world_size')} on {s.get('device')}"
        + (f" ({env.get('gpu')})" if env.get("gpu") else ""),
        "",
        f"Strategist: {s.get('strategist')}; at most {s.get('max_iters')} candidates per workload.",
        "",
        "| aggregate | value |",
        "|---|---|",
        f"| workloads | {a['workloads']} ({a['finished']} finished) |",
        f"| correct (best kernel correct on every rank) | {a['correct']} ({100 * a['correctness_rate']:.0f}%) |",
    ]
    lines += [f"| fast_{p} (measurable wins only) | {a['fast_p'][p]:.2f} |" for p in a["fast_p"]]
    if "fast_1_any" in a:
        lines += [
            f"| fast_1 counting every measured speedup > 1 (as the literature does) | {a['fast_1_any']:.2f} |",
            f"| faster kernel found / no measurable change | {a['faster_kernel_found']} / {a['no_measurable_change']} |",
        ]
    lines += [
        f"| geometric-mean speedup (correct workloads) | {_fmt(a['geomean_speedup'], '.3f')}x |",
        f"| median fraction of the roofline floor | {_fmt(a['median_fraction_of_floor'] and 100 * a['median_fraction_of_floor'], '.1f')}% |",
        f"| GPU time | {a['total_gpu_hours']:.3f} GPU-hours |",
        f"| LLM cost | {'unknown (a model without a price)' if a['total_llm_cost_usd'] is None else '$%.4f' % a['total_llm_cost_usd']} ({a['total_tokens']} tokens) |",
        "",
        "",
        "Each speedup divides the reference's time by the best kernel's, both from the same interleaved",
        "measurement, with its 95% interval; one whose interval includes 1.0 is no measurable change.",
        "",
        *workload_table(report["rows"]),
    ]
    if report["below_half_of_floor"]:
        lines += ["", "## Under 50% of the roofline floor, and what bounds them", ""]
        for b in report["below_half_of_floor"]:
            lines.append(f"- **{b['workload']}** ({100 * b['fraction_of_floor']:.1f}% of a {b['dominant']}-bound floor): {b['bottleneck']}")
    untraced = [r for r in report["rows"] if r.get("trace_error")]
    if untraced:
        lines += ["", "## Planned without a trace of the reference", ""]
        lines += [f"- **{r['workload']}**: {r['trace_error'].splitlines()[0][-300:]}" for r in untraced]
    failed = [r for r in report["rows"] if not r["correct"]]
    if failed:
        lines += ["", "## Without a correct kernel", ""]
        lines += [f"- **{r['workload']}**: {r['stop_reason']}" for r in failed]
    if report["left_out"]:
        lines += ["", "## Left out of this batch", ""]
        lines += [f"- {x['workload']}: {x['reason']}" for x in report["left_out"]]
    return "\n".join(lines) + "\n"


def workload_table(rows: list[dict[str, Any]]) -> list[str]:
    """The per-workload table (Markdown), as `kloom bench report` prints it too."""
    lines = [
        "| workload | family | outcome | reference ms | best ms | speedup (95% CI) | verdict | floor ms | % of floor | strategy | state |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms = r.get("measured_speedup", r["speedup"])
        ci = r.get("speedup_ci")
        speedup = "-" if ms is None else f"{ms:.3f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        lines.append(
            f"| {r['workload']} | {r['family']} | {r.get('outcome', '-')} | {_fmt(r.get('reference_ms'), '.4g')} | {_fmt(r['best_ms'], '.4g')} | "
            f"{speedup} | {r.get('verdict') or '-'} | {_fmt(r['floor_ms'], '.3g')} | "
            f"{_fmt(r['fraction_of_floor'] and 100 * r['fraction_of_floor'], '.1f')} | {r['strategy'] or '-'} | {r['state']} |"
        )
    return lines


def plot(report: dict[str, Any], out: str | Path) -> list[Path]:
    """fast_p curve (p from 0 to 3) and per-workload speedups, as PNG files."""
    import matplotlib  # optional: matplotlib (a service extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after setup: the Agg backend is chosen first

    out = Path(out)
    rows = report["rows"]
    paths = []
    ps = [i / 100 for i in range(0, 301)]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ps, [fast_p(rows, p) for p in ps], color="#2563eb")
    ax.axvline(1.0, color="#9ca3af", linestyle="--", linewidth=1)
    ax.set_xlabel("p (speedup threshold over the reference)")
    ax.set_ylabel("fast_p (share of all workloads)")
    ax.set_ylim(0, 1.02)
    ax.set_title("fast_p")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / "fast_p.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, max(3, 0.28 * len(rows) + 1)))
    names = [r["workload"] for r in rows]
    values = [r.get("measured_speedup", r["speedup"]) or 0.0 for r in rows]
    colors = ["#16a34a" if r["correct"] and r.get("verdict", "faster") == "faster" else "#dc2626" if not r["correct"] else "#f59e0b" for r in rows]
    ax.barh(names, values, color=colors)
    ax.axvline(1.0, color="#111827", linewidth=1)
    ax.set_xlabel("best speedup over the PyTorch + NCCL reference")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    paths.append(out / "speedups.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def write_report(out: str | Path, plots: bool = True) -> dict[str, Any]:
    out = Path(out)
    report = build_report(out)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(to_markdown(report))
    if plots and report["rows"]:
        try:
            plot(report, out)
        except ImportError:
            pass
    return report


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from report ``a`` to report ``b``: aggregates and per-workload speedups."""
    agg = {}
    for key in ("correctness_rate", "geomean_speedup", "median_fraction_of_floor", "total_gpu_hours", "total_llm_cost_usd"):
        agg[key] = (a["aggregate"].get(key), b["aggregate"].get(key))
    for p in a["aggregate"]["fast_p"]:
        agg[f"fast_{p}"] = (a["aggregate"]["fast_p"][p], b["aggregate"]["fast_p"].get(p))
    rows_a = {r["workload"]: r for r in a["rows"]}
    rows_b = {r["workload"]: r for r in b["rows"]}
    workloads = []
    for name in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(name), rows_b.get(name)
        sa = ra["speedup"] if ra and ra["correct"] else None
        sb = rb["speedup"] if rb and rb["correct"] else None
        change = "only in A" if rb is None else "only in B" if ra is None else (
            "newly correct" if sa is None and sb is not None else "lost correctness" if sa is not None and sb is None else
            "faster" if sa and sb and sb > sa * 1.02 else "slower" if sa and sb and sb < sa / 1.02 else "same"
        )
        workloads.append({"workload": name, "speedup_a": sa, "speedup_b": sb, "change": change,
                          "strategy_a": ra and ra["strategy"], "strategy_b": rb and rb["strategy"]})
    return {"aggregate": agg, "workloads": workloads}
