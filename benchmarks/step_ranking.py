"""How often a job's choice of its best step depends on how steps are compared, over committed
trajectories (no GPU needed). A job picks the correct step with the largest speedup, each
speedup the step's own reference time over its candidate's, measured side by side in one
evaluation. Where the reference's own time moves between evaluations more than the candidates'
do (a launch-bound reference, timed from an idle GPU, swings with the host), the largest ratio
favours the step whose reference ran slowest. Three rules side by side, for each job with two
or more correct steps: the largest ratio (kloom's rule until the forty-first session), a pooled
reference alone (the median of every step's reference time over each candidate's own time), and
kloom's rule now (``agents.records.best_of``: measurable wins first, then the lower of the two). The table lists
the jobs where kloom's choice is not the largest ratio's, with both steps' times.

    python3 benchmarks/step_ranking.py results/gpu [--min-spread 0.1] [--out FILE.md]

Reads every ``trajectory.json`` under the paths given, in folders or in ``.tgz`` archives.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.records import Trajectory, best_of, pooled_reference_ms  # noqa: E402


def trajectories(paths: list[Path]):
    """(where, Trajectory) for every trajectory.json found."""
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if f.name == "trajectory.json":
                yield str(f), Trajectory.from_dict(json.loads(f.read_text()))
            elif f.name.endswith(".tgz"):
                with tarfile.open(f) as tar:
                    for member in tar.getmembers():
                        if member.name.endswith("trajectory.json"):
                            data = tar.extractfile(member).read()
                            yield f"{f}:{member.name}", Trajectory.from_dict(json.load(io.BytesIO(data)))


def row(where: str, traj: Trajectory) -> dict | None:
    timed = [s for s in traj.steps if s.reported_speedup is not None and s.timing is not None and s.timing.candidate_ms > 0]
    if len(timed) < 2:
        return None
    refs = [s.timing.reference_ms for s in timed]
    pooled = pooled_reference_ms(timed)
    by_ratio = max(timed, key=lambda s: (s.reported_speedup, -s.index))
    by_pool = max(timed, key=lambda s: (pooled / s.timing.candidate_ms, -s.index))
    kloom = best_of(traj.steps)
    return {
        "job": traj.workload_name or where, "where": where, "steps": len(timed),
        "ref_spread": (max(refs) - min(refs)) / min(refs),
        "chosen": by_ratio.index, "chosen_strategy": by_ratio.plan.strategy, "chosen_speedup": by_ratio.reported_speedup,
        "chosen_ref_ms": by_ratio.timing.reference_ms, "chosen_ms": by_ratio.timing.candidate_ms,
        "pooled": by_pool.index, "kloom": kloom.index, "kloom_strategy": kloom.plan.strategy,
        "kloom_own_speedup": kloom.reported_speedup, "kloom_ref_ms": kloom.timing.reference_ms, "kloom_ms": kloom.timing.candidate_ms,
        # How much faster, by their own times, kloom's choice's candidate is than the largest ratio's.
        "own_time_gain": by_ratio.timing.candidate_ms / kloom.timing.candidate_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--min-spread", type=float, default=0.0, help="list only jobs whose reference moved at least this much")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows, seen = [], set()
    for where, traj in trajectories(args.paths):
        r = row(where, traj)
        key = (traj.job.job_id, traj.workload_sha256, len(traj.steps), traj.updated_at)
        if r is None or key in seen:
            continue
        seen.add(key)
        rows.append(r)
    differ = [r for r in rows if r["chosen"] != r["kloom"]]
    pooled = sum(r["chosen"] != r["pooled"] for r in rows)
    lines = [f"{len(rows)} jobs with two or more correct steps; the pooled reference alone would choose another step than the "
             f"largest ratio in {pooled}, kloom's rule (agents.records.best_of) in {len(differ)}, "
             f"{sum(r['own_time_gain'] < 1 for r in differ)} of them a candidate slower by its own time",
             "", "| job | steps | reference spread | largest ratio (ref / cand ms, speedup) | kloom's choice (ref / cand ms, its own speedup) | own-time gain |",
             "|---|---|---|---|---|---|"]
    for r in sorted(differ, key=lambda r: -r["own_time_gain"]):
        if r["ref_spread"] < args.min_spread:
            continue
        lines.append(f"| {r['job']} | {r['steps']} | {100 * r['ref_spread']:.0f}% | {r['chosen']} {r['chosen_strategy']} "
                     f"({r['chosen_ref_ms']:.4g} / {r['chosen_ms']:.4g}, {r['chosen_speedup']:.2f}x) | {r['kloom']} {r['kloom_strategy']} "
                     f"({r['kloom_ref_ms']:.4g} / {r['kloom_ms']:.4g}, {r['kloom_own_speedup']:.2f}x) | {r['own_time_gain']:.3f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
