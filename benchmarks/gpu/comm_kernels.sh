#!/usr/bin/env bash
# kloom's comm kernels (issue 24) on whatever GPUs this machine has; everything lands in
# $OUT/comm-kernels/. One step per call (each fits a 10-minute device call):
#   bash benchmarks/gpu/comm_kernels.sh check [s]  every configuration of every kernel compiled and run
#                                                  on ONE GPU with 2 and 4 simulated ranks, against torch
#   bash benchmarks/gpu/comm_kernels.sh tests [s]  2+ GPUs: the kernels' GPU tests (real symmetric memory
#                                                  against torch + NCCL and torch's fused ops) and each
#                                                  overlap-strategy way through the evaluator
#   bash benchmarks/gpu/comm_kernels.sh bench [s]  the benchmark: world sizes 2 and 4 where the machine
#                                                  has the GPUs, else world size 1 (first case of each)
# [s]: the step's time limit in seconds (default 540).
set -u
cd "$(dirname "$0")/../.."
step="${1:-check}"
limit="${2:-540}"
if [ "$step" = tests ]; then . benchmarks/gpu/prelude.sh; else . benchmarks/gpu/env.sh; fi
dest="$OUT/comm-kernels"
mkdir -p "$dest"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "GPUs: $gpus; step: $step"
case "$step" in
  check)
    timeout "$limit" python3 -m kernels.comm.gpu_check --simulate 2 4 --out "$dest" > "$dest/gpu_check.log" 2>&1
    echo "gpu_check exit $?"; grep -v '"ok": true' "$dest/gpu_check.log" | tail -20 ;;
  tests)
    timeout "$(( limit / 2 ))" python3 -m pytest -q -m gpu tests/kernels/comm/test_gpu.py -p no:cacheprovider > "$dest/gpu-tests-kernels.log" 2>&1
    echo "kernel GPU tests exit $?"; tail -15 "$dest/gpu-tests-kernels.log"
    timeout "$(( limit / 2 ))" python3 -m pytest -q -m gpu tests/agents/test_overlap.py -p no:cacheprovider > "$dest/gpu-tests-overlap.log" 2>&1
    echo "overlap GPU tests exit $?"; tail -15 "$dest/gpu-tests-overlap.log" ;;
  bench)
    if [ "$gpus" -ge 4 ]; then sizes="2 4"; elif [ "$gpus" -ge 2 ]; then sizes="2"; else sizes="1"; fi
    quick=""; [ "$gpus" -ge 2 ] || quick="--quick"
    per=$(( (limit - 20) / $(echo $sizes | wc -w) ))
    timeout "$limit" python3 -m kernels.comm.bench --world-sizes $sizes $quick --timeout "$per" --out "$dest" > "$dest/bench.log" 2>&1
    echo "bench exit $?"; grep -E "^## |^\| |^floors|^fraction|problem" "$dest/bench.log" | head -80 ;;
  *) echo "unknown step $step (check, tests or bench)"; exit 2 ;;
esac
