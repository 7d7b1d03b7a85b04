#!/usr/bin/env bash
# Whole networks on one GPU (tests/importers/fixtures/whole_models/, the CPU test's files), each
# through `kloom optimize --device cuda` with the offline strategist, as a user would run it:
# the table and verdict of each job in $OUT/whole_models.log, and every step's strategy, status
# and error in $OUT/whole_models.json (the trajectories in $OUT/whole_models_jobs.tgz). Then the GPU tests of the strategies' runtimes that have
# no multi-GPU part (cuda_graph, row_chunks) in $OUT/runtimes.log.
#
#   bash benchmarks/gpu/whole_models.sh [max candidates] [seconds per model] [model names, comma-separated]
#   (about 5 minutes on an H100). Each job is told to stop 20 s before its seconds are up
#   (--max-wall-s), so a slow model keeps the candidates it finished; WM_RUNTIMES=0 skips the
#   runtimes' tests.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
iters="${1:-4}"
per_model="${2:-240}"
only="${3:-}"
work=/tmp/kloom-whole-models
mkdir -p "$work"
for model in tests/importers/fixtures/whole_models/*.py; do
  name=$(basename "$model" .py)
  [ -n "$only" ] && [[ ",$only," != *",$name,"* ]] && continue
  echo "== $name" >> "$OUT/whole_models.log"
  COLUMNS=160 timeout "$per_model" python3 -m kloom.cli optimize "$model" -n 1 --device cuda --shapes gpu --max-iters "$iters" --max-wall-s "$((per_model - 20))" --no-kb \
    --profile none --fresh --out "$work/$name" >> "$OUT/whole_models.log" 2>&1
  echo "exit $?" >> "$OUT/whole_models.log"
done
python3 - "$work" > "$OUT/whole_models.json" <<'PY'
import json, sys
from pathlib import Path
rows = {}
for traj in sorted(Path(sys.argv[1]).glob("*/trajectory.json")):
    t = json.loads(traj.read_text())
    rows[traj.parent.name] = {"state": t["state"], "stop_reason": t["stop_reason"][:300],
                              "steps": [{"strategy": s["plan"]["strategy"], "status": s["status"], "speedup": (s.get("evaluation") or {}).get("timing", {}) and s["evaluation"]["timing"].get("speedup"),
                                         "error": (s.get("error") or "")[:300],
                                         "wrapper": s["plan"].get("params", {}).get("wrapper"),
                                         "phase_seconds": (s.get("evaluation") or {}).get("phase_seconds")} for s in t["steps"]]}
print(json.dumps(rows, indent=1))
PY
# Every job's trajectory (each step's reference and candidate times: benchmarks/step_ranking.py).
(cd "$work" && tar czf "$OUT/whole_models_jobs.tgz" */trajectory.json 2>/dev/null)
[ "${WM_RUNTIMES:-1}" = 0 ] || timeout 200 python3 -m pytest -q -p no:cacheprovider -rs agents/strategist/cuda_graph agents/strategist/row_chunks > "$OUT/runtimes.log" 2>&1
[ "${WM_RUNTIMES:-1}" = 0 ] || echo "runtimes: $(tail -1 "$OUT/runtimes.log")"
grep -E "^== |exit |kernel found" "$OUT/whole_models.log"
