#!/usr/bin/env bash
# The strategies' runtimes (agents/strategist/<strategy>/runtime.py, issue 23) on GPUs: the GPU
# tests of each rewriting strategy, whose candidates now carry the runtime copied from its module.
# Needs 2+ GPUs. One step per device call (each fits a 10-minute call); logs land in $OUT/strategist-gpu/
# (at most 5 files a step):
#   bash benchmarks/gpu/strategist_runtimes.sh a [s]   fused_matmul, prefetch, split attention, bincount
#   bash benchmarks/gpu/strategist_runtimes.sh b [s]   depthwise, coalesce, gather, overlap, runtimes
# [s]: the step's time limit in seconds (default 540), shared by its files. A file whose log in
# $OUT already ends in a pass is not run again (resumable within one machine's $OUT).
set -u
cd "$(dirname "$0")/../.."
. benchmarks/gpu/prelude.sh
step="${1:-a}"
limit="${2:-540}"
dest="$OUT/strategist-gpu"
mkdir -p "$dest"
case "$step" in
  a) files="test_fused_matmul test_prefetch test_split_attention test_bincount" ;;
  b) files="test_depthwise test_coalesce test_gather test_overlap test_runtimes" ;;
  *) echo "unknown step $step (a or b)"; exit 2 ;;
esac
per=$(( limit / $(echo $files | wc -w) ))
echo "GPUs: $(python3 -c 'import torch; print(torch.cuda.device_count())'); step $step; ${per}s a file"
for f in $files; do
  log="$dest/$f.log"
  if [ -f "$log" ] && tail -1 "$log" | grep -q " passed" && ! tail -1 "$log" | grep -q -E "failed|error"; then echo "$f: passed earlier"; continue; fi
  timeout "$per" python3 -m pytest -q -p no:cacheprovider -rs "tests/agents/$f.py" > "$log" 2>&1
  echo "$f exit $?: $(tail -1 "$log")"
done
