"""Profile suite references (and candidates) on a GPU machine; print the summaries, keep the
profiles as JSON, and measure what profiling adds to the evaluation of a candidate.

On an ``nvidia-h200-x4`` machine, for example::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python benchmarks/profile_gpu.py --world-size 4 --ranks 0 all --out results/profiles/h200x4

    # a candidate too (WORKLOAD=FILE, repeatable):
    python benchmarks/profile_gpu.py --world-size 2 --candidate tp_allgather_gemm=cand.py --out ...

    # the best kernel of every workload of a batch under half its floor, where the report looks:
    python benchmarks/profile_gpu.py --best-under-floor results/gpu/h200x4-ws4-r2 --ranks 0 \
        --out results/gpu/h200x4-ws4-r2/profiles

For each workload it times the reference with the evaluator (``Evaluator.baseline``; a
candidate: ``Evaluator.evaluate``), then runs ``profile()`` once per ``--ranks`` setting, and
writes ``<workload>.<reference|candidate>.ranks-<setting>.json`` (the full ``Profile``, the
evaluation's seconds and this command) and ``summary.md`` (the cost table and every summary).
``--device cpu --shapes ci`` runs the same on a CPU machine as a dry run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

# NVLink multicast stays off in everything this starts (shared/HARDWARE.md).
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kloom.batch.archive import best_kernel  # noqa: E402
from kloom.suite import find  # noqa: E402
from services.worker.evaluator import EvalSettings, Evaluator  # noqa: E402
from services.worker.profiler import Profile, ProfileSettings, profile  # noqa: E402

#: Compute-bound (GEMM next to a collective), HBM-bound (norms, cross-entropy) and link-bound
#: (a large all-reduce) references from kloom's suite.
DEFAULT_WORKLOADS = (
    "tp_allgather_gemm",
    "tp_gemm_reducescatter",
    "sp_reducescatter_rmsnorm_allgather",
    "vocab_parallel_cross_entropy",
    "all_reduce_large",
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help="comma-separated suite names or files")
    parser.add_argument("--candidate", action="append", default=[], metavar="WORKLOAD=FILE", help="also profile this candidate")
    parser.add_argument("--ranks", nargs="+", default=["0"], help="ncu rank settings to compare, e.g. 0 all")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--shapes", default=None, help="shape profile (default: gpu on cuda, ci on cpu)")
    parser.add_argument("--timeout", type=float, default=300.0, help="hard limit per profiling launch, seconds")
    parser.add_argument("--out", required=True, help="directory for the JSON profiles and summary.md")
    parser.add_argument(
        "--best-under-floor", metavar="BATCH_DIR", default=None,
        help="profile the best kernel of every correct workload of this batch under --floor-fraction of its floor "
        "(no references; the batch's world size); with --out BATCH_DIR/profiles, `kloom bench report` names what bounds each",
    )
    parser.add_argument("--floor-fraction", type=float, default=0.5)
    parser.add_argument(
        "--shard", default=None, metavar="K/N",
        help="profile only every N-th job from the K-th (0-based): N processes on N GPU groups share a list; "
        "each writes summary.shard-K-of-N.md; the same command without --shard and with --summary-only afterwards "
        "writes the whole summary.md",
    )
    parser.add_argument("--summary-only", action="store_true", help="profile nothing: write summary.md from the profiles already under --out")
    parser.add_argument(
        "--evaluate", action=argparse.BooleanOptionalAction, default=None,
        help="evaluate each kernel before profiling it, for the profile/evaluation cost column (default: yes, "
        "except with --best-under-floor, whose kernels the batch checked and timed already)",
    )
    args = parser.parse_args(argv)
    args.batch_rows = {}  # best kernel file -> its batch report row (--best-under-floor)
    return args


def _evaluate(device: str, shapes: str, path: str, world_size: int, candidate: str | None) -> dict:
    settings = EvalSettings.for_device(device, shapes=shapes)
    with Evaluator(device, settings) as evaluator:
        if candidate is None:
            result = evaluator.baseline(path, world_size=world_size)
            return {"status": result.status, "seconds": result.phase_seconds.get("total", 0.0), "ms": result.reference_ms}
        result = evaluator.evaluate(path, candidate, world_size=world_size)
        ms = result.timing.candidate_ms if result.timing else None
        return {"status": result.status, "seconds": result.phase_seconds.get("total", 0.0), "ms": ms, "summary": result.summary()}


def _row(name: str, who: str, ranks: str, p: Profile, evaluation: dict) -> str:
    compute = p.top(1, communication=False)
    bound = f"{compute[0].bottleneck or '-'} ({compute[0].share:.0%})" if compute else "-"
    comm = f"{p.communication_share:.0%}" if p.communication_share is not None else "-"
    exposed = f"{p.exposed_communication_share:.0%}" if p.exposed_communication_share is not None else "-"
    phases = " + ".join(f"{k} {v:.1f}" for k, v in p.phase_seconds.items())
    ratio = f"{p.seconds / evaluation['seconds']:.2f}x" if evaluation.get("seconds") else "-"
    return f"| {name} | {who} | {ranks} | {p.status}/{p.tool} | {p.seconds:.1f} ({phases}) | {evaluation.get('seconds', 0):.1f} | {ratio} | {bound} | {comm} | {exposed} |"


def _suite_jobs(args: argparse.Namespace) -> list[tuple[str, str, str | None]]:
    """Each named workload's reference, and the candidate given for it."""
    candidates = dict(c.split("=", 1) for c in args.candidate)
    jobs: list[tuple[str, str, str | None]] = []
    for name in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        path = find(name).path
        jobs.append((name, path, None))
        if name in candidates:
            jobs.append((name, path, candidates[name]))
    return jobs


def _batch_jobs(args: argparse.Namespace) -> list[tuple[str, str, str | None]]:
    """The best kernels of a batch's correct workloads under ``--floor-fraction`` of their floor
    (their batch rows kept in ``args.batch_rows``, in place of an evaluation)."""
    batch = Path(args.best_under_floor)
    report = json.loads((batch / "report.json").read_text())
    args.world_size = int(json.loads((batch / "batch.json").read_text()).get("world_size") or args.world_size)
    jobs: list[tuple[str, str, str | None]] = []
    for row in report["rows"]:
        if not (row["correct"] and row["fraction_of_floor"] is not None and row["fraction_of_floor"] < args.floor_fraction):
            continue
        kernel = batch / "jobs" / row["workload"] / "best_kernel.py"
        if not kernel.is_file():  # a committed batch keeps its kernels in its trajectory archive
            code = best_kernel(batch, row["workload"])
            kernel = Path(args.out, "kernels", row["workload"], "best_kernel.py")
            if code is not None:
                kernel.parent.mkdir(parents=True, exist_ok=True)
                kernel.write_text(code)
        if kernel.is_file():
            jobs.append((row["workload"], find(row["workload"]).path, str(kernel)))
            args.batch_rows[str(kernel)] = row
    return jobs


def _terminated(signum, frame) -> None:
    # SIGTERM (a `timeout` around this script, a machine being returned): unwind, so that the
    # profiling launch in progress kills the rank processes it started (they run in a session of
    # their own, where the signal does not reach them) instead of leaving them on the GPUs.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    # Only while it runs: a caller that imports this module (the tests, in pytest's process) keeps
    # its own handler afterwards.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str] | None) -> int:
    args = _args(argv)
    shapes = args.shapes or ("gpu" if args.device == "cuda" else "ci")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/profile_gpu.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    jobs = _batch_jobs(args) if args.best_under_floor else _suite_jobs(args)
    summary = "summary.md"
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        jobs, summary = jobs[k::n], f"summary.shard-{k}-of-{n}.md"
    evaluate = args.evaluate if args.evaluate is not None else not args.best_under_floor
    rows, texts = [], []
    for name, path, candidate in jobs:
        who = "candidate" if candidate else "reference"
        started = time.monotonic()
        records = {ranks: out / f"{name}.{who}.ranks-{ranks.replace(',', '_')}.json" for ranks in args.ranks}
        if all(r.is_file() for r in records.values()):
            # Resumed (the same command after a stop): this one was profiled already.
            for record in (json.loads(r.read_text()) for r in records.values()):
                rows.append(record["row"])
                texts.append(record["text"])
            print(f"[{name} {who}: profiled earlier]", flush=True)
        elif args.summary_only:
            print(f"[{name} {who}: not profiled]", flush=True)
            continue
        else:
            if evaluate:
                evaluation = _evaluate(args.device, shapes, path, args.world_size, candidate)
            else:  # the batch's own evaluation of this kernel (correct on every rank, timed)
                row = args.batch_rows.get(str(candidate)) or {}
                evaluation = {"status": "from the batch" if row else "not evaluated", "seconds": 0.0, "ms": row.get("best_ms")}
            source = Path(candidate).read_text() if candidate else None
            for ranks, record_path in records.items():
                settings = ProfileSettings.for_device(args.device, shapes=shapes, ranks=ranks, timeout_s=args.timeout, candidates="every_correct")
                p = profile(path, source, world_size=args.world_size, device=args.device, settings=settings)
                header = f"## {name} ({who}, world size {args.world_size}, ncu ranks {ranks}): {p.status}/{p.tool}, {p.seconds:.1f} s"
                row, text = _row(name, who, ranks, p, evaluation), f"{header}\n\n```\n{p.summary}\n```\n"
                record = {"command": command, "workload": name, "who": who, "world_size": args.world_size, "ranks": ranks, "evaluation": evaluation, "profile": p.to_dict(), "row": row, "text": text}
                record_path.write_text(json.dumps(record, indent=1))
                rows.append(row)
                texts.append(text)
                print(header)
                print(p.summary, flush=True)
            print(f"[{name} {who}: {time.monotonic() - started:.0f} s in all]\n", flush=True)
        _write_summary(out / summary, args, shapes, command, rows, texts)  # after every workload: a stopped run keeps what it did
    print(f"\nwrote {out / summary}")
    return 0


def _write_summary(path: Path, args: argparse.Namespace, shapes: str, command: str, rows: list[str], texts: list[str]) -> None:
    table = [
        "| workload | who | ncu ranks | status/tool | profile s (phases) | evaluation s | profile/evaluation | top compute kernel: bound (share) | communication | exposed |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    report = [f"# Profiles at world size {args.world_size} ({args.device}, shapes {shapes})", "", "```", command, "```", "", *table, "", *texts]
    path.write_text("\n".join(report))


if __name__ == "__main__":
    sys.exit(main())
