#!/usr/bin/env bash
# The judge on one GPU after a change to its timing or its messages: the device transport's tests
# (hostile candidates), the reference timed against its own copy with every timing round kept (the
# GPU's default) beside rounds sized to the work (timing_min_block_s=0.05, the CPU's), then the judge's cost per
# candidate beside the landed judge, on the small workload (with the rounds sized, too) and the sized one. Carry .whl and .landed
# (results/README.md). Each step writes its file under $OUT.
#   [NOISE_ROUNDS=14] [SIZED_ROUNDS=2] bash benchmarks/gpu/judge_check.sh    (NOISE_ROUNDS=0: no self-timing)
set -u
echo open > /tmp/kloom-sandbox.verdict  # one GPU: the NCCL-in-sandbox check needs two
. benchmarks/gpu/prelude.sh
nvidia-smi -L > "$OUT/machine.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/evaluator/test_device_transport.py > "$OUT/transport_tests.log" 2>&1
echo "transport tests exit $?"; tail -3 "$OUT/transport_tests.log"
noise() {  # name, seconds, workload, rounds
  timeout "$2" python3 benchmarks/timing_noise.py --device cuda --world-size 1 --workload "$3" --rounds "$4" \
    --variants default,timing_min_block_s=0.05 --out "$OUT/$1.md" > "$OUT/$1.log" 2>&1
  echo "$1 exit $?"; grep -E "^\| (default|timing)" "$OUT/$1.md" 2>/dev/null || tail -5 "$OUT/$1.log"
}
cost() {  # name, seconds, judge_cost arguments...
  local name=$1 budget=$2; shift 2
  { echo '```'; echo "\$ python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --landed .landed $*"; echo '```'; echo
    timeout "$budget" python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --landed .landed "$@"; } > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name exit $?"; grep -E "^- world|^world|GiB" "$OUT/$name.md"
}
[ "${NOISE_ROUNDS:-14}" -gt 0 ] && noise noise_small 170 tests/evaluator/workloads/linear_allreduce.py "${NOISE_ROUNDS:-14}"
cost judge_cost_cuda 190 --also sized --candidates 6 --rounds 2
cost judge_cost_cuda_sized $((570 - SECONDS)) --candidates 5 --rounds "${SIZED_ROUNDS:-2}" --workload benchmarks/workloads/linear_allreduce_sized.py
