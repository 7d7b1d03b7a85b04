"""Why an honest candidate can fail the clock check on a GPU: every timed block of both sides
as the judge saw it (wall time on the judge's clock, the time the side reported), for honest
candidates evaluated back to back, with fresh candidate ranks and without, plus what starting a
rank costs (import torch, CUDA, the first collective). Writes JSON lines to --out.

    python3 benchmarks/gpu/clock_diag.py --out $OUT/clock_diag.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.worker.evaluator import EvalSettings, Evaluator  # noqa: E402
from services.worker.evaluator import interleaved as judge  # noqa: E402

LINEAR = ROOT / "tests/evaluator/workloads/linear_allreduce.py"
CORRECT = ROOT / "tests/evaluator/candidates/correct.py"
COPY = LINEAR.read_text().replace("class Model(", "class ModelNew(")

STARTUP = r"""
import time; t0 = time.perf_counter()
import torch; t1 = time.perf_counter()
torch.cuda.init(); x = torch.ones(1, device="cuda"); torch.cuda.synchronize(); t2 = time.perf_counter()
import torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1, device_id=torch.device("cuda", 0))
dist.all_reduce(x); torch.cuda.synchronize(); t3 = time.perf_counter()
print({"import_torch_s": t1 - t0, "cuda_init_s": t2 - t1, "nccl_first_collective_s": t3 - t2})
dist.destroy_process_group()
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="fresh,warm", help="fresh: as the judge runs; warm: candidate ranks kept")
    ap.add_argument("--evaluations", type=int, default=4)
    args = ap.parse_args()
    out = open(args.out, "a")

    def emit(**row):
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(row, flush=True)

    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, timeout=120)
        emit(kind="startup", stdout=r.stdout.strip(), stderr=r.stderr[-500:])

    blocks: list[dict] = []
    original = judge.Timing._block

    def logged(self, side, other, iters, warm, flush_bytes, limit_s, seed, keep=False):
        b = original(self, side, other, iters, warm, flush_bytes, limit_s, seed, keep)
        blocks.append({"role": side.role, "iters": iters, "warm": warm, "wall_ms": round(b.wall_ms, 3),
                       "reported_ms": round(b.reported_ms, 3)})
        return b

    judge.Timing._block = logged
    settings = dataclasses.replace(EvalSettings.from_env("cuda"), static_check=False, shapes="ci", timing_budget_s=0.2, trials=3)
    renew = judge.JudgePools.renew_candidate
    for variant in args.variants.split(","):
        if variant == "warm":
            judge.JudgePools.renew_candidate = lambda self: None
        else:
            judge.JudgePools.renew_candidate = renew
        with Evaluator("cuda", settings, devices=[0]) as ev:
            pair = [("correct", {"candidate": CORRECT}), ("copy", {"candidate_source": COPY})]
            for i, (name, kw) in enumerate(pair[i % 2] for i in range(args.evaluations)):
                blocks.clear()
                t0 = time.perf_counter()
                res = ev.evaluate(LINEAR, world_size=1, **kw)
                cc = res.timing.clock_check if res.timing else None
                emit(kind="eval", variant=variant, i=i, candidate=name, status=res.status, wall_s=round(time.perf_counter() - t0, 3),
                     phases={k: round(v, 3) for k, v in res.phase_seconds.items()},
                     clock=dataclasses.asdict(cc) if cc else None, blocks=list(blocks),
                     error=res.error.message[:300] if res.error else "")


if __name__ == "__main__":
    main()
