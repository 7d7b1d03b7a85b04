"""benchmarks/gpu/reduce_middle.py on the CPU (Triton's interpreter, a small shape): every
variant it will time on the GPU computes what eager computes, the reduced axis cut into segments
included, and the table is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_variant_computes_the_reference(tmp_path):
    out = tmp_path / "reduce_middle.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu/reduce_middle.py"), "--ops", "sum", "argmax", "max", "--out", str(out)],
        check=True, env=env, cwd=tmp_path, timeout=300, capture_output=True,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert {r["op"] for r in report["rows"]} == {"sum", "argmax", "max"}
    assert {r["split"] for r in report["rows"]} == {1, 2}
    assert all(r.get("correct") for r in report["rows"]), [r for r in report["rows"] if not r.get("correct")]
