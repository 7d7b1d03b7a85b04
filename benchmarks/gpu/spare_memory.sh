#!/usr/bin/env bash
# The next candidate's ranks on the device during an evaluation or only after it
# (EvalSettings.admit_spare_during_evaluation), on whole kloom jobs of KernelBench problems at
# their own sizes: each problem's job twice in one call, default settings then late admission,
# with what the evaluator's processes held on the GPU (NVML, contexts included), the job's wall
# time and its result. Carry .whl and .gpu (a copy of ../shared/third_party).
#   [VARIANTS="early late"] bash benchmarks/gpu/spare_memory.sh PROBLEM_PREFIX...   (e.g. level1_95 level2_95)
# Variants: default (the settings as they are), early and late (the setting forced on and off).
set -u
echo open > /tmp/kloom-sandbox.verdict  # one GPU: the NCCL-in-sandbox check needs two
. benchmarks/gpu/prelude.sh
suite=/tmp/kbsuite
python3 - "$suite" <<'PY'
import sys
from pathlib import Path
from kloom.importers import import_kernelbench
for level in (1, 2):
    import_kernelbench(".gpu/third_party/kernelbench", level=level, out_dir=Path(sys.argv[1]) / f"level{level}")
PY
for prefix in "$@"; do
  workload=$(ls "$suite"/level*/"$prefix"_*.py | head -1)
  name=$(basename "$workload" .py)
  for variant in ${VARIANTS:-early late}; do
    extra=""
    [ "$variant" = late ] && extra="KLOOM_EVAL_ADMIT_SPARE_DURING_EVALUATION=0"
    [ "$variant" = early ] && extra="KLOOM_EVAL_ADMIT_SPARE_DURING_EVALUATION=1"
    env $extra timeout 280 python3 benchmarks/gpu/kernelbench_problem.py --workload "$workload" --name "$name" \
      --result "/tmp/$name.$variant.json" --modes eager --max-candidates 3 --jobs /tmp/jobs > "/tmp/$name.$variant.log" 2>&1
    echo "$name $variant exit $?"
    python3 - "/tmp/$name.$variant.json" "$name" "$variant" >> "$OUT/spare_memory.jsonl" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))
k = row.get("kloom") or {}
print(json.dumps({"problem": sys.argv[2], "variant": sys.argv[3], "device": row.get("device"), "correct": k.get("correct"),
                  "outcome": k.get("outcome"), "speedup": k.get("result_speedup"), "job_wall_s": k.get("job_wall_s"),
                  "device_memory": k.get("device_memory"), "bound_gib": k.get("evaluator_bound_gib"),
                  "pool_processes": k.get("pool_processes"), "reference_memory": row.get("reference_memory")}))
PY
    tail -1 "$OUT/spare_memory.jsonl"
  done
done
