#!/usr/bin/env bash
# Why a step cut by a job's wall-time limit inflates the next step's interleaved times (PKB at
# world size 2: 1.4-1.9x the baseline on collective problems, 400x on the ring-attention P2P
# ones; results/gpu/pkb-ws2/README.md). On 2+ GPUs, for one imported PKB problem:
#   1. the job as the batch ran it (a short wall limit cuts its first candidate mid-trial), while
#      every second the GPUs' compute processes and the host's evaluator processes are listed;
#   2. the same job without a limit (no cut), for the same listing;
# then each job's reference times (baseline alone, then interleaved per step) side by side.
#
#   bash benchmarks/gpu/cut_step.sh [PROBLEM_PREFIX] [WALL_S]     (default pkb_55_, 30)
#   CUT_RUNS=whole bash benchmarks/gpu/cut_step.sh ...               (one of the two jobs)
#
# Carry `.whl` and `.gpu` (as for pkb.sh). Everything lands in $OUT/cut-step/.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
prefix="${1:-pkb_55_}"
wall="${2:-30}"
dest="$OUT/cut-step"
suite=/tmp/kloom-pkb-suite
mkdir -p "$dest"
rm -rf "$suite"
python3 -m kloom.cli suite import pkb .gpu/third_party/parallelkernelbench --out "$suite" > "$dest/import.log" 2>&1 || { tail -5 "$dest/import.log"; exit 1; }
workload=$(ls "$suite"/"$prefix"*.py | head -1)
echo "workload: $workload"
watch_gpus() {  # every second: compute processes on the GPUs, and the evaluator's processes
  while :; do
    echo "--- $(date +%T)"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
    ps -eo pid,ppid,stat,etimes,pcpu,comm | awk '$6 ~ /python/ || $3 ~ /[DZ]/'
    sleep 1
  done
}
run() {  # name, extra optimize args
  local name=$1; shift
  watch_gpus > "$dest/$name.watch.log" 2>&1 &
  local watcher=$!
  NCCL_DEBUG=WARN timeout 280 python3 -m kloom.cli optimize "$workload" -n 2 --device cuda --max-iters 3 --no-kb --profile none \
    --out "$dest/$name" --fresh "$@" > "$dest/$name.log" 2>&1
  echo "$name: exit $?"
  kill "$watcher" 2>/dev/null
  pkill -9 -f "[s]ervices.worker.evaluator.rank" 2>/dev/null
}
for name in ${CUT_RUNS:-cut whole}; do
  case "$name" in cut) run cut --max-wall-s "$wall" ;; whole) run whole ;; esac
done
tar czf "$dest/jobs.tgz" -C "$dest" $(ls -d "$dest"/*/ 2>/dev/null | xargs -n1 basename) 2>/dev/null
python3 - "$dest" <<'EOF'
import json, sys
from pathlib import Path
for name in ("cut", "whole"):
    path = Path(sys.argv[1]) / name / "trajectory.json"
    if not path.is_file():
        print(name, "no trajectory"); continue
    t = json.loads(path.read_text())
    print(f"{name}: baseline {t['baseline']['reference_ms']:.3f} ms; state {t['state']} ({t['stop_reason'][:80]})")
    for s in t["steps"]:
        timing = (s.get("evaluation") or {}).get("timing") or {}
        print(f"  step {s['index']} {s['plan']['strategy']:<24} {s['status']:<14} reference {timing.get('reference_ms')} candidate {timing.get('candidate_ms')}"
              f" started {s['started_at'][11:19]} finished {s['finished_at'][11:19]}")
EOF
