"""The batch report: per-workload results and the aggregates (correctness, fast_p, geometric-mean
speedup, fraction of the roofline floor, GPU time, LLM cost), as JSON, Markdown and PNG plots."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.records import Trajectory

from .aggregate import BatchAggregate, aggregate, fast_p
from .archive import load_trajectories
from .rows import ReportRow, profile_records, report_row

REPORT_VERSION = 1


@dataclass
class BatchReport:
    """A batch's report: its settings, the environment of its first job that recorded one, the
    aggregates and one row per workload (in order of family and workload), and the workloads left
    out with the reason. ``report.json`` holds ``to_dict``."""

    settings: dict[str, Any]
    environment: dict[str, Any]
    aggregate: BatchAggregate
    rows: list[ReportRow]
    left_out: list[dict[str, str]]
    version: int = REPORT_VERSION

    @property
    def below_half_of_floor(self) -> list[ReportRow]:
        """The correct workloads whose best kernel reaches less than half of its roofline floor."""
        return [r for r in self.rows if r.correct and r.fraction_of_floor is not None and r.fraction_of_floor < 0.5]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "settings": self.settings,
            "environment": self.environment,
            "aggregate": self.aggregate.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "below_half_of_floor": [
                {"workload": r.workload, "fraction_of_floor": r.fraction_of_floor, "dominant": r.dominant, "bottleneck": r.bottleneck}
                for r in self.below_half_of_floor
            ],
            "left_out": self.left_out,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BatchReport":
        """A stored ``report.json`` (one written before a field existed reads as ``ReportRow`` says)."""
        return cls(
            settings=data.get("settings", {}),
            environment=data.get("environment", {}),
            aggregate=BatchAggregate.from_dict(data["aggregate"]),
            rows=[ReportRow.from_dict(r) for r in data["rows"]],
            left_out=data.get("left_out", []),
            version=data.get("version", REPORT_VERSION),
        )


def build_report(out: str | Path) -> BatchReport:
    """The report of the batch in ``out`` (from its saved trajectories)."""
    out = Path(out)
    settings = json.loads((out / "batch.json").read_text()) if (out / "batch.json").is_file() else {}
    trajectories = load_trajectories(out)
    records = profile_records(out)
    rows = [report_row(t, records) for t in trajectories]
    left_out = json.loads((out / "left_out.json").read_text()) if (out / "left_out.json").is_file() else []
    return assemble(settings, trajectories, rows, left_out)


def assemble(settings: dict[str, Any], trajectories: list[Trajectory], rows: list[ReportRow], left_out: list) -> BatchReport:
    """A report from its workloads' rows (``report_row`` of each trajectory): the rows in order of
    family and workload with their aggregates, and the environment of the first job that recorded
    one. ``build_report``'s, and the API's for a batch it ran."""
    rows = sorted(rows, key=lambda r: (r.family, r.workload))
    return BatchReport(
        settings=settings,
        environment=next((t.baseline.environment for t in trajectories if t.baseline and t.baseline.environment), {}),
        aggregate=aggregate(rows),
        rows=rows,
        left_out=left_out,
    )


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def to_markdown(report: BatchReport) -> str:
    s, a, env = report.settings, report.aggregate, report.environment or {}
    lines = [
        f"# Batch report: {Path(s.get('suite', '?')).name} at world size {s.get('world_size')} on {s.get('device')}"
        + (f" ({env.get('gpu')})" if env.get("gpu") else ""),
        "",
        f"Strategist: {s.get('strategist')}; at most {s.get('max_iters')} candidates per workload.",
        "",
        "| aggregate | value |",
        "|---|---|",
        f"| workloads | {a.workloads} ({a.finished} finished) |",
        f"| correct (best kernel correct on every rank) | {a.correct} ({100 * a.correctness_rate:.0f}%) |",
    ]
    lines += [f"| fast_{p} (measurable wins only) | {a.fast_p[p]:.2f} |" for p in a.fast_p]
    if a.fast_1_any is not None:
        lines += [
            f"| fast_1 counting every measured speedup > 1 (as the literature does) | {a.fast_1_any:.2f} |",
            f"| faster kernel found / no measurable change | {a.faster_kernel_found} / {a.no_measurable_change} |",
        ]
    cost = "unknown (a model without a price)" if a.total_cost_usd is None else "$%.4f" % a.total_cost_usd
    lines += [
        f"| geometric-mean speedup (correct workloads) | {_fmt(a.geomean_speedup, '.3f')}x |",
        f"| median fraction of the roofline floor | {_fmt(a.median_fraction_of_floor and 100 * a.median_fraction_of_floor, '.1f')}% |",
        f"| GPU time | {a.total_gpu_hours:.3f} GPU-hours |",
        f"| LLM cost | {cost} ({a.total_tokens} tokens) |",
        "",
        "",
        "Each speedup divides the reference's time by the best kernel's, both from the same interleaved",
        "measurement, with its 95% interval; one whose interval includes 1.0 is no measurable change.",
        "Where the job timed the reference against its own copy and that read off 1.0x, a win must",
        "also clear that side bias (shown beside the verdict as \"self-timing N% off\").",
        "",
        *workload_table(report.rows),
    ]
    if report.below_half_of_floor:
        lines += ["", "## Under 50% of the roofline floor, and what bounds them", ""]
        for r in report.below_half_of_floor:
            lines.append(f"- **{r.workload}** ({100 * r.fraction_of_floor:.1f}% of a {r.dominant}-bound floor): {r.bottleneck}")
    untraced = [r for r in report.rows if r.trace_error]
    if untraced:
        lines += ["", "## Planned without a trace of the reference", ""]
        lines += [f"- **{r.workload}**: {r.trace_error.splitlines()[0][-300:]}" for r in untraced]
    failed = [r for r in report.rows if not r.correct]
    if failed:
        lines += ["", "## Without a correct kernel", ""]
        lines += [f"- **{r.workload}**: {r.stop_reason}" for r in failed]
    if report.left_out:
        lines += ["", "## Left out of this batch", ""]
        lines += [f"- {x['workload']}: {x['reason']}" for x in report.left_out]
    return "\n".join(lines) + "\n"


#: A side bias below this is within the noise floor and not shown beside the verdict.
SHOWN_BIAS = 0.02


def workload_table(rows: list[ReportRow]) -> list[str]:
    """The per-workload table (Markdown), as `kloom bench report` prints it too."""
    lines = [
        "| workload | family | outcome | reference ms | best ms | speedup (95% CI) | verdict | floor ms | % of floor | strategy | state |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms, ci = r.measured_speedup, r.speedup_ci
        speedup = "-" if ms is None else f"{ms:.3f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        verdict = (r.verdict or "-") + (f" (self-timing {r.self_bias:.0%} off)" if r.verdict and r.self_bias >= SHOWN_BIAS else "")
        lines.append(
            f"| {r.workload} | {r.family} | {r.outcome or '-'} | {_fmt(r.reference_ms, '.4g')} | {_fmt(r.best_ms, '.4g')} | "
            f"{speedup} | {verdict} | {_fmt(r.floor_ms, '.3g')} | "
            f"{_fmt(r.fraction_of_floor and 100 * r.fraction_of_floor, '.1f')} | {r.strategy or '-'} | {r.state} |"
        )
    return lines


def plot(report: BatchReport, out: str | Path) -> list[Path]:
    """fast_p curve (p from 0 to 3) and per-workload speedups, as PNG files."""
    import matplotlib  # optional: matplotlib (a service extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after setup: the Agg backend is chosen first

    out = Path(out)
    rows = report.rows
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
    names = [r.workload for r in rows]
    values = [r.measured_speedup or 0.0 for r in rows]
    colors = ["#16a34a" if r.correct and r.verdict == "faster" else "#dc2626" if not r.correct else "#f59e0b" for r in rows]
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


def write_report(out: str | Path, plots: bool = True) -> BatchReport:
    out = Path(out)
    report = build_report(out)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    (out / "report.md").write_text(to_markdown(report))
    if plots and report.rows:
        try:
            plot(report, out)
        except ImportError:
            pass
    return report


@dataclass
class Change:
    """One workload from report A to report B: its speedups (None: not correct there) and strategies."""

    workload: str
    speedup_a: float | None
    speedup_b: float | None
    change: str  # only in A/B, newly correct, lost correctness, faster, slower, same (2% either way)
    strategy_a: str | None
    strategy_b: str | None


@dataclass
class Comparison:
    """What changed from report A to report B: each aggregate as (A, B), and each workload."""

    aggregate: dict[str, tuple[Any, Any]]
    workloads: list[Change]

    def to_dict(self) -> dict[str, Any]:
        """As ``kloom bench compare --json`` prints it."""
        return {"aggregate": self.aggregate, "workloads": [dataclasses.asdict(w) for w in self.workloads]}


def _compared(g: BatchAggregate) -> dict[str, Any]:
    """The aggregates a comparison shows, by their names in ``report.json``."""
    totals = {
        "correctness_rate": g.correctness_rate,
        "geomean_speedup": g.geomean_speedup,
        "median_fraction_of_floor": g.median_fraction_of_floor,
        "total_gpu_hours": g.total_gpu_hours,
        "total_llm_cost_usd": g.total_cost_usd,
    }
    return totals | {f"fast_{p}": value for p, value in g.fast_p.items()}


def compare(a: BatchReport, b: BatchReport) -> Comparison:
    """What changed from report ``a`` to report ``b``: aggregates and per-workload speedups."""
    in_a, in_b = _compared(a.aggregate), _compared(b.aggregate)
    agg = {key: (value, in_b.get(key)) for key, value in in_a.items()}
    rows_a = {r.workload: r for r in a.rows}
    rows_b = {r.workload: r for r in b.rows}
    workloads = []
    for name in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(name), rows_b.get(name)
        sa = ra.speedup if ra and ra.correct else None
        sb = rb.speedup if rb and rb.correct else None
        change = "only in A" if rb is None else "only in B" if ra is None else (
            "newly correct" if sa is None and sb is not None else "lost correctness" if sa is not None and sb is None else
            "faster" if sa and sb and sb > sa * 1.02 else "slower" if sa and sb and sb < sa / 1.02 else "same"
        )
        workloads.append(Change(name, sa, sb, change, ra.strategy if ra else None, rb.strategy if rb else None))
    return Comparison(agg, workloads)
