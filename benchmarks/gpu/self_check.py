"""The judge's own bias on a workload: its reference evaluated against an unchanged copy of itself
(``ModelNew = Model``), three times, through the real evaluator at world size 2. A fair judge reads
about 1.00x; what it reads is the floor under any candidate's speedup on that workload.

    CUDA_VISIBLE_DEVICES=0,1 python3 benchmarks/gpu/self_check.py [SUITE_WORKLOAD]   (default: tp_allreduce_residual_rmsnorm)
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kloom.suite import find  # noqa: E402
from services.worker.evaluator import EvalSettings, Evaluator  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "tp_allreduce_residual_rmsnorm"
path = Path(find(name).path)
copy = Path(tempfile.mkdtemp()) / "copy.py"
copy.write_text(path.read_text() + "\n\nModelNew = Model\n")
with Evaluator("cuda", EvalSettings.for_device("cuda")) as ev:
    for i in range(3):
        result = ev.evaluate(path, copy, world_size=2)
        print(f"{name}: reference copy {i}: {result.status} {result.summary()[:160]}", flush=True)
