#!/usr/bin/env bash
# Small, launch-bound networks on one GPU (tests/importers/fixtures/whole_models/): what decides
# their time besides the kernels. (1) Where a process runs: a model's time over fresh processes
# left to the scheduler or pinned (process_spread.py), then the judge's reference-copy speedup
# with both sides' ranks pinned to the same CPUs or not (timing_noise.py). (2) The host cost of
# the kernel strategy's replay, beside eager and torch.compile (replay_overhead.py).
# Everything in $OUT/launch_bound.log; rows also in $OUT/replay.jsonl and $OUT/timing_noise_*.
#
#   bash benchmarks/gpu/launch_bound.sh [rounds]   (about 6 minutes on an H100 with 3 rounds)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/prelude.sh
rounds="${1:-3}"
log="$OUT/launch_bound.log"
timeout 120 python3 benchmarks/gpu/replay_overhead.py --out "$OUT/replay.jsonl" >> "$log" 2>&1
echo "exit $? (replay_overhead)" >> "$log"
for m in residual_cnn transformer_encoder separable_shuffle; do
  timeout 60 python3 benchmarks/gpu/process_spread.py "tests/importers/fixtures/whole_models/$m.py" --processes 3 --placements scheduler,cpus=0-7 >> "$log" 2>&1
done
for m in residual_cnn transformer_encoder; do
  timeout 130 python3 benchmarks/timing_noise.py --device cuda --world-size 1 --rounds "$rounds" --variants pinned,unpinned \
    --workload "tests/importers/fixtures/whole_models/$m.py" --out "$OUT/timing_noise_$m.md" >> "$log" 2>&1
  echo "exit $? ($m)" >> "$log"
done
grep -E "x eager|max/min|^\| (pinned|unpinned) \||exit|not built" "$log"
