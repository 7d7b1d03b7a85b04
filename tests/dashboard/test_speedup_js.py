"""The dashboard's speedup rules (services/api/dashboard/js/speedup.js) agree with kloom's own
(kloom/speedup.py): the same interval and verdict for the same timing record, and only a
measurable win of a kernel other than the reference's own copy is drawn as one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kloom.speedup import measured

JS = Path(__file__).resolve().parents[2] / "services" / "api" / "dashboard" / "js" / "speedup.js"


def _stats(median: float, stdev: float, iters: int) -> dict:
    return {"median_ms": median, "stdev_ms": stdev, "iters": iters}


CASES = [
    {"speedup": 2.0, "reference_ms": 2.0, "candidate_ms": 1.0, "reference": [_stats(2.0, 0.1, 50)], "candidate": [_stats(1.0, 0.05, 50)]},
    {"speedup": 1.05, "reference_ms": 1.05, "candidate_ms": 1.0, "reference": [_stats(1.05, 0.5, 5)], "candidate": [_stats(1.0, 0.5, 5)]},
    {"speedup": 0.5, "reference_ms": 1.0, "candidate_ms": 2.0, "reference": [_stats(1.0, 0.01, 20), _stats(0.9, 0.01, 20)], "candidate": [_stats(2.0, 0.02, 20), _stats(1.5, 0.2, 20)]},
    {"speedup": 1.07, "reference_ms": 1.07, "candidate_ms": 1.0, "speedup_ci_low": 1.05, "speedup_ci_high": 1.1, "reference": [], "candidate": []},
    {"speedup": 1.2, "reference_ms": 1.2, "candidate_ms": 1.0, "reference": [_stats(1.2, 0.1, 1)], "candidate": [_stats(1.0, 0.1, 1)]},
    # Above 1.0 by its own samples, not by more than the noise between evaluations (3% at 1 ms).
    {"speedup": 1.05, "reference_ms": 1.05, "candidate_ms": 1.0, "speedup_ci_low": 1.01, "speedup_ci_high": 1.1, "reference": [], "candidate": []},
    # The same interval at 0.1 ms a call: a floor of 21%.
    {"speedup": 1.3, "reference_ms": 0.13, "candidate_ms": 0.1, "speedup_ci_low": 1.2, "speedup_ci_high": 1.4, "reference": [], "candidate": []},
]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_dashboard_reads_speedups_as_kloom_does(tmp_path):
    script = tmp_path / "check.mjs"
    script.write_text(
        f'import {{ measured, isWin }} from "{JS.as_posix()}";\n'
        f"const cases = {json.dumps(CASES)};\n"
        "const out = cases.map((t) => { const m = measured(t); return [m.low, m.high, m.verdict,"
        " isWin({ status: 'correct', strategy: 'torch_compile', verdict: m.verdict }),"
        " isWin({ status: 'correct', strategy: 'reference_copy', verdict: m.verdict })]; });\n"
        "console.log(JSON.stringify(out));\n"
    )
    got = json.loads(subprocess.run(["node", str(script)], capture_output=True, text=True, check=True, timeout=60).stdout)
    for case, (low, high, verdict, win, copy_win) in zip(CASES, got):
        m = measured(case)
        assert verdict == m.verdict and win == m.measurable_win and copy_win is False
        if m.low is None:
            assert low is None and high is None
        else:
            assert low == pytest.approx(m.low) and high == pytest.approx(m.high)
    assert [g[2] for g in got] == ["faster", "no measurable change", "slower", "faster", "unmeasured", "no measurable change", "no measurable change"]
