#!/usr/bin/env bash
# kloom's float32 convolutions (three-way TF32 products) measured, their verdicts written, and
# KernelBench's convolution problems run through kloom with those verdicts, in one device call
# (issue 22): bench_conv's patterns named in CONV_PATTERNS (words separated by "|"; kernels/conv/bench_conv.py, each
# beside cuDNN, its autotuner and inductor; default "folded-transposed|depthwise", the few-channel
# transposed kernel and the depthwise one (whose autotuning now has row tiles too); "folded tf32x3"
# is the few-channel plain one, "taps tf32x3" the tap-outer one), then kernels/verdict.py writes the verdicts of the kinds those
# patterns measure into this copy's kernels/wins.json (a kind none of them measured is left as it
# was; conv_fp32x3 and conv_transposed_fp32x3 of the layout that did better: the input as it comes
# or made channels-last first, which the templates then use), then kernelbench_subset.sh
# re-measures the problems named in KB_IF_WON when a kind won, else those in KB_ELSE, with what is
# left of the call.
#
#   KB_IF_WON="level2/65_ level2/1_" KB_ELSE="level2/81_" bash benchmarks/gpu/conv_taps_kb.sh [resume folder]
#
# Carry .whl, .gpu and the resume folder. Writes under $OUT: conv.tgz (conv/bench_conv.json and .md,
# conv.log, verdicts.log), wins.json (this copy's, to commit where a kind won), and kernelbench.sh's
# files. CONV_BUDGET_S (default 200) bounds the patterns started; POOL_BUDGET_S, where set, runs
# kernels/pool/bench_pool.py too (within it) and writes the pool kind's verdict.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/env.sh
RESUME="${1:-kb-resume}"
LIMIT_S="${KLOOM_CALL_LIMIT_S:-585}"
mkdir -p "$OUT/conv"
won=0
PATTERNS="${CONV_PATTERNS:-folded-transposed|depthwise}"
IFS='|' read -r -a WORDS <<< "$PATTERNS"
timeout $((${CONV_BUDGET_S:-200} + 120)) python3 kernels/conv/bench_conv.py --out "$OUT/conv" --patterns "${WORDS[@]}" \
  --budget-s "${CONV_BUDGET_S:-200}" > "$OUT/conv.log" 2>&1
echo "conv: exit $?"; cat "$OUT/conv/bench_conv.md" 2>/dev/null
if [ -n "${POOL_BUDGET_S:-}" ]; then
  timeout $((POOL_BUDGET_S + 90)) python3 kernels/pool/bench_pool.py --out "$OUT/conv" --budget-s "$POOL_BUDGET_S" >> "$OUT/conv.log" 2>&1
  echo "pool: exit $?"; cat "$OUT/conv/bench_pool.md" 2>/dev/null
  python3 -m kernels.verdict "$OUT/conv/bench_pool.json" --kind pool --match "pool" \
    --command "python kernels/pool/bench_pool.py (benchmarks/gpu/conv_taps_kb.sh)" >> "$OUT/verdicts.log" 2>&1 && won=1
fi
ROWS="$OUT/conv/bench_conv.json"
CMD="python kernels/conv/bench_conv.py --patterns '$PATTERNS' (benchmarks/gpu/conv_taps_kb.sh)"
python3 -m kernels.verdict "$ROWS" --kind conv_fp32x3 --match "taps tf32x3 conv2d" "taps tf32x3 conv3d" --layouts \
  --command "$CMD" >> "$OUT/verdicts.log" 2>&1 && won=1
python3 -m kernels.verdict "$ROWS" --kind conv_transposed_fp32x3 --match "taps tf32x3 conv_transpose" --layouts \
  --command "$CMD" >> "$OUT/verdicts.log" 2>&1 && won=1
python3 -m kernels.verdict "$ROWS" --kind conv_folded_fp32x3 --match "folded tf32x3" \
  --command "$CMD" >> "$OUT/verdicts.log" 2>&1 && won=1
python3 -m kernels.verdict "$ROWS" --kind conv_transposed_folded_fp32x3 --match "folded-transposed tf32x3" \
  --command "$CMD" >> "$OUT/verdicts.log" 2>&1 && won=1
python3 -m kernels.verdict "$ROWS" --kind conv_depthwise --match "depthwise" \
  --command "$CMD" >> "$OUT/verdicts.log" 2>&1 && won=1
cat "$OUT/verdicts.log"; cp kernels/wins.json "$OUT/wins.json"
# A call brings back 8 files at most: the convolution part travels as one archive.
tar czf "$OUT/conv.tgz" -C "$OUT" conv conv.log verdicts.log && rm -rf "$OUT/conv" "$OUT/conv.log" "$OUT/verdicts.log"
if [ "$won" = 1 ]; then PROBLEMS="${KB_IF_WON:-}"; else PROBLEMS="${KB_ELSE:-}"; fi
LEFT=$((LIMIT_S - SECONDS))
echo "after ${SECONDS} s: a kind won: $won; re-measuring: ${PROBLEMS:-nothing} in ${LEFT} s"
if [ -n "$PROBLEMS" ] && [ "$LEFT" -gt 150 ]; then
  # shellcheck disable=SC2086  # the problems are words
  KLOOM_CALL_LIMIT_S="$LEFT" bash benchmarks/gpu/kernelbench_subset.sh "$RESUME" 3 $PROBLEMS 2>&1 | tail -30
fi
