"""Replace rows of a KernelBench results file (``partial.jsonl``) with rows measured again.

A change to kloom that concerns some problems only (a new kernel kind, say) is measured by running
those problems again (``benchmarks/gpu/kernelbench.sh`` on a folder holding their files); their
new rows replace the old ones whole: eager, the compile modes and kloom's job come from one run
on one machine. A compile mode the new run did not measure (max-autotune, which compiles for
minutes) is kept from the old row as an entry of its own: with the eager time measured beside it
and its machine (``kernelbench_run.py --fill``'s form), so the report never divides one run's time
by another's. Each replaced row records the run it replaced (``replaces``: device and kloom
outcome of the old row).

    python benchmarks/kernelbench_merge.py results/gpu/h100-kernelbench/partial.jsonl NEW.jsonl [NEW2.jsonl ...]

Writes the first file in place (rows in their old order, new problems appended).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.kernelbench_run import read_rows  # noqa: E402


def kept_mode(old: dict, mode: str) -> dict | None:
    """``old``'s entry for ``mode`` as a self-contained entry (its own eager time and device)."""
    entry = dict((old.get("modes") or {}).get(mode) or {})
    if not entry or entry.get("ms") is None:
        return None
    if entry.get("eager_ms") is None:
        eager = (old.get("modes") or {}).get("eager") or {}
        if eager.get("ms") is None:
            return None
        entry["eager_ms"], entry["device"] = eager["ms"], old.get("device")
    return entry


def merged(old: dict | None, new: dict) -> dict:
    if old is None or new.get("status") != "measured":
        return new if old is None or new.get("status") == "measured" else old
    row = json.loads(json.dumps(new))
    for mode in (old.get("modes") or {}):
        if mode not in row.setdefault("modes", {}):
            entry = kept_mode(old, mode)
            if entry is not None:
                row["modes"][mode] = entry
    k = old.get("kloom") or {}
    row["replaces"] = {"device": old.get("device"), "outcome": k.get("outcome"), "result_speedup": k.get("result_speedup")}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path, nargs="+")
    args = ap.parse_args()
    rows = read_rows([args.base])
    changed = 0
    for path in args.new:
        for name, row in read_rows([path]).items():
            if row.get("status") != "measured":
                continue  # a problem cut short keeps its old row
            rows[name] = merged(rows.get(name), row)
            changed += 1
    args.base.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    print(f"{changed} row(s) replaced or added; {len(rows)} in {args.base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
