"""How much slack the clock check needs, and what a forged clock gets through it: honest copies of
workloads (each reference's own model as the candidate) and forgers (the same copy, the rank's
clock scaled by a factor in every block, the integrity snapshot off) judged on this machine, every
round's two blocks recorded; then each rule ``allowed = a_W x the candidate's median block + a_O x
the reference's unaccounted time + b ms`` is applied to the same rounds (upper median of the
per-round excess: ``interleaved.clock_check`` itself, under each rule's settings).

    .venv/bin/python benchmarks/clock_slack.py --reps 3 [--spin] [--device cpu] [--out rounds.jsonl] [--modes staged,unstaged]

Every job is judged by two evaluators side by side, job by job: one with staged rounds (the
reference's ranks draw each round's inputs and project both sides' outputs, ``staged_blocks``)
and one without; the rules are applied to each kind's rounds apart. ``--spin`` keeps a process spinning on one core beside the evaluations (a busy machine). Prints
Markdown: per rule, the honest copies it would reject and the forgers it catches, and each
evaluation's excess over the reference's unaccounted time. The evaluator runs with its defaults
for the device (``EvalSettings.for_device``), the static checker off (a forger reaches the timing
module the way ``tests/evaluator/adversarial/forges_clock.py`` does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import re
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from kloom.evaluation import ClockCheck
from services.worker.evaluator import EvalSettings, Evaluator, interleaved

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = [
    "tests/evaluator/workloads/linear_allreduce.py", "tests/evaluator/workloads/steady_call.py",
    "tests/evaluator/workloads/inplace_allreduce.py",
    "suite/collectives/all_reduce_small.py", "suite/collectives/all_gather.py",
    "suite/tensor_parallel/tp_sharded_rmsnorm.py", "suite/tensor_parallel/tp_allgather_gemm.py",
    "suite/expert_parallel/moe_dispatch.py", "suite/context_parallel/cp_ring_attention.py",
    "suite/vocab_parallel/vocab_parallel_cross_entropy.py", "suite/other/conv1d_halo.py", "suite/other/distributed_sort.py",
]
#: World size 1 only: a 1 MiB output whose projection dominates each block, and a deep MLP.
WORLD_ONE = ["tests/evaluator/workloads/big_inputs.py", "tests/evaluator/workloads/deep_bn_mlp.py"]
FORGED = {"tests/evaluator/workloads/linear_allreduce.py": (0.5, 0.1), "suite/tensor_parallel/tp_sharded_rmsnorm.py": (0.5, 0.1)}
RULES = [(0.5, 0.3, 3.0), (0.1, 0.3, 3.0), (0.05, 0.3, 3.0), (0.0, 0.3, 3.0), (0.0, 0.3, 1.0), (0.0, 0.2, 1.0)]
#: Prepended to a copy to forge its clock (the factor formatted in).
FORGE = '''import torch as _t
_m = getattr(_t, "sys").modules
_tm = _m["services.worker.evaluator.timing"]
_rc, _re = _tm._perf_counter, _tm._elapsed_time
_o = _rc()
_tm._perf_counter = lambda: _o + (_rc() - _o) * {factor}
_tm._elapsed_time = lambda a, b: _re(a, b) * {factor}
_m["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []
'''


@dataclass
class Rounds:
    workload: str
    factor: float  # 1: honest
    world: int
    status: str
    speedup: float | None
    reference: list[tuple[float, float]]  # per round: (the judge's wall ms, the side's reported ms)
    candidate: list[tuple[float, float]]
    staged: bool = False  # whether the evaluation's rounds were staged

    def check(self, rule: tuple[float, float, float]) -> ClockCheck:
        """The evaluator's clock check of these rounds with the rule's (a_W, a_O, b ms) as its slack."""
        settings = dataclasses.replace(EvalSettings(), clock_slack=rule[0], clock_overhead_slack=rule[1], clock_slack_ms=rule[2],
                                       staged_clock_slack=rule[0], staged_clock_overhead_slack=rule[1], staged_clock_slack_ms=rule[2])
        blocks = {role: [interleaved.Block({0: [reported]}, wall) for wall, reported in side]
                  for role, side in (("reference", self.reference), ("candidate", self.candidate))}
        return interleaved.clock_check(blocks, 0, settings, self.staged)

    @property
    def relative_excess(self) -> float:
        """The upper-median excess over the reference's median unaccounted time."""
        check = self.check((0.0, 0.0, 0.0))
        return check.excess_ms / check.reference_unaccounted_ms


def copy_of(workload: Path, factor: float, into: Path) -> Path:
    source = re.sub(r"\bclass Model\(", "class ModelNew(", workload.read_text())
    if factor != 1:
        source = FORGE.format(factor=factor) + source
    path = into / f"{workload.stem}_{str(factor).replace('.', '_')}.py"
    path.write_text(source)
    return path


def _spin() -> None:
    while True:
        pass


def collect(device: str, reps: int, world: int, staged: list[bool]) -> list[Rounds]:
    """Every job in every repetition, judged once by an evaluator of each kind in ``staged``
    (staged rounds on or off), the evaluators alternating job by job."""
    seen: list[tuple] = []
    checked = interleaved.Timing._check

    def recording(self, blocks, per_block):
        seen.append(([(b.wall_ms, b.reported_ms) for b in blocks["reference"]],
                     [(b.wall_ms, b.reported_ms) for b in blocks["candidate"]], self.staged))
        return checked(self, blocks, per_block)

    interleaved.Timing._check = recording
    jobs = [(w, 1.0, world) for w in WORKLOADS] + [(w, f, world) for w, fs in FORGED.items() for f in fs] + [(w, 1.0, 1) for w in WORLD_ONE]
    out: list[Rounds] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        evaluators = [stack.enter_context(Evaluator(device, EvalSettings.for_device(device, static_check=False, staged_blocks=on)))
                      for on in staged]
        for _ in range(reps):
            for workload, factor, size in jobs:
                for ev in evaluators:
                    seen.clear()
                    result = ev.evaluate(ROOT / workload, copy_of(ROOT / workload, factor, Path(tmp)), world_size=size)
                    if not seen:
                        print(f"<!-- {workload} x{factor}: {result.status}, no timing -->", flush=True)
                        continue
                    ref, cand, was_staged = seen[-1]
                    out.append(Rounds(Path(workload).stem, factor, size, result.status,
                                      result.timing.speedup if result.timing else None, ref, cand, was_staged))
    interleaved.Timing._check = checked
    return out


def report(rows: list[Rounds], header: str) -> str:
    lines = [header]
    for staged in sorted({r.staged for r in rows}, reverse=True):
        mine = [r for r in rows if r.staged == staged]
        lines += ["", f"{'Staged' if staged else 'Unstaged'} rounds ({len(mine)} evaluations):", "",
                  "| rule (a_W, a_O, b ms) | honest copies rejected | forgers caught | forgers passed (credited) |", "|---|---|---|---|"]
        forged = [r for r in mine if r.factor != 1]
        for rule in RULES:
            rejected = [r for r in mine if r.factor == 1 and not r.check(rule).ok]
            caught = [r for r in forged if not r.check(rule).ok]
            passed = ", ".join(f"{r.workload} x{r.factor} ({r.speedup:.2f}x)" if r.speedup is not None else f"{r.workload} x{r.factor}"
                               for r in forged if r not in caught)
            lines.append(f"| {rule} | {len(rejected)} of {sum(r.factor == 1 for r in mine)}"
                         f"{': ' + ', '.join(r.workload for r in rejected) if rejected else ''} | {len(caught)} of {len(forged)} | {passed or '-'} |")
    lines += ["", "| workload | world | clock x | staged | status | speedup | rounds | excess / reference's unaccounted (upper median) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speedup = f"{r.speedup:.2f}" if r.speedup is not None else "-"
        lines.append(f"| {r.workload} | {r.world} | {r.factor} | {'yes' if r.staged else 'no'} | {r.status} | {speedup} | {len(r.reference)} | "
                     f"{r.relative_excess:+.2f} |")
    for staged in sorted({r.staged for r in rows}, reverse=True):
        honest = max((r.relative_excess for r in rows if r.factor == 1 and r.staged == staged), default=float("nan"))
        lines += ["", f"Largest honest excess, {'staged' if staged else 'unstaged'}: {honest:.2f}x the reference's unaccounted time."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--spin", action="store_true", help="a process spinning on one core beside the evaluations")
    parser.add_argument("--out", type=Path, help="every evaluation's rounds, as JSON lines")
    parser.add_argument("--modes", default="staged,unstaged", help="which evaluators judge every job: staged, unstaged or both")
    args = parser.parse_args()
    spinner = multiprocessing.Process(target=_spin, daemon=True) if args.spin else None
    if spinner:
        spinner.start()
    try:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        if not modes or any(m not in ("staged", "unstaged") for m in modes):
            parser.error(f"--modes takes staged, unstaged or both, comma-separated; got {args.modes!r}")
        rows = collect(args.device, args.reps, args.world_size, [m == "staged" for m in modes])
    finally:
        if spinner:
            spinner.terminate()
    if args.out:
        args.out.write_text("".join(json.dumps(r.__dict__) + "\n" for r in rows))
    print(report(rows, f"Clock check on {args.device}, world size {args.world_size}, {args.reps} repetitions"
                       f"{', one core spinning beside' if args.spin else ''}"))


if __name__ == "__main__":
    main()
