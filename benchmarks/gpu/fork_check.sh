#!/usr/bin/env bash
# Forked ranks (EvalSettings.fork_ranks, services/worker/evaluator/fork_server.py) and the spares'
# late admission (EvalSettings.admit_spare_during_evaluation) on one GPU: the device transport's
# tests (hostile candidates), then the judge's cost per candidate and the device memory it holds,
# beside the landed judge, on the small and the sized workload. Carry .whl and .landed
# (results/README.md). Each step writes its file under $OUT.
#   bash benchmarks/gpu/fork_check.sh [VARIANTS...]    (default: late)
set -u
echo open > /tmp/kloom-sandbox.verdict  # one GPU: the NCCL-in-sandbox check needs two
. benchmarks/gpu/prelude.sh
also=${*:-late}
nvidia-smi -L > "$OUT/machine.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/evaluator/test_device_transport.py > "$OUT/transport_tests.log" 2>&1
echo "transport tests exit $?"; tail -3 "$OUT/transport_tests.log"
cost() {  # name, seconds, judge_cost arguments...
  local name=$1 budget=$2; shift 2
  { echo '```'; echo "\$ python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --landed .landed --also $also $*"; echo '```'; echo
    timeout "$budget" python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --landed .landed --also $also "$@"; } > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name exit $?"; grep -E "^- world|^world|GiB" "$OUT/$name.md"
}
cost judge_cost_cuda 200 --candidates 6 --rounds 2
cost judge_cost_cuda_sized $((560 - SECONDS)) --candidates 5 --rounds 2 --workload benchmarks/workloads/linear_allreduce_sized.py
