"""How far the evaluator's speedup of a candidate that *is* the reference strays from 1.0x, for
variants of the evaluator's settings side by side in one run: rounds alternate the variants (in
turned order every other round), so a slow spell of the machine falls on all of them. Every
evaluation starts fresh candidate processes, as a job's candidates do, so the spread includes
what differs from one process to the next (where the scheduler puts it, for one).

    python benchmarks/timing_noise.py --workload vocab_parallel_cross_entropy --world-size 2 \\
        --rounds 12 --variants default,timing_budget_s=2 --out benchmarks/results/timing_noise_cpu.md

A variant is ``default`` (``EvalSettings.from_env``) or overrides of its fields, ``+``-joined
(``timing_budget_s=2+min_iters=40``). ``--device cuda`` does the same on GPUs (``gpu`` shapes); a
KernelBench-format file works as ``--workload``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kloom.speedup import NO_CHANGE, noise_floor, verdict  # noqa: E402
from kloom.suite import find  # noqa: E402
from services.worker.evaluator import EvalSettings, Evaluator  # noqa: E402
from services.worker.evaluator.settings import parse_field  # noqa: E402



def overrides(variant: str) -> dict:
    """A variant's fields and values, parsed by each field's annotation."""
    if variant == "default":
        return {}
    fields = {f.name: f for f in dataclasses.fields(EvalSettings)}
    found = {}
    for part in variant.split("+"):
        name, _, raw = part.partition("=")
        if name not in fields or not raw:
            raise ValueError(f"{part!r} is not FIELD=VALUE of EvalSettings")
        found[name] = parse_field(str(fields[name].type), raw)
    return found
#: Other statistics of the same samples, for comparison with the median the evaluator uses.
LOW_STATS = ("p10_ms", "min_ms")


def reference_copy(workload: Path) -> str:
    """A candidate that is the reference itself: its true speedup is exactly 1."""
    return workload.read_text().rstrip() + "\n\n\nclass ModelNew(Model):\n    pass\n"


def summary(speedups: list[float]) -> dict[str, float]:
    logs = [math.log(s) for s in speedups]
    ordered = sorted(speedups)
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "max": ordered[-1],
        # The typical error of one evaluation: the root-mean-square of log(speedup), as a factor.
        "rms_error": math.exp(math.sqrt(sum(v * v for v in logs) / len(logs))) - 1,
        "within_5pct": sum(abs(s - 1) <= 0.05 for s in speedups) / len(speedups),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="vocab_parallel_cross_entropy", help="A suite workload's name, or a workload file.")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--variants", default="default", help="Comma-separated: default, or FIELD=VALUE[+FIELD=VALUE] of EvalSettings.")
    parser.add_argument("--shapes", default=None, help="Shape profile (default: ci on cpu, gpu on cuda).")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    workload = Path(args.workload) if args.workload.endswith(".py") else Path(find(args.workload).path)
    code = reference_copy(workload)
    started = time.monotonic()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        changes = {v: overrides(v) for v in variants}
    except ValueError as exc:
        parser.error(str(exc))
    results: dict[str, list[float]] = {name: [] for name in variants}
    # A verdict other than "no measurable change" on a copy of the reference is a false claim;
    # the timing phase's seconds are what the variant costs.
    claims: dict[str, list[str]] = {name: [] for name in variants}
    phase_s: dict[str, list[float]] = {name: [] for name in variants}
    low: dict[str, dict[str, list[float]]] = {name: {stat: [] for stat in LOW_STATS} for name in variants}
    evaluators = {}
    for name in variants:
        settings = EvalSettings.from_env(args.device)
        for field, value in changes[name].items():
            setattr(settings, field, value)
        if args.shapes:
            settings.shapes = args.shapes
        evaluators[name] = Evaluator(args.device, settings)
    try:
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            for name in order:
                result = evaluators[name].evaluate(workload, candidate_source=code, world_size=args.world_size)
                if not result.correct:  # a copy of the reference rejected: the falsest claim of all, counted
                    claims[name].append(f"{result.status} ({result.error.kind if result.error else '-'})")
                    print(f"round {r + 1:2d} {name:<11} judged {result.status}: {result.summary()}", flush=True)
                    continue
                t = result.timing
                results[name].append(t.speedup)
                said = verdict(t.speedup_ci_low, t.speedup_ci_high, noise_floor(min(t.reference_ms, t.candidate_ms)))
                claims[name].append(said)
                phase_s[name].append(result.phase_seconds.get("timing", math.nan))
                for stat in LOW_STATS:
                    low[name][stat].append(max(getattr(x, stat) for x in t.reference) / max(getattr(x, stat) for x in t.candidate))
                print(f"round {r + 1:2d} {name:<11} {t.speedup:.3f}x ({t.speedup_ci_low or 0:.3f}-{t.speedup_ci_high or 0:.3f}) {said}, "
                      f"timing {phase_s[name][-1]:.2f} s", flush=True)
            if args.out:  # what is measured so far survives a call that runs out of time
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.with_suffix(".jsonl").open("a") as sink:
                    sink.write(json.dumps({"round": r + 1, **{n: (v[-1] if v else None) for n, v in results.items()}}) + "\n")
    finally:
        for ev in evaluators.values():
            ev.close()
    command = "python benchmarks/timing_noise.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        f"# Timing noise: the reference measured against itself ({workload.stem}, world size {args.world_size}, {args.device})",
        "",
        f"Command: `{command}` ({(time.monotonic() - started) / 60:.1f} min). Each row: {args.rounds} evaluations of a "
        "candidate that is the reference itself (true speedup 1.0x), the variants alternating round by round.",
        "",
        "| variant | min | median | max | typical error of one evaluation | within 5% of 1.0x | verdicts other than no measurable change (false claims) | timing phase, median s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, speedups in results.items():
        if not speedups:
            lines.append(f"| {name} | - | - | - | - | - | {len(claims[name])} of {len(claims[name])} ({', '.join(claims[name])}) | - |")
            continue
        s = summary(speedups)
        false = [v for v in claims[name] if v != NO_CHANGE]
        lines.append(
            f"| {name} | {s['min']:.3f}x | {s['median']:.3f}x | {s['max']:.3f}x | {100 * s['rms_error']:.1f}% | "
            f"{100 * s['within_5pct']:.0f}% | {len(false)} of {len(claims[name])}{' (' + ', '.join(false) + ')' if false else ''} | "
            f"{statistics.median(phase_s[name]):.3f} |"
        )
    lines += [
        "",
        "The same evaluations with the speedup taken from other statistics of the samples (the evaluator uses the median):",
        "",
        "| variant | statistic | min | median | max | typical error | within 5% |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in variants:
        for stat in LOW_STATS:
            if not low[name][stat]:
                continue
            s = summary(low[name][stat])
            lines.append(
                f"| {name} | {stat.removesuffix('_ms')} | {s['min']:.3f}x | {s['median']:.3f}x | {s['max']:.3f}x | "
                f"{100 * s['rms_error']:.1f}% | {100 * s['within_5pct']:.0f}% |"
            )
    lines += ["", "Speedups per round: " + "; ".join(f"{n}: " + ", ".join(f"{v:.3f}" for v in vs) for n, vs in results.items()), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
