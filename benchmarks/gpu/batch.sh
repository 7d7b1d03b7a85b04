#!/usr/bin/env bash
# One resumable slice of a suite batch on a GPU machine, under a wall-clock budget.
#   [KLOOM_BATCH_DIR=results/gpu/NAME] benchmarks/gpu/batch.sh WORLD_SIZE SECONDS [extra kloom bench run args]
# The batch lives in results/gpu/<machine>-ws<N>/ inside the repository, so that a later call
# (on this machine while it is warm, or on a fresh one that receives the working tree) continues
# it. A tarball of it goes to $OUT/batch-ws<N>.tgz for the caller to bring home.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/gpu/env.sh
ws=$1; budget=$2; shift 2
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
# KLOOM_BATCH_DIR picks another directory (a re-run after strategist changes, say).
dir="${KLOOM_BATCH_DIR:-results/gpu/h200x${gpus}-ws${ws}}"
mkdir -p "$dir"
export KLOOM_EVAL_TIMING_BUDGET_S=${KLOOM_EVAL_TIMING_BUDGET_S:-0.5}
echo "python3 -m kloom.cli bench run -n $ws --device cuda --max-iters 4 --max-wall-s 45 --profile none --no-kb --out $dir $*" > "$dir/command.txt"
timeout -s INT "$budget" python3 -m kloom.cli bench run -n "$ws" --device cuda --max-iters 4 --max-wall-s 45 \
  --profile none --no-kb --out "$dir" "$@" 2>&1 | tee -a "$OUT/batch-ws${ws}.log" | grep -v "^\s*$" | tail -60
pkill -9 -f "[s]ervices.worker.evaluator.rank" 2>/dev/null
python3 -m kloom.cli bench report "$dir" > "$OUT/report-ws${ws}.txt" 2>&1
tail -22 "$OUT/report-ws${ws}.txt"
tar czf "$OUT/batch-ws${ws}.tgz" "$dir"
