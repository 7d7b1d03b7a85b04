#!/usr/bin/env bash
# Two jobs on the same network through `kloom optimize --kb` (the knowledge base in SQLite under
# /tmp/kbpins): does the second job's kernel candidate start from the autotuning choices the first
# one's judged winners left in the knowledge base (a `seed_tuned([...], [...])` call in its code; every kernel
# candidate carries the helper's definition), and what do its load and first trials cost then (each step's phase_seconds; each job with empty compiler caches)? $OUT: kb_pins.log (the jobs' tables and
# `kloom kb search`), kb_pins.json (every step: strategy, times, seeded or not, the choices it
# reported, its phases), kb_pins_jobs.tgz (the trajectories).
#
#   KP_MODELS="residual_cnn separable_shuffle" KP_ITERS=3 KP_PER=170 bash benchmarks/gpu/kb_pins.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
export KLOOM_DATA_DIR=/tmp/kbpins
ITERS="${KP_ITERS:-3}"; PER="${KP_PER:-170}"
for w in ${KP_MODELS:-residual_cnn}; do
  for run in 1 2; do
    echo "== $w job $run" >> "$OUT/kb_pins.log"
    # Empty compiler caches for each job: what the second one saves is the pins', not a warm cache's.
    COLUMNS=160 KLOOM_CACHE_DIR="/tmp/kbp-cache/$w-$run" timeout "$PER" python3 -m kloom.cli optimize tests/importers/fixtures/whole_models/$w.py -n 1 --device cuda --shapes gpu \
      --max-iters "$ITERS" --max-wall-s "$((PER - 20))" --kb --profile none --fresh --out "/tmp/kbp/$w-$run" >> "$OUT/kb_pins.log" 2>&1
    echo "exit $?" >> "$OUT/kb_pins.log"
  done
done
COLUMNS=160 python3 -m kloom.cli kb search >> "$OUT/kb_pins.log" 2>&1
python3 - > "$OUT/kb_pins.json" <<'PY'
import json
from pathlib import Path
rows = {}
for traj in sorted(Path("/tmp/kbp").glob("*/trajectory.json")):
    t = json.loads(traj.read_text())
    steps = []
    for s in t["steps"]:
        ev = s.get("evaluation") or {}
        code = s.get("candidate_code") or ""
        steps.append({"strategy": s["plan"]["strategy"], "params": s["plan"].get("params"), "status": s["status"],
                      "speedup": (ev.get("timing") or {}).get("speedup"), "candidate_ms": (ev.get("timing") or {}).get("candidate_ms"),
                      "reference_ms": (ev.get("timing") or {}).get("reference_ms"),
                      "seeded": "\nseed_tuned([" in code, "tuned": ev.get("tuned"), "phase_seconds": ev.get("phase_seconds"),
                      "error": (s.get("error") or "")[:300], "rationale": (s["plan"].get("rationale") or "")[:300]})
    rows[traj.parent.name] = {"state": t["state"], "stop_reason": t["stop_reason"][:200], "steps": steps}
print(json.dumps(rows, indent=1))
PY
tar czf "$OUT/kb_pins_jobs.tgz" -C /tmp kbp 2>/dev/null
