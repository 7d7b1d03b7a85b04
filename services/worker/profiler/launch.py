"""One-shot launcher: N rank processes that build one model and run it a few times under a profiler.

``python -m services.worker.profiler.launch --workload W [--candidate C] --world-size N ...``
starts N processes of ``services.worker.profiler.rank`` in a fresh process group (a file store
in a private directory), waits for them, and kills the rest as soon as one fails, so that a rank
stuck in a collective never outlives the run. It is what profiling wraps: ``ncu ... python -m
services.worker.profiler.launch --mode ncu ...``, or ``--mode torch`` for the PyTorch profiler's
timeline. Profiling never happens inside the worker or the evaluator's warm pool.

This module imports the standard library only, and ``kloom.processes`` (which imports nothing else): ncu
follows it into the ranks, which import torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from kloom.processes import NO_MULTICAST, run_ranks

#: How long the other ranks get to finish after one failed before they are killed (they are
#: typically waiting in a collective for the rank that failed).
ERROR_GRACE_S = 5.0
#: Exit code of a launch that ran out of time (as ``timeout(1)``).
TIMEOUT_EXIT = 124
#: NVLink multicast stays off in everything spawned here (``kloom.processes.NO_MULTICAST``).
FORCED_ENV = {**NO_MULTICAST, "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONUNBUFFERED": "1"}
_ROOT = str(Path(__file__).resolve().parents[3])

Mode = Literal["plain", "torch", "ncu"]


@dataclass
class LaunchSpec:
    """What the ranks build and run; written as JSON next to their outputs."""

    workload: str
    world_size: int
    device: str
    out_dir: str
    candidate: str | None = None
    shapes: str = "ci"
    #: ``torch``: record a PyTorch profiler timeline; ``ncu``: bracket the iterations with
    #: cudaProfilerStart/Stop and an NVTX range for ncu; ``plain``: just run them.
    mode: Mode = "torch"
    warmup_iters: int = 3
    iters: int = 5
    #: Ranks that record (``torch``) or open the profiling window (``ncu``); None: every rank.
    profile_ranks: list[int] | None = None
    seed: int = 0
    devices: list[int] | None = None
    communication_patterns: list[str] = field(default_factory=list)
    #: Also export each recording rank's Chrome trace (``rank<r>.trace.json``).
    trace: bool = False

    def save(self) -> Path:
        out = Path(self.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "spec.json"
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LaunchSpec":
        return cls(**json.loads(Path(path).read_text()))

    def device_index(self, rank: int) -> int:
        if self.device != "cuda":
            return 0
        return (self.devices or list(range(self.world_size)))[rank]

    def records(self, rank: int) -> bool:
        return self.profile_ranks is None or rank in self.profile_ranks


def command(spec_path: str | os.PathLike) -> list[str]:
    """The command line that launches the ranks of a saved spec."""
    return [sys.executable, "-m", "services.worker.profiler.launch", "--spec", str(spec_path)]


def rank_output(out_dir: str | os.PathLike, rank: int, kind: str = "json") -> Path:
    """Where rank ``rank`` writes its result (``json``), its error (``error.json``) or its log."""
    return Path(out_dir) / f"rank{rank}.{kind}"


def launch(spec: LaunchSpec, timeout_s: float | None = None) -> int:
    """Run the ranks of ``spec`` to the end; 0 when every rank succeeded.

    A rank that fails makes the others stop after ``ERROR_GRACE_S``; past ``timeout_s`` every
    rank is killed and the exit code is ``TIMEOUT_EXIT``.
    """
    spec_path = spec.save()
    store_dir = tempfile.mkdtemp(prefix="kloom-launch-")
    env = dict(os.environ)
    env.update(FORCED_ENV)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    env["KLOOM_PROFILE_STORE"] = os.path.join(store_dir, "pg.store")
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.world_size)))
    logs = [open(rank_output(spec.out_dir, rank, "log"), "wb") for rank in range(spec.world_size)]
    try:
        outcome = run_ranks(lambda rank: [sys.executable, "-m", "services.worker.profiler.rank", str(spec_path), str(rank)],
                            spec.world_size, env=lambda rank: env, cwd=spec.out_dir, logs=logs.__getitem__,
                            timeout_s=timeout_s, grace_s=ERROR_GRACE_S)
    finally:
        for log in logs:
            log.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    if outcome.timed_out:
        return TIMEOUT_EXIT
    return 0 if outcome.ok else 1


def _parse_args(argv: list[str] | None) -> tuple[LaunchSpec, float | None]:
    parser = argparse.ArgumentParser(prog="python -m services.worker.profiler.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", help="a saved LaunchSpec (JSON); the other options are then ignored")
    parser.add_argument("--workload")
    parser.add_argument("--candidate", help="candidate file defining ModelNew (default: the reference alone)")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--shapes", default=None, help="shape profile (default: gpu on cuda, ci on cpu)")
    parser.add_argument("--mode", choices=("plain", "torch", "ncu"), default="torch")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--ranks", default="all", help="ranks that record: all, or e.g. 0,1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default=None, help="GPU index per rank, e.g. 0,1 (default: rank r on GPU r)")
    parser.add_argument("--out", default=None, help="output directory (default: a new temporary one)")
    parser.add_argument("--trace", action="store_true", help="export each recording rank's Chrome trace")
    parser.add_argument("--timeout", type=float, default=None, help="kill every rank after this many seconds")
    args = parser.parse_args(argv)
    if args.spec:
        return LaunchSpec.load(args.spec), args.timeout
    if not args.workload:
        parser.error("--workload (or --spec) is required")
    spec = LaunchSpec(
        workload=str(Path(args.workload).resolve()),
        candidate=str(Path(args.candidate).resolve()) if args.candidate else None,
        world_size=args.world_size,
        device=args.device,
        out_dir=str(Path(args.out).resolve()) if args.out else tempfile.mkdtemp(prefix="kloom-profile-"),
        shapes=args.shapes or ("gpu" if args.device == "cuda" else "ci"),
        mode=args.mode,
        warmup_iters=args.warmup,
        iters=args.iters,
        profile_ranks=None if args.ranks == "all" else [int(r) for r in args.ranks.split(",")],
        seed=args.seed,
        devices=[int(d) for d in args.devices.split(",")] if args.devices else None,
        trace=args.trace,
    )
    return spec, args.timeout


def main(argv: list[str] | None = None) -> int:
    spec, timeout_s = _parse_args(argv)
    code = launch(spec, timeout_s)
    for rank in range(spec.world_size):
        result, error = rank_output(spec.out_dir, rank), rank_output(spec.out_dir, rank, "error.json")
        if result.is_file():
            seconds = json.loads(result.read_text()).get("seconds", {})
            timing = ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
            print(f"rank {rank}: ok ({timing})")
        elif error.is_file():
            print(f"rank {rank}: failed: {json.loads(error.read_text()).get('message', '')}")
        else:
            print(f"rank {rank}: no result (stopped or killed)")
    if code == TIMEOUT_EXIT:
        print(f"timed out after {timeout_s:.0f} s; every rank was killed")
    print(f"outputs in {spec.out_dir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
