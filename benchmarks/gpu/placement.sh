#!/usr/bin/env bash
# Where a rank process runs, on one GPU: the spread of a launch-bound model's time over fresh
# processes left to the scheduler or pinned (process_spread.py), then the judge's reference-copy
# speedup with both sides' ranks pinned to the same CPUs or not (timing_noise.py), for the small
# networks of tests/importers/fixtures/whole_models/. Everything in $OUT/placement.log, the
# judge's rounds also in $OUT/timing_noise_<model>.{md,jsonl}.
#
#   bash benchmarks/gpu/placement.sh [rounds]   (about 8 minutes on an H100 with 4 rounds)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
rounds="${1:-4}"
models="residual_cnn transformer_encoder separable_shuffle"
for m in $models; do
  timeout 90 python3 benchmarks/gpu/process_spread.py "tests/importers/fixtures/whole_models/$m.py" --processes 4 >> "$OUT/placement.log" 2>&1
done
for m in $models; do
  timeout 150 python3 benchmarks/timing_noise.py --device cuda --world-size 1 --rounds "$rounds" --variants pinned,unpinned \
    --workload "tests/importers/fixtures/whole_models/$m.py" --out "$OUT/timing_noise_$m.md" >> "$OUT/placement.log" 2>&1
  echo "exit $? ($m)" >> "$OUT/placement.log"
done
grep -E "max/min|^\| (pinned|unpinned) \||exit" "$OUT/placement.log"
