"""KernelBench's development split (levels 1 and 2) at the problems' own sizes, one problem at a
time, each measured four ways: eager PyTorch, ``torch.compile`` (default), ``torch.compile``
(``mode="max-autotune"``), and kloom offline: the problem imported by kloom's own importer and
optimized by the offline strategist with the real evaluator (``--max-candidates`` candidates).

Per problem (one line of ``$OUT/partial.jsonl``): the eager time, each compile mode's time,
compile seconds and correctness against eager; the reference's own peak device memory (the torch
allocator's peak while eager runs it, and the device's peak as NVML/nvidia-smi sees it); kloom's
outcome, the two times its speedup divides with their 95% interval, the winning strategy, its
job wall time and the device's peak while the job (reference timing, tracing, every candidate)
ran, beside the reference's own peak as the same instrument saw it.

Resumable and time-budgeted: problems already in a ``--resume`` file (the ``partial.jsonl`` of an
earlier call, carried back) or in ``$OUT/partial.jsonl`` are skipped (their rows are copied into
``$OUT/partial.jsonl``, so the latest file always holds everything); a problem starts only when
the median time of the problems measured so far (in any call) still fits before ``--budget-s``, and each problem runs in a
child process killed at the budget, so the call ends cleanly before the device call's limit. A
problem killed that way is recorded (``"status": "over_budget"``) and retried once by a later call.

    python benchmarks/gpu/kernelbench_run.py --kernelbench shared/third_party/kernelbench \\
        --out "$OUT" --resume results/kernelbench/partial.jsonl --budget-s 480

``--fill MODE`` (max-autotune, say) adds one compile mode to problems already measured without
it: per problem, eager and that mode measured again side by side in a child of their own (no kloom
job; each child killed after ``--fill-timeout-s``, a compile that outlasts it is recorded as such).
The mode's entry keeps the eager time of its own run and the device it ran on, and the report
divides by that eager time, so the ratio never mixes two runs or two machines. Problems are filled
closest first: those where kloom's speedup over eager is nearest the best compile mode's measured
so far, where the new mode is likeliest to change whether kloom is at least as fast.

Problems are chosen by their files, never by name or id; kloom itself sees only the workload.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODES = ("eager", "default", "max-autotune")
FIRST_ESTIMATE_S = 90.0  # before any problem has run: the time one is expected to take
MARGIN_S = 15.0
RECENT = 10  # problems whose median time decides whether the next one still fits


def read_rows(paths: list[Path]) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short when a call was killed
            if isinstance(row, dict) and row.get("workload"):
                rows[row["workload"]] = row
    return rows


def settled(row: dict | None) -> bool:
    """A problem that need not run again: measured, or reported as not runnable, or already
    retried once after running over a call's budget."""
    return row is not None and (row.get("status") != "over_budget" or row.get("attempts", 1) >= 2)


def interleaved(workloads: list[dict]) -> list[dict]:
    """Level 1 and level 2 alternately, so that a partial run samples both."""
    by_level: dict[str, list[dict]] = {}
    for w in workloads:
        by_level.setdefault(Path(w["path"]).parent.name, []).append(w)
    lists = [by_level[k] for k in sorted(by_level)]
    return [lst[i] for i in range(max((len(x) for x in lists), default=0)) for lst in lists if i < len(lst)]


def in_order(workloads: list[dict], prefixes: list[str]) -> list[dict]:
    """Those whose ``level/file`` starts with one of ``prefixes`` first, in that order (a
    re-measurement names what matters most first), then the rest as they came."""
    def rank(w: dict) -> int:
        path = Path(w["path"])
        name = f"{path.parent.name}/{path.name}"
        return next((i for i, p in enumerate(prefixes) if name.startswith(p)), len(prefixes))

    return sorted(workloads, key=rank)  # stable: ties keep the interleaved order


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, required=True, help="a KernelBench checkout (its root or its KernelBench/ folder)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "kernelbench-out")))
    ap.add_argument("--resume", type=Path, action="append", default=[], help="partial.jsonl of an earlier call (repeatable)")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting problems so that the call ends by then")
    ap.add_argument("--max-candidates", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help="baselines to measure: eager,default,max-autotune")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--timing-budget-s", type=float, default=None, help="seconds of timed calls per measurement")
    ap.add_argument("--limit", type=int, default=None, help="at most this many problems in this call")
    ap.add_argument("--first", default="", help="comma-separated level/file-name prefixes (level1/81_) to run first, in that order")
    ap.add_argument("--fill", default=None, help="add this compile mode to measured problems that lack it (no kloom job)")
    ap.add_argument("--fill-timeout-s", type=float, default=150.0, help="with --fill: a problem's child is killed after this")
    ap.add_argument("--fill-elsewhere", action="store_true",
                    help="with --fill: also measure again the entries of that mode taken on another machine than their row's")
    args = ap.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)

    from kloom.importers.kernelbench import find_levels, import_kernelbench

    partial = args.out / "partial.jsonl"
    rows = read_rows([*args.resume, partial])
    suite = args.out / "suite"
    imported, rejected = [], []
    present = find_levels(args.kernelbench)  # a subset (kernelbench_subset.sh) may hold one level
    for level in (int(x) for x in args.levels.split(",") if x.strip()):
        if level not in present:
            continue
        report = import_kernelbench(args.kernelbench, level=level, out_dir=suite / f"level{level}")
        imported += [{"name": w.name, "path": w.path, "notes": w.notes} for w in report.imported]
        rejected += [{"origin": r.origin, "reason": r.reason, "level": level} for r in report.rejected]
    for r in rejected:
        name = f"level{r['level']}_{Path(r['origin']).name[:-3]}"
        rows.setdefault(name, {"workload": name, "status": "not_imported", "reason": r["reason"]})
    partial.write_text("".join(json.dumps(row) + "\n" for row in rows.values()))

    if args.fill:
        return fill(args, interleaved(imported), rows, partial, started)
    first = [p for p in args.first.split(",") if p]
    todo = [w for w in in_order(interleaved(imported), first) if not settled(rows.get(w["name"]))]
    if args.limit is not None:
        todo = todo[: args.limit]
    print(f"{len(imported)} imported, {len(rejected)} not imported, {len(todo)} to run in this call", flush=True)
    # What a problem takes, from the most recent ones measured (this call's and the calls' before
    # it, in the order they ran): a call starts the next problem while the typical time still
    # fits. Waiting for the slowest left a third of some calls unused, and the median of every
    # problem ever measured kept the times of an older, slower judge; a problem that then runs
    # past the budget is retried first in the next call.
    took_s = [float(r["took_s"]) for r in rows.values() if r.get("status") == "measured" and r.get("took_s")]
    for w in todo:
        left = args.budget_s - (time.monotonic() - started)
        typical = statistics.median(took_s[-RECENT:]) if took_s else FIRST_ESTIMATE_S
        if left < typical + MARGIN_S:
            print(f"stopping: {left:.0f} s left, a problem takes {typical:.0f} s (median of the last {len(took_s[-RECENT:])})", flush=True)
            break
        t0 = time.monotonic()
        row = run_child(w, args, timeout_s=left - MARGIN_S)
        row["attempts"] = rows.get(w["name"], {}).get("attempts", 0) + 1
        took = time.monotonic() - t0
        row["took_s"] = round(took, 1)
        if row["status"] == "measured":
            took_s.append(took)
        rows[w["name"]] = row
        with partial.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{w['name']}: {row['status']} in {took:.0f} s ({summary(row)})", flush=True)
    done = sum(1 for w in imported if settled(rows.get(w["name"])))
    print(f"{done}/{len(imported)} problems settled after {time.monotonic() - started:.0f} s", flush=True)
    return 0


UNFINISHED = "not finished within the call's budget"


def lacks(row: dict | None, mode: str, elsewhere: bool = False) -> bool:
    """A measured problem without ``mode``, or whose ``mode`` a call's budget cut short; with
    ``elsewhere``, also one whose ``mode`` was measured on another machine than the row."""
    if row is None or row.get("status") != "measured":
        return False
    entry = (row.get("modes") or {}).get(mode)
    if entry is None or entry.get("error") == UNFINISHED:
        return True
    return elsewhere and entry.get("device") not in (None, row.get("device"))


def kloom_margin(row: dict) -> float:
    """kloom's speedup over eager divided by the better compile mode's (``kernelbench_report``'s
    ``best_compile``, at least eager's 1.0; inf where either is missing): how far kloom is ahead
    of compiling."""
    from benchmarks.kernelbench_report import best_compile  # lazy: the report imports this module

    _, best = best_compile(row)
    kloom = (row.get("kloom") or {}).get("result_speedup")
    return kloom / max(best, 1.0) if kloom and best else float("inf")


def fill(args, workloads: list[dict], rows: dict[str, dict], partial: Path, started: float) -> int:
    """``--fill``: ``args.fill`` measured beside eager for the measured problems that lack it."""
    mode = args.fill
    todo = sorted((w for w in workloads if lacks(rows.get(w["name"]), mode, args.fill_elsewhere)),
                  key=lambda w: kloom_margin(rows[w["name"]]))
    if args.limit is not None:
        todo = todo[: args.limit]
    print(f"{len(todo)} measured problems lack {mode}", flush=True)
    done = 0
    for w in todo:
        left = args.budget_s - (time.monotonic() - started)
        if left < min(args.fill_timeout_s, 60.0) + MARGIN_S:
            print(f"stopping: {left:.0f} s left", flush=True)
            break
        limit = min(args.fill_timeout_s, left - MARGIN_S)
        t0 = time.monotonic()
        child = run_child(w, args, timeout_s=limit, modes=f"eager,{mode}", kloom=False)
        took = time.monotonic() - t0
        entry = dict((child.get("modes") or {}).get(mode) or {})
        eager = (child.get("modes") or {}).get("eager") or {}
        if not entry or entry.get("error") == UNFINISHED or child.get("status") == "over_budget":
            if limit < args.fill_timeout_s:
                print(f"{w['name']}: cut by the call's budget after {took:.0f} s; left for the next call", flush=True)
                break
            entry = {"error": f"eager and {mode} together did not finish within {args.fill_timeout_s:.0f} s (compile included)"}
        entry.update(eager_ms=eager.get("ms"), device=child.get("device"), took_s=round(took, 1))
        row = rows[w["name"]]
        if args.fill_elsewhere and child.get("device") and child.get("device") != row.get("device"):
            # Measuring again where the old entry came from, or on a third machine, mends nothing.
            print(f"stopping: this machine ({child.get('device')}) is not {w['name']}'s ({row.get('device')})", flush=True)
            break
        row.setdefault("modes", {})[mode] = entry
        with partial.open("a") as f:
            f.write(json.dumps(row) + "\n")
        done += 1
        print(f"{w['name']}: {mode} {entry.get('ms', entry.get('error'))} beside eager {eager.get('ms')} in {took:.0f} s", flush=True)
    print(f"{done} filled after {time.monotonic() - started:.0f} s; {len(todo) - done} left", flush=True)
    return 0


def summary(row: dict) -> str:
    k = row.get("kloom") or {}
    parts = [f"{m} {row['modes'][m]['ms']:.4g} ms" for m in row.get("modes", {}) if row["modes"][m].get("ms")]
    if k:
        parts.append(f"kloom {k.get('outcome')} {k.get('result_speedup')}")
    return ", ".join(parts) or row.get("reason", "")[:200]


def run_child(workload: dict, args, timeout_s: float, modes: str | None = None, kloom: bool = True) -> dict:
    """One problem in a child process (a crash, a hang or an out-of-memory there costs that
    problem only); killed at ``timeout_s``. ``modes``: the baselines (default ``args.modes``);
    ``kloom``: whether kloom's job runs too."""
    result = args.out / "child.json"
    result.unlink(missing_ok=True)
    modes = modes or args.modes
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "gpu" / "kernelbench_problem.py"),
        "--workload", workload["path"], "--name", workload["name"], "--result", str(result),
        "--device", args.device, "--modes", modes, "--max-candidates", str(args.max_candidates),
        "--jobs", str(args.out / "jobs"),
    ]
    if not kloom:
        cmd.append("--no-kloom")
    if args.timing_budget_s is not None:
        cmd += ["--timing-budget-s", str(args.timing_budget_s)]
    log = args.out / "problems.log"
    with log.open("a") as out:
        out.write(f"\n==== {workload['name']}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = None
    if result.is_file():
        row = json.loads(result.read_text())
        if code is None and row.get("status") == "measured":
            # Killed in the last phase (max-autotune): what was measured stands.
            for entry in row.get("modes", {}).values():
                if "ms" not in entry and "error" not in entry:
                    entry["error"] = UNFINISHED
            for mode in modes.split(","):
                row.setdefault("modes", {}).setdefault(mode, {"error": UNFINISHED})
        elif code is None:
            row["status"] = "over_budget"
        return row
    if code is None:
        return {"workload": workload["name"], "status": "over_budget", "reason": f"still running after {timeout_s:.0f} s, the rest of this call's budget"}
    return {"workload": workload["name"], "status": "crashed", "reason": f"the measuring process exited with {code}; see problems.log"}


if __name__ == "__main__":
    sys.exit(main())
