#!/usr/bin/env bash
# A short first call on a 4-GPU machine: does the rank sandbox carry NCCL, do the evaluator's CUDA
# tests pass (GPUs 0,1), and how do the strategies that changed since the last batch fare on a few
# workloads at world size 2 (GPUs 2,3, at the same time). Logs and a tarball land in $OUT.
set -u
cd "$(dirname "$0")/../.."
. benchmarks/gpu/env.sh
{ nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/machine.txt" 2>&1
timeout 150 python3 -m pytest -q -m gpu tests/evaluator/test_sandbox_nccl.py -p no:cacheprovider > "$OUT/sandbox.log" 2>&1
echo "sandbox tests exit $?"; tail -3 "$OUT/sandbox.log"
grep -q " passed" "$OUT/sandbox.log" && ! grep -q "failed" "$OUT/sandbox.log" || export KLOOM_EVAL_ISOLATE_NETWORK=0
( CUDA_VISIBLE_DEVICES=0,1 timeout 330 python3 -m pytest -q tests/evaluator -k cuda -p no:cacheprovider \
    --junitxml="$OUT/evaluator-cuda.xml" > "$OUT/evaluator-cuda.log" 2>&1; echo "exit $?" >> "$OUT/evaluator-cuda.log" ) &
ws=()
for w in ${PROBE_WORKLOADS:-tp_allgather_gemm tp_gemm_reducescatter cp_allgather_kv_attention causal_conv1d_cp moe_dispatch}; do ws+=(-w "$w"); done
CUDA_VISIBLE_DEVICES=2,3 KLOOM_EVAL_TIMING_BUDGET_S=0.5 timeout 330 python3 -m kloom.cli bench run -n 2 --device cuda \
  --max-iters 4 --max-wall-s 45 --profile none --no-kb --out /tmp/probe "${ws[@]}" > "$OUT/probe.log" 2>&1
echo "probe batch exit $?"
wait
tail -4 "$OUT/evaluator-cuda.log"
python3 -m kloom.cli bench report /tmp/probe > "$OUT/probe-report.txt" 2>&1; tail -12 "$OUT/probe-report.txt"
tar czf "$OUT/probe.tgz" -C /tmp probe 2>/dev/null
