#!/usr/bin/env bash
# The GEMM/conv check and measurement on one H100 as ONE command of at most ~6 minutes: every step
# has its own timeout, and they sum to 30 + 75 + 45 + 60 + (budget + 30) = 410 s at the default
# budget (at most 490 s: the budget is capped at 220 s).
#   1. verify_conv: the convolution kernel against eager cuDNN and the float64 result, the shapes
#      the first run flagged under every tile configuration, and the corners (kernels/conv/verify_conv.py);
#   2. bench_gemm: the triangular product, the one kind that won (the other patterns' results are
#      in results/gpu/h100-gemm-conv-1/);
#   3. bench_conv: the 3-D and grouped convolutions the first run did not reach;
#   4. gemm_conv: the KernelBench development split's GEMM/conv problems that the first run did not
#      measure (max-autotune on two of them), within the budget.
# $OUT receives two files: gemm_conv_summary.md (the step log and every table) and
# gemm_conv_run.tgz (the tables, JSON and logs of every step).
#   usage: bash benchmarks/gpu/gemm_conv.sh [KernelBench folder] [seconds for the KernelBench part, <= 220]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/env.sh
KB="${1:-shared/third_party/kernelbench/KernelBench}"
BUDGET="${2:-170}"
[ "$BUDGET" -gt 220 ] && BUDGET=220
WORK="$(mktemp -d)"
pack() {
  cat "$WORK/steps.txt" "$WORK/verify_conv.md" "$WORK/bench_gemm.md" "$WORK/bench_conv.md" "$WORK/gemm_conv.md" > "$OUT/gemm_conv_summary.md" 2>/dev/null
  tar czf "$OUT/gemm_conv_run.tgz" -C "$WORK" .
  echo "packed: $OUT/gemm_conv_summary.md, $OUT/gemm_conv_run.tgz"
}
trap pack EXIT
step() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
  echo "- $name: exit $? after $((SECONDS - start)) s (limit $limit s)" | tee -a "$WORK/steps.txt"
}
echo "# GEMM/conv GPU run: \`bash benchmarks/gpu/gemm_conv.sh $*\`" > "$WORK/steps.txt"
timeout 30 python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee -a "$WORK/steps.txt"
echo >> "$WORK/steps.txt"
step verify_conv 75 python3 kernels/conv/verify_conv.py --out "$WORK" --budget-s 50
step bench_gemm 45 python3 kernels/gemm/bench_gemm.py --out "$WORK" --patterns tril --budget-s 25
step bench_conv 60 python3 kernels/conv/bench_conv.py --out "$WORK" --patterns conv3d groups --budget-s 35
step gemm_conv $((BUDGET + 30)) python3 benchmarks/gpu/gemm_conv.py --kernelbench "$KB" --out "$WORK" \
  --known results/gpu/h100-gemm-conv-1/gemm_conv.json --budget-s "$BUDGET" --max-autotune 2
echo >> "$WORK/steps.txt"
