"""benchmarks/kernelbench_merge.py: rows measured again replace the old ones whole, a compile mode
the new run did not measure is kept with its own eager time and machine, and a problem cut short
in the new run keeps its old row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(path: Path) -> dict[str, dict]:
    return {r["workload"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_new_rows_replace_old_ones_and_an_unmeasured_mode_keeps_its_own_eager_time(tmp_path):
    old = [
        {"workload": "a", "status": "measured", "device": "H200", "modes": {"eager": {"ms": 3.0}, "default": {"ms": 2.9},
                                                                            "max-autotune": {"ms": 2.5}}, "kloom": {"outcome": "no faster kernel found", "result_speedup": 1.0}},
        {"workload": "b", "status": "measured", "device": "H200", "modes": {"eager": {"ms": 1.0}}, "kloom": {"result_speedup": 1.1}},
        {"workload": "c", "status": "measured", "device": "H100", "modes": {"eager": {"ms": 5.0}}, "kloom": {"result_speedup": 1.2}},
    ]
    new = [
        {"workload": "a", "status": "measured", "device": "H100", "modes": {"eager": {"ms": 2.8}, "default": {"ms": 2.85}},
         "kloom": {"outcome": "faster kernel found", "result_speedup": 1.4}},
        {"workload": "c", "status": "over_budget", "modes": {"eager": {"ms": 4.0}}},
        {"workload": "d", "status": "measured", "device": "H100", "modes": {"eager": {"ms": 1.0}}, "kloom": {"result_speedup": 1.0}},
    ]
    base = _write(tmp_path / "partial.jsonl", old)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/kernelbench_merge.py"), str(base), str(_write(tmp_path / "new.jsonl", new))],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = _rows(base)
    assert list(rows) == ["a", "b", "c", "d"]
    a = rows["a"]
    assert a["device"] == "H100" and a["modes"]["eager"]["ms"] == 2.8 and a["kloom"]["result_speedup"] == 1.4
    # max-autotune came from the old run: it carries that run's eager time and machine.
    assert a["modes"]["max-autotune"] == {"ms": 2.5, "eager_ms": 3.0, "device": "H200"}
    assert a["replaces"] == {"device": "H200", "outcome": "no faster kernel found", "result_speedup": 1.0}
    assert rows["b"] == old[1] and rows["c"] == old[2]  # untouched, and cut short: the old row stays
    assert rows["d"]["kloom"]["result_speedup"] == 1.0
