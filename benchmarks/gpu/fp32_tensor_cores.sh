#!/usr/bin/env bash
# Float32 on the tensor cores as three TF32 products, every kind at once on one GPU (issue 22):
# the tap-outer convolutions (plain and transposed) and attention against cuDNN/PyTorch and
# inductor, and the error of each against float64 beside the library's. Writes under $OUT:
# conv/ (kernels/conv/bench_conv.py --patterns taps), attn/ (kernels/gemm/bench_gemm.py
# --patterns attention), probe/ (benchmarks/gpu/fp32x3_probe.py --only conv), and a log of each.
# Each part has a time limit; a part cut short keeps what it wrote (run the patterns it did not
# reach with CONV_PATTERNS, one substring of their names: CONV_PATTERNS="taps tf32x3 conv_transpose", and
# SKIP_PROBE=1). About nine minutes.
#
#   bash benchmarks/gpu/fp32_tensor_cores.sh            (carry nothing: torch and triton suffice)
#
# The attention verdict is written by kernels/verdict.py; the convolutions' by conv_taps_kb.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/env.sh
mkdir -p "$OUT/conv" "$OUT/attn" "$OUT/probe"
nvidia-smi -L > "$OUT/machine.txt" 2>&1
timeout 330 python3 kernels/conv/bench_conv.py --out "$OUT/conv" --patterns "${CONV_PATTERNS:-taps}" --budget-s 300 > "$OUT/conv.log" 2>&1
echo "conv: exit $?"; tail -20 "$OUT/conv/bench_conv.md" 2>/dev/null
timeout 90 python3 kernels/gemm/bench_gemm.py --out "$OUT/attn" --patterns attention > "$OUT/attn.log" 2>&1
echo "attention: exit $?"; tail -4 "$OUT/attn/bench_gemm.md" 2>/dev/null
# The attention kind's verdict from those rows (this copy's kernels/wins.json, brought back as
# $OUT/wins.json: commit it where the kind won).
python3 -m kernels.verdict "$OUT/attn/bench_gemm.json" --kind attention_fp32x3 --match "tf32x3 attention" \
  --command "python kernels/gemm/bench_gemm.py --patterns attention (benchmarks/gpu/fp32_tensor_cores.sh)"
cp kernels/wins.json "$OUT/wins.json"
if [ -z "${SKIP_PROBE:-}" ]; then
  timeout 130 python3 benchmarks/gpu/fp32x3_probe.py --out "$OUT/probe" --only conv --budget-s 100 > "$OUT/probe.log" 2>&1
  echo "probe: exit $?"; tail -6 "$OUT/probe/fp32x3_probe.md" 2>/dev/null
fi
