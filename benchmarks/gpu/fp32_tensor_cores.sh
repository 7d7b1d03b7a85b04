#!/usr/bin/env bash
# Float32 on the tensor cores as three TF32 products, the parts not measured with their verdicts
# yet (issue 22): attention against PyTorch's float32 kernel and inductor
# (kernels/gemm/bench_gemm.py --patterns attention), its verdict written into this copy's
# kernels/wins.json by kernels/verdict.py, and the convolutions' error against float64 beside
# cuDNN's (benchmarks/gpu/fp32x3_probe.py --only conv; SKIP_PROBE=1 leaves it out). The
# convolutions' speed and verdicts are conv_taps_kb.sh's. Writes under $OUT: attn/, probe/, a log
# of each, and wins.json (commit it where the kind won). About four minutes.
#
#   bash benchmarks/gpu/fp32_tensor_cores.sh            (carry nothing: torch and triton suffice)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/env.sh
mkdir -p "$OUT/attn" "$OUT/probe"
nvidia-smi -L > "$OUT/machine.txt" 2>&1
timeout 90 python3 kernels/gemm/bench_gemm.py --out "$OUT/attn" --patterns attention > "$OUT/attn.log" 2>&1
echo "attention: exit $?"; tail -4 "$OUT/attn/bench_gemm.md" 2>/dev/null
python3 -m kernels.verdict "$OUT/attn/bench_gemm.json" --kind attention_fp32x3 --match "tf32x3 attention" \
  --command "python kernels/gemm/bench_gemm.py --patterns attention (benchmarks/gpu/fp32_tensor_cores.sh)"
cp kernels/wins.json "$OUT/wins.json"
if [ -z "${SKIP_PROBE:-}" ]; then
  timeout 130 python3 benchmarks/gpu/fp32x3_probe.py --out "$OUT/probe" --only conv --budget-s 100 > "$OUT/probe.log" 2>&1
  echo "probe: exit $?"; tail -6 "$OUT/probe/fp32x3_probe.md" 2>/dev/null
fi
