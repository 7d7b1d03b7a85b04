#!/usr/bin/env bash
# The checks on two GPUs that CPU-side fixes wait for (results/README.md, "Not run yet"), in one
# device call on an `nvidia-h200-x2` (carry `.whl`, `.gpu`):
#   cut      the cut-step timing probe (benchmarks/gpu/cut_step.sh on PKB's first ring-attention
#            problem; its "cut" job is also the baseline/fallback deadline check)
#   ring     the job without a limit alone (the timing of a workload that makes process groups
#            in get_inputs: services/worker/evaluator/groups.py)
#   symm     the symmetric-memory all-reduce runtime's padding on PKB's odd-length bf16 all-reduce
#            (an imported problem whose name matches PKB_SYMM, default grad_acc_loss)
#   profiler the profiler's GPU tests, launches in the rank sandbox
#   overlap  the overlap paths through the evaluator (tests/agents/test_overlap.py -m gpu)
#   clock    the clock cross-check on the overlap paths it rejected (benchmarks/gpu/clock_case.py, 3
#            evaluations each; results/gpu/h200x2-session19/): clock.json, then --summarize
#
#   bash benchmarks/gpu/x2_checks.sh "cut symm profiler"      (everything lands in $OUT)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
for check in ${1:-cut symm profiler}; do
  start=$(date +%s)
  case "$check" in
    cut) timeout 330 bash benchmarks/gpu/cut_step.sh pkb_55_ 30 > "$OUT/cut.log" 2>&1 ;;
    ring) CUT_RUNS=whole timeout 200 bash benchmarks/gpu/cut_step.sh pkb_55_ > "$OUT/ring.log" 2>&1 ;;
    symm)
      suite=/tmp/kloom-pkb-suite
      [ -d "$suite" ] || python3 -m kloom.cli suite import pkb .gpu/third_party/parallelkernelbench --out "$suite" > "$OUT/import.log" 2>&1
      workload=$(ls "$suite"/*"${PKB_SYMM:-grad_acc_loss}"*.py | head -1)
      timeout 200 python3 -m kloom.cli optimize "$workload" -n 2 --device cuda --max-iters 4 --no-kb --profile none \
        --out "$OUT/symm" --fresh > "$OUT/symm.log" 2>&1 ;;
    profiler) PYTHONFAULTHANDLER=1 CUDA_VISIBLE_DEVICES=0,1 timeout 240 python3 -m pytest -q -m gpu --noconftest -p no:cacheprovider tests/services/worker/profiler > "$OUT/profiler.log" 2>&1 ;;
    overlap) CUDA_VISIBLE_DEVICES=0,1 timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/agents/test_overlap.py ${OVERLAP_K:+-k "$OVERLAP_K"} > "$OUT/overlap.log" 2>&1 ;;
    clock)
      CUDA_VISIBLE_DEVICES=0,1 timeout 300 python3 benchmarks/gpu/clock_case.py tp_gemm_allreduce:cublas tp_gemm_reducescatter:cublas \
        --runs 3 --out "$OUT/clock.json" > "$OUT/clock.log" 2>&1
      python3 benchmarks/gpu/clock_case.py --summarize "$OUT/clock.json" >> "$OUT/clock.log" 2>&1 ;;
    *) echo "unknown check $check"; continue ;;
  esac
  echo "$check: exit $? in $(( $(date +%s) - start )) s"
  tail -4 "$OUT/$check.log"
done
