#!/usr/bin/env bash
# Small, launch-bound networks on one GPU (tests/importers/fixtures/whole_models/): what decides
# their time besides the kernels. (1) The host cost of the kernel strategy's replay, beside eager
# and torch.compile (replay_overhead.py). (2) How a model's time moves from one fresh process to
# the next: left to the scheduler, pinned to one CPU, with a fixed hash seed (process_spread.py).
# (3) The judge's speedup of the reference against itself, each evaluation with fresh candidate
# processes (timing_noise.py). Everything in $OUT/launch_bound.log; rows also in
# $OUT/replay.jsonl and $OUT/timing_noise_*.{md,jsonl}.
#
#   bash benchmarks/gpu/launch_bound.sh [rounds]   (about 7 minutes on an H100 with 3 rounds)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
rounds="${1:-3}"
log="$OUT/launch_bound.log"
timeout 150 python3 benchmarks/gpu/replay_overhead.py --out "$OUT/replay.jsonl" >> "$log" 2>&1
echo "exit $? (replay_overhead)" >> "$log"
for m in residual_cnn transformer_encoder; do
  timeout 150 python3 benchmarks/gpu/process_spread.py "tests/importers/fixtures/whole_models/$m.py" --processes 5 \
    --placements scheduler,cpus=3,hashseed >> "$log" 2>&1
  timeout 130 python3 benchmarks/timing_noise.py --device cuda --world-size 1 --rounds "$rounds" \
    --workload "tests/importers/fixtures/whole_models/$m.py" --out "$OUT/timing_noise_$m.md" >> "$log" 2>&1
  echo "exit $? ($m)" >> "$log"
done
grep -E "x eager|max/min|^\| default \||exit|not built" "$log"
