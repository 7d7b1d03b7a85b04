#!/usr/bin/env bash
# The judge of version 2 on one GPU: its GPU-marked tests (attacks with the static checker off:
# forged CUDA events, TF32 on and hidden, the device-memory limit through the allocator's
# per-process fraction), the evaluator's CUDA tests that fit one GPU, and the per-candidate cost
# against the landed judge (e6eea0b, version 1) at world size 1. Writes at most 6 files to $OUT (with the
# prelude's); at most 8 minutes; each step is skipped when its output is already in $OUT (resumable).
#
# Before the call, here (the device has no git history): make the landed tree and carry it,
#   mkdir -p .landed && git archive e6eea0b services kloom tests/evaluator | tar -x -C .landed
#   cp services/worker/evaluator/sandbox_view.py .landed/services/worker/evaluator/
# (the landed sandbox made /proc read-only, where CUDA does not start: Error 304; the copy compares
# the two judges' protocols under the same sandbox)
#   run(command="bash benchmarks/gpu/judge.sh", carry=[".landed", ".whl"])
set -u
. "$(dirname "${BASH_SOURCE[0]}")/prelude.sh"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -s "$OUT/judge-gpu-tests.log" ]; then
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/evaluator/test_judge_gpu.py \
    --junitxml="$OUT/judge-gpu-tests.xml" > "$OUT/judge-gpu-tests.log" 2>&1
  echo "judge GPU tests exit $?"
fi
tail -5 "$OUT/judge-gpu-tests.log"
if [ ! -s "$OUT/judge_cost_cuda.md" ]; then
  landed=""
  [ -d .landed/services ] && landed="--landed .landed"
  if [ -n "$landed" ] || [ -d .git ]; then
    { echo '```'; echo "\$ python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --candidates 8 --rounds 2 $landed"; echo '```'; echo
      timeout 200 python3 benchmarks/judge_cost.py --device cuda --world-sizes 1 --candidates 8 --rounds 2 $landed; } > "$OUT/judge_cost_cuda.md" 2>&1
    echo "judge cost exit $?"
  else
    echo "no landed tree (.landed) and no git history: the cost comparison needs one" > "$OUT/judge_cost_cuda.md"
  fi
fi
tail -6 "$OUT/judge_cost_cuda.md"
mkdir -p benchmarks/results && cp "$OUT/judge_cost_cuda.md" benchmarks/results/judge_cost_cuda.md 2>/dev/null
