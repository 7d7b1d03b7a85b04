import sys, json
from pathlib import Path
sys.path.insert(0, ".")
from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator
path = Path(find("tp_allreduce_residual_rmsnorm").path)
import tempfile
cand = Path(tempfile.mkdtemp()) / "copy.py"
cand.write_text(path.read_text() + "\n\nModelNew = Model\n")
with Evaluator("cuda", EvalSettings.for_device("cuda")) as ev:
    for i in range(3):
        r = ev.evaluate(path, cand, world_size=2)
        print("reference copy", i, r.status, r.summary()[:160], flush=True)
